"""What ppspec knows about vLLM's `vllm serve` options and the engine's environment, as tables: the
flags ppspec derives from the profile (and so manages), the ones it refuses, the variables that
carry the plan, the config keys that set a model's depth, the option names of vLLM 0.32's parser
(a snapshot: names resolve without importing vLLM), and the options and variables that make the
engine run code, read a path, reach an endpoint or drop a safety check. The reader of a profile's
`engine:` is planning/engine_options.py; the installed parser's own names are knowledge/engine.py's."""

from __future__ import annotations

import functools
import re
from importlib import resources

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
SHORT = {"tp": "tensor-parallel-size", "pp": "pipeline-parallel-size", "dp": "data-parallel-size"}
#: `vllm serve --config FILE` reads options from a file, where ppspec could not see the managed ones.
REFUSED_FLAGS = {"config": "put each engine option under `engine:` in the profile"}
#: An `engine:` key: a long flag name (letters, digits, `-`, `_`; `.` for vLLM's nested `--x.y` form).
FLAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
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


@functools.lru_cache(maxsize=1)
def vllm_option_strings() -> frozenset[str]:
    """The long option strings of vLLM's `vllm serve` parser (with their `--no-` forms), from the
    snapshot of vLLM 0.32 shipped in knowledge/ (a vllm-marked test keeps it equal to the installed
    parser's): ppspec resolves abbreviations without importing vLLM."""
    text = resources.files("ppspec_cli.knowledge").joinpath("vllm_serve_options.txt").read_text(encoding="utf-8")
    return frozenset(x.strip()[2:] for x in text.splitlines() if x.strip().startswith("--"))


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
HARMLESS_PREFIXED = frozenset(
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
        "moves every per-user location the engine reads: the HF cache (checkpoints, remote code), vLLM's config and "
        "compile cache (~/.config/vllm, ~/.cache/vllm), Triton's kernels (~/.triton), Python's user site-packages "
        "(imported at start)",
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


def _env_risk_by_name(up: str) -> tuple[str, str] | None:
    if up in UNTRUSTED_ENV:
        return UNTRUSTED_ENV[up]
    if up in ENV_ROOTS:
        return ENV_ROOTS[up]
    if up in HARMLESS_PREFIXED:
        return None
    if up.startswith("LD_") or up.startswith("DYLD_"):
        return ("code", "the dynamic loader loads or audits libraries it names")
    if up.startswith("PYTHON"):
        return (
            "code",
            "Python imports, runs or searches code it names (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONWARNINGS, "
            "PYTHONBREAKPOINT, ...)",
        )
    if up not in _SUFFIX_EXCEPTIONS:
        for suffixes, kind, what in _MOVES_BY_SUFFIX:
            if up.endswith(suffixes):
                return (kind, what)
    return None


def env_risk(name: str, value: object = None) -> tuple[str, str] | None:
    """The risk of an `env:` entry (kind, what it does), None when it is ordinary tuning. Defined by
    what the variable moves, not only by a list of names: a root every location derives from
    (ENV_ROOTS), a name known to move something (UNTRUSTED_ENV), a name whose shape says it holds a
    location, endpoint or library (_MOVES_BY_SUFFIX), or a value that is a path or URL."""
    if name in PLAN_ENV or name.startswith("PPSPEC_"):
        return None  # the variables of ppspec's own plan: refused by their own rule (env-overrides-plan)
    got = _env_risk_by_name(name.upper())
    if got is not None or name.upper() in HARMLESS_PREFIXED:
        return got
    if _value_moves(value):
        return ("path", f"its value {str(value)[:60]!r} names a location or server")
    return None
