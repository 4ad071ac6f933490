"""The one reader of a profile's `engine:` options and `env:` entries, and the rules over what it
reads. `read_options` reads each key once as vLLM's `vllm serve` parser reads `--KEY` (`Option`);
every rule asks the result (`Resolved.options`: the refusals below, the PP, shape and P/D rules) and
the launch builder forms the argv from it. What ppspec knows about vLLM's options (the flags it
manages, the ones it refuses, the risky ones, the parser's names) is knowledge/options.py.

`check` reports these findings and `serve` refuses on them: one rule set. What only this machine
can say (the caller's shell, the installed parser's names) is the `here` question's
(planning/here.py)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from ppspec_cli.errors import PpspecError
from ppspec_cli.findings import Code, Finding
from ppspec_cli.findings.codes import (
    ENGINE_AMBIGUOUS_OPTION,
    ENGINE_BAD_OPTION_NAME,
    ENGINE_MANAGED_OPTION,
    ENGINE_OVERRIDES_DEPTH,
    ENGINE_REFUSED_OPTION,
    ENGINE_SECRET_OPTION,
    ENGINE_UNKNOWN_OPTION,
    ENGINE_UNTRUSTED_OPTION,
    ENV_OVERRIDES_PLAN,
    ENV_PLUGINS_SKIP_PPSPEC,
    ENV_SECRET,
    ENV_UNTRUSTED_ENTRY,
    UNTRUSTED_ACKNOWLEDGED,
)
from ppspec_cli.io import safeio
from ppspec_cli.io.redact import is_secret_name
from ppspec_cli.knowledge.options import (
    DEPTH_KEYS,
    FLAG_NAME,
    MANAGED_FLAGS,
    PLAN_ENV,
    REFUSED_FLAGS,
    RISKS,
    SHORT,
    UNTRUSTED_ENV,
    UNTRUSTED_OPTIONS,
    UNTRUSTED_SUBKEYS,
    env_risk,
    vllm_option_strings,
)

__all__ = [
    "PLAN_ENV",
    "UNTRUSTED_ENV",
    "UNTRUSTED_OPTIONS",
    "EngineOptions",
    "Option",
    "launch_refusals",
    "option_value",
    "read_option",
    "read_options",
    "unknown_options",
    "untrusted_findings",
    "vllm_option_strings",
]


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
    head = SHORT.get(head, head)
    subkeys = tuple(tail.split(".")) if tail else ()
    name = ".".join((head, *subkeys))
    if head in opts:
        full, ambiguous = head, tuple[str, ...]()
    else:
        cands = sorted(o for o in opts if o.startswith(head)) if head else []
        full, ambiguous = (cands[0], ()) if len(cands) == 1 else (head, tuple(cands))
    known = full in opts
    negated = known and full.startswith("no-") and full[3:] in opts
    flag = full[3:] if negated else full
    return Option(raw, name, flag, subkeys, negated, known, ambiguous if len(ambiguous) > 1 else ())


@dataclasses.dataclass(frozen=True)
class Entry:
    """One `engine:` key and its value, read."""

    option: Option
    value: Any


@dataclasses.dataclass(frozen=True)
class EngineOptions:
    """A profile's `engine:` read once (in its order): what every rule and the launch ask."""

    entries: tuple[Entry, ...] = ()

    def get(self, flag: str, default: Any = None) -> Any:
        """The value the option `flag` is set to (its last setting, as argparse takes it; `no-x: true`
        sets x false; a dotted key sets part of it and does not count), else `default`."""
        got = [
            (not e.value if e.option.negated and isinstance(e.value, bool) else e.value)
            for e in self.entries
            if e.option.flag == flag and not e.option.subkeys
        ]
        return got[-1] if got else default

    def value(self, flag: str) -> tuple[bool, Any]:
        """(whether a key sets the option `flag`, the JSON value it sets: its last setting; a dotted
        key nests its value under its keys; `no-x` sets x false), the memory model's question."""
        got = [e for e in self.entries if e.option.flag == flag]
        if not got:
            return False, None
        e = got[-1]
        return True, False if e.option.negated else option_value(e.option, e.value)

    def sets(self, *flags: str) -> bool:
        """Whether any key sets (part of) one of these options."""
        return any(e.option.flag in flags for e in self.entries)


def read_options(engine: Mapping[str, Any]) -> EngineOptions:
    """The `engine:` mapping read with vLLM 0.32's option names (knowledge/options.py)."""
    return EngineOptions(tuple(Entry(read_option(k), v) for k, v in engine.items()))


def managed_by(opt: Option) -> str | None:
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


def depth_keys(v: Any, depth: int = 0) -> list[str]:
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
        found += depth_keys(sub, depth + 1)
    return found


def launch_refusals(
    engine: Mapping[str, Any],
    env: Mapping[str, str],
    trust: Mapping[str, Any] | None = None,
    kv_transfer: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """Everything `serve` refuses about the engine options and the profile's `env:`, as findings.
    `check` reports these and `serve` refuses on them: one rule set. (What the caller's shell and
    the installed parser say is the `here` question's: planning/here.py.)"""
    out: list[Finding] = []
    for k in engine:
        key = str(k)
        opt = read_option(key)
        name = opt.name
        fld = f"engine.{key[:80]}"
        if not FLAG_NAME.match(name):
            out.append(ENGINE_BAD_OPTION_NAME.at("engine", f"engine key {key[:80]!r} is not an option name"))
            continue
        head = name.partition(".")[0]
        if head != head.lower():  # vLLM's options are lower-case and argparse does not fold case
            out.append(
                ENGINE_BAD_OPTION_NAME.at(
                    "engine",
                    f"engine key {key[:80]!r} is not an option name: vLLM's option names are lower-case and its "
                    f"parser does not fold case, so it refuses `--{head[:80]}` at start",
                    fix=f"write it in lower case (`{head.lower()[:80]}`)",
                )
            )
            continue
        base = opt.flag  # `speculative-config.method` sets part of a managed flag
        owner = managed_by(opt)
        if is_secret_name(key):
            out.append(
                ENGINE_SECRET_OPTION.at(
                    fld,
                    f"engine.{key} is a secret written into the profile (it would be on the engine's command line "
                    "and in launch.json)",
                )
            )
        elif owner is not None:
            out.append(
                ENGINE_MANAGED_OPTION.at(
                    fld,
                    f"engine.{key} sets a flag ppspec derives from the profile ({owner})",
                    fix=f"set `{owner}` instead and remove engine.{key}",
                )
            )
        elif base in REFUSED_FLAGS:
            out.append(
                ENGINE_REFUSED_OPTION.at(fld, f"engine.{key} is not supported by ppspec", fix=REFUSED_FLAGS[base])
            )
        elif opt.ambiguous:
            out.append(
                ENGINE_AMBIGUOUS_OPTION.at(
                    fld,
                    f"engine.{key[:80]} is a prefix of several vLLM options "
                    f"({', '.join(opt.ambiguous[:6])}{', ...' if len(opt.ambiguous) > 6 else ''}): vLLM refuses it "
                    "at start",
                )
            )
        elif base == "hf-overrides":
            keys = depth_keys(option_value(opt, engine[k]))
            if keys:
                out.append(
                    ENGINE_OVERRIDES_DEPTH.at(
                        fld,
                        f"engine.{key} sets {sorted(set(keys))}: the engine would build a model of another depth "
                        "than the one checked and planned",
                        fix="point target.model at a checkpoint whose config.json has that depth (ppspec plans from "
                        "the checkpoint)",
                    )
                )
    for k in sorted(env):
        if is_secret_name(k):
            out.append(
                ENV_SECRET.at(
                    f"env.{k}",
                    f"env.{k} looks like a secret written into the profile",
                    fix="remove it from the profile and export it in the shell that runs `ppspec serve` (the engine "
                    "inherits that environment); "
                    "for the server's API key set server.api_key_env to the variable's name",
                )
            )
        elif k in PLAN_ENV or k.startswith("PPSPEC_"):
            out.append(ENV_OVERRIDES_PLAN.at(f"env.{k}", f"env.{k} would override what ppspec sets from the plan"))
    val = env.get("VLLM_PLUGINS")
    if val is not None and not plugins_keep_ppspec(val):
        out.append(
            ENV_PLUGINS_SKIP_PPSPEC.at(
                "env.VLLM_PLUGINS",
                f"VLLM_PLUGINS={val[:80]!r} leaves out ppspec: its plugin would not run in the engine, which "
                "would serve without the plan's checks and patches",
            )
        )
    out += [f for f in untrusted_findings(engine, env, trust, kv_transfer) if f.kind is not UNTRUSTED_ACKNOWLEDGED]
    return out


def plugins_keep_ppspec(value: str) -> bool:
    """Whether a VLLM_PLUGINS value lets ppspec's plugin load (vLLM: `os.environ["VLLM_PLUGINS"].split(",")`,
    names compared exactly)."""
    return "ppspec" in value.split(",")


def unknown_options(options: EngineOptions, names: frozenset[str] | None) -> list[Finding]:
    """`engine-unknown-option` for each `engine:` key the installed vLLM's `serve` parser (`names`,
    gathered) does not know ([] when its names were not read). Exact names only: argparse would
    also take an unambiguous prefix (`trust-remote`), which could set a flag ppspec manages."""
    if names is None:
        return []
    return [
        ENGINE_UNKNOWN_OPTION.at(
            f"engine.{str(e.option.key)[:80]}",
            f"the installed vLLM does not know the engine option {e.option.key[:80]!r}",
        )
        for e in options.entries
        if not read_option(e.option.key, names).known
    ]


def _dig(val: Mapping[str, Any], dotted: str) -> Any:
    """val["a"]["b"] for "a.b" (None where a level is missing or not a mapping)."""
    got: Any = val
    for part in dotted.split("."):
        if not isinstance(got, Mapping):
            return None
        got = got.get(part)
    return got


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


_ACKED = "fine if you wrote this profile or trust who did"
_READ = "once you have read what it points at"


def _risk(code: Code, label: str, risk: tuple[str, str], section: str, name: str, acked: bool) -> Finding:
    """One risky option or entry: `code` (an error: serve refuses), or a warning when `trust.<section>`
    acknowledges it by `name`."""
    kind, what = risk
    said = f"{label} {RISKS[kind]} ({kind}: {what})"
    if acked:
        return UNTRUSTED_ACKNOWLEDGED.at(label, f"{said} — acknowledged in `trust.{section}`", fix=_ACKED)
    ack = f"trust: {{{section}: [{name}]}}"
    return code.at(label, said, fix=f"remove it, or acknowledge it with `{ack}` in the profile {_READ}")


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
            head = name.split(".", 1)[0]
            acked = name in ack_engine or head in ack_engine
            out.append(_risk(ENGINE_UNTRUSTED_OPTION, label, (kind, what), "engine", head, acked))
    for k in sorted(env):
        risk = env_risk(k, env[k])
        if risk is not None:
            out.append(_risk(ENV_UNTRUSTED_ENTRY, f"env.{k[:80]}", risk, "env", k[:80], k.upper() in ack_env))
    return out
