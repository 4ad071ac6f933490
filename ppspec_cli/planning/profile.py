"""The profile: one YAML file that says what to serve and how to split it.

The schema is strict (unknown keys are errors naming the key and its line) and every field carries
a description: `docs/profile-reference.md` is generated from these models (`ppspec docs`), so the
reference never drifts from the code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio, yamlload
from ppspec_cli.knowledge import methods
from ppspec_cli.knowledge.facts import NEWEST_SUPPORTED, parse_version
from ppspec_cli.knowledge.methods import Method
from ppspec_cli.planning.engine_options import read_option

_MODEL_REF = re.compile(r"^[^\x00-\x1f\x7f]+$")
MAX_PROFILE_BYTES = 1 << 20
#: Ranges of a `drafter.schedule`: published schedules have 1-4 ranges and bench derives one per measured
#: concurrency at most (its --concurrency list); 256 leaves a wide margin and keeps the checks cheap.
MAX_SCHEDULE_RANGES = 256


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class ModelRef(_Strict):
    """A checkpoint: a Hugging Face hub id, a local directory, or `demo:<name>` for a built-in tiny model."""

    model: str = Field(
        description="Hub id (`org/name`), local directory (a relative path starts from the profile's folder, "
        "wherever ppspec runs; an `org/name` that is a folder there is read as that folder, and `check` "
        "says so), or `demo:<name>` (a seeded tiny model ppspec builds locally).",
        min_length=1,
        max_length=512,
    )
    revision: str | None = Field(
        default=None, description="Hub revision (branch, tag or commit). Ignored for local directories.", max_length=128
    )

    @field_validator("model")
    @classmethod
    def _no_control_chars(cls, v: str) -> str:
        if not _MODEL_REF.match(v) or v != v.strip():
            raise ValueError("model reference must not contain control characters or surrounding whitespace")
        return v


class Drafter(_Strict):
    """The speculative drafter. It runs on the last pipeline stage only."""

    method: Method = Field(
        description="Speculative method, as vLLM names it. `eagle3`, `dflash`, `dspark` read target taps; "
        "`mtp` uses the target's own MTP layers (no `model`); `eagle` is EAGLE-1."
    )
    model: str | None = Field(
        default=None,
        description="Drafter checkpoint (hub id, local directory relative to the profile's folder, or "
        "`demo:<name>`). Omit for `mtp`.",
        max_length=512,
    )
    revision: str | None = Field(default=None, description="Hub revision of the drafter.", max_length=128)
    num_speculative_tokens: int = Field(ge=1, le=64, description="Draft tokens proposed per step.")
    tensor_parallel: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Draft tensor parallel size (`draft_tensor_parallel_size`): 1 or the target's TP. "
        "Default: vLLM's choice (the target TP).",
    )
    taps: list[int] | None = Field(
        default=None,
        description="Pin the tap set, in vLLM capture-point terms (tap L = output of layer L-1). "
        "Overrides whatever the drafter config says; ppspec serves the drafter through a local config overlay.",
        max_length=64,
    )
    schedule: list[Annotated[list[int], Field(min_length=3, max_length=3)]] | None = Field(
        default=None,
        max_length=MAX_SCHEDULE_RANGES,
        description="Dynamic speculative decoding: `[[batch_lo, batch_hi, k], ...]`, inclusive ranges of the number "
        "of scheduled requests and the draft tokens per step there (k may be 0; k <= `num_speculative_tokens`). "
        "Passed as vLLM's `speculative_config.num_speculative_tokens_per_batch_size` (vLLM 0.30 to 0.34); `check` "
        "applies vLLM's rules. `ppspec bench` derives one from its measurements (docs/bench.md).",
    )
    tap_convention: Literal["auto", "capture_point", "layer_output"] = Field(
        default="auto",
        description="How to read tap ids nested under `eagle_config` in the drafter config: "
        "`layer_output` (SGLang/SpecForge: id v = output of layer v = vLLM tap v+1), `capture_point` "
        "(already vLLM taps), or `auto` (`layer_output`, the convention of the tools that write that key). "
        "SGLang reads such a list as capture points unless its first id is 1 (sglang #25454): where the two "
        "readings differ and this is `auto`, `check` names both (`taps-convention-ambiguous`).",
    )

    @field_validator("model")
    @classmethod
    def _no_control_chars(cls, v: str | None) -> str | None:
        if v is not None and (not _MODEL_REF.match(v) or v != v.strip()):
            raise ValueError("model reference must not contain control characters or surrounding whitespace")
        return v

    @model_validator(mode="after")
    def _model_needed(self) -> "Drafter":
        m = methods.get(self.method)
        if m.external_drafter and not self.model:
            raise ValueError(f"method {self.method!r} needs `model` (the drafter checkpoint)")
        if not m.external_drafter and self.model:
            raise ValueError(f"method {self.method!r} uses the target's own MTP layers: remove `model`")
        if self.taps is not None:
            if not m.reads_taps:
                raise ValueError(
                    f"`taps` only applies to {', '.join(x.name for x in methods.REGISTRY.values() if x.reads_taps)}"
                )
            if any(t < 0 for t in self.taps):
                raise ValueError("`taps` must be non-negative layer indices")
        return self


class Topology(_Strict):
    """How the target is split over GPUs and nodes."""

    tensor_parallel: int = Field(default=1, ge=1, le=1024, description="Tensor parallel size (`-tp`).")
    pipeline_parallel: int = Field(
        default=1, ge=1, le=1024, description="Pipeline parallel size (`-pp`): the number of stages."
    )
    data_parallel: int = Field(default=1, ge=1, le=1024, description="Data parallel size (`-dp`).")
    nodes: int = Field(default=1, ge=1, le=4096, description="Number of nodes the engine spans.")
    gpus_per_node: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="GPUs on each node. When set, `check` verifies TP x PP x DP = nodes x gpus_per_node.",
    )
    layer_partition: list[int] | None = Field(
        default=None,
        description="Layers per stage (becomes `VLLM_PP_LAYER_PARTITION`): one entry per stage, summing to the "
        "target's layer count. Default: vLLM's rule (n // pp each, remainder to stages -2, -3, ...).",
        max_length=1024,
    )


class Server(_Strict):
    """Where the OpenAI-compatible server listens."""

    host: str = Field(
        default="127.0.0.1",
        description="Bind address. Anything but loopback exposes the server; set `api_key_env` then.",
        max_length=255,
    )
    port: int = Field(default=8000, ge=1, le=65535, description="HTTP port.")
    api_key_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding the API key (never the key itself: it stays out of "
        "files and logs).",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
    )
    served_model_name: str | None = Field(
        default=None, description="Model name the API reports (default: the profile name).", max_length=256
    )

    @field_validator("host", "served_model_name")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        # both end up in printed shell lines, URLs and logs: a control, bidi or escape character has no business there
        if v is not None and not v.isprintable():
            raise ValueError("must not contain control, bidi or other non-printable characters")
        return v

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        # serve, serve --dry-run and export read the profile here: an empty or malformed host is refused alike
        if not (
            re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?", v)
            or (":" in v and re.fullmatch(r"[0-9A-Fa-f:.]{2,45}", v))
        ):
            raise ValueError("must be a host name or an IP address to bind (e.g. 127.0.0.1, 0.0.0.0, ::)")
        return v


#: SLURM's --time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or the words it takes.
_SLURM_TIME = re.compile(
    r"(?:\d{1,7}(?::\d{1,2}){0,2}|\d{1,5}-\d{1,2}(?::\d{1,2}){0,2}|UNLIMITED|INFINITE|unlimited|infinite)",
    re.ASCII,  # `\d` is any Unicode digit otherwise: sbatch refuses `１２:００:００` at submit
)
#: SLURM's --mem sizes: a whole number with an optional K, M, G or T suffix (0: all of the node's memory).
_SLURM_MEM = re.compile(r"\d{1,12}[KMGT]?", re.ASCII)


class SlurmJob(_Strict):
    """What the job `ppspec export slurm` writes asks of SLURM, per node. The nodes and GPUs come from `topology`."""

    time: str | None = Field(
        default=None,
        description="The job's wall-clock limit (`#SBATCH --time`), in SLURM's formats: `MM`, `HH:MM:SS`, "
        "`D-HH:MM:SS`, "
        "`UNLIMITED`... Default: none written, so the partition's default limit applies (often short for a server).",
        max_length=32,
    )
    cpus_per_node: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="CPUs for the one task on each node (`--cpus-per-task`, in the header and on `srun`). Default: "
        "the whole "
        "node (`--exclusive`, and `srun` gets every CPU the allocation has on a node).",
    )
    mem_per_node: str | None = Field(
        default=None,
        description="Memory per node (`--mem`: a number with K, M, G or T, e.g. `512G`). Default: `0`, SLURM's word "
        "for all "
        "of each node's memory.",
        max_length=16,
    )

    @field_validator("time")
    @classmethod
    def _time(cls, v: str | None) -> str | None:
        if v is not None and not _SLURM_TIME.fullmatch(v):
            raise ValueError("not a SLURM time limit (e.g. 120, 12:00:00, 2-00:00:00 or UNLIMITED)")
        return v

    @field_validator("mem_per_node")
    @classmethod
    def _mem(cls, v: str | None) -> str | None:
        if v is not None and not _SLURM_MEM.fullmatch(v):
            raise ValueError("not a SLURM memory size (a whole number with K, M, G or T, e.g. 512G)")
        return v


class Launch(_Strict):
    """How the engine processes are started across nodes."""

    executor: Literal["mp", "ray"] = Field(
        default="mp",
        description="`mp`: vLLM's multiprocessing backend (multi-node via `--nnodes/--node-rank/--master-addr`, "
        "workers `--headless`). `ray`: an existing Ray cluster.",
    )
    master_addr: str | None = Field(
        default=None, description="Head node address for multi-node `mp` (required when nodes > 1).", max_length=255
    )
    master_port: int = Field(default=29501, ge=1, le=65535, description="Rendezvous port for multi-node `mp`.")
    health_timeout_s: int = Field(
        default=900, ge=5, le=86400, description="How long `serve` waits for `/health` before giving up."
    )
    slurm: SlurmJob = Field(
        default_factory=SlurmJob,
        description="Resources the job `ppspec export slurm` writes requests (time limit, CPUs, memory).",
    )


#: The engine option that carries the KV connector: ppspec sets it from `kv_transfer`.
KV_FLAG = "kv-transfer-config"

Role = Literal["prefill", "decode"]
ROLES: tuple[Role, ...] = ("prefill", "decode")


class RoleSpec(_Strict):
    """One engine of a disaggregated prefill/decode deployment: its own parallel layout, and
    optionally its own engine options, server and launch settings. Target, drafter, platform,
    dtype and adapter are shared by both engines."""

    topology: Topology = Field(
        description="This engine's parallel layout (the two engines may differ, e.g. prefill PP=2, decode PP=1)."
    )
    engine: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra vLLM engine arguments for this engine only, merged over the top-level `engine:` (this one "
        "wins).",
    )
    server: Server | None = Field(
        default=None,
        description="This engine's HTTP server (default: the top-level `server:`; the two engines need different "
        "ports on one host).",
    )
    launch: Launch | None = Field(
        default=None, description="This engine's launch settings (default: the top-level `launch:`)."
    )


class KvTransfer(_Strict):
    """How the KV cache moves from the prefill engine to the decode engine (vLLM's `--kv-transfer-config`)."""

    connector: str = Field(
        description="vLLM KV connector name (`kv_connector`), e.g. `NixlConnector`, `NixlPushConnector`, "
        "`MooncakeConnector`, "
        "`LMCacheConnectorV1`, `ExampleConnector`. `check` knows which ones carry PP on which side "
        "(ppspec_cli/knowledge/connectors.py).",
        pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$",
    )
    extra_config: dict[str, Any] = Field(
        default_factory=dict,
        description="`kv_connector_extra_config` passed to both engines (e.g. `shared_storage_path` for "
        "ExampleConnector).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Other `--kv-transfer-config` keys passed as is to both engines (e.g. `kv_buffer_device`, "
        "`kv_ip`, `kv_port`). "
        "`kv_connector`, `kv_role` and `kv_connector_extra_config` are set by ppspec.",
    )

    @field_validator("options")
    @classmethod
    def _not_managed(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k in ("kv_connector", "kv_role", "kv_connector_extra_config"):
            if k in v:
                raise ValueError(f"`{k}` is set by ppspec (connector / role / extra_config), not under `options`")
        return v


class VerifyDefaults(_Strict):
    """What `ppspec verify PROFILE` measures when its options do not say (its options win)."""

    num_prompts: int | None = Field(
        default=None,
        ge=1,
        le=1 << 16,
        description="Send only the first N prompts of the built-in set. Default: all of them.",
    )
    max_tokens: int | None = Field(
        default=None, ge=1, le=1 << 16, description="Tokens generated per prompt (greedy). Default: 128."
    )


class Trust(_Strict):
    """What the profile's author acknowledges it makes the engine do beyond serving the checkpoint.
    A profile from someone else: read `ppspec check`'s untrusted-* findings before serving it."""

    engine: list[str] = Field(
        default_factory=list,
        description="`engine:` options you acknowledge that make the engine run code, read a path or reach an "
        "endpoint (e.g. `worker-extension-cls`, `chat-template`, `kv-transfer-config`). "
        "`check` lists every such option (`engine-untrusted-option`) and `serve` refuses one not named here. Name "
        "only what you wrote or have read.",
        max_length=256,
    )
    env: list[str] = Field(
        default_factory=list,
        description="`env:` entries you acknowledge that make the engine run code, read a path or reach an endpoint "
        "(e.g. `LD_PRELOAD`, `PYTHONPATH`, `HF_ENDPOINT`); see `env-untrusted-entry`.",
        max_length=256,
    )


class Profile(_Strict):
    """A ppspec profile."""

    name: str = Field(
        description="Profile name (letters, digits, `.`, `_`, `-`).", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
    )
    description: str | None = Field(default=None, description="Free text.", max_length=4096)
    target: ModelRef = Field(description="The target model.")
    drafter: Drafter | None = Field(
        default=None, description="The drafter. Omit to serve without speculative decoding."
    )
    topology: Topology = Field(default_factory=Topology, description="Parallel layout.")
    platform: Literal["auto", "cuda", "rocm", "cpu"] = Field(
        default="auto",
        description="Where the engine runs. `auto`: the installed vLLM's platform (`cuda` when vLLM is not installed). "
        "The CPU platform runs vLLM's V1 model runner, which cannot relay taps between stages.",
    )
    engine_version: str | None = Field(
        default=None,
        description="The vLLM version to check against when vLLM is not installed where `check` runs (e.g. `0.33.0`). "
        "The installed vLLM's version wins when there is one (a differing `engine_version` is reported: "
        f"engine-version-overruled); without either, the newest verified release ({NEWEST_SUPPORTED}). "
        "A version outside the verified releases (a nightly, rc, `+local` fork build, a newer release) gets the "
        "newest verified release's verdict, marked unverified (docs/versions.md). "
        "`check` says which version its verdict is for and where that came from.",
        max_length=64,
    )
    hardware: str | None = Field(
        default=None,
        description="The accelerator of one GPU: a name of `plan --predict --hardware` (`h100`, `h200`, `a100`, "
        "`l40s`), or "
        "`NAME,mem=GiB` for another (the memory one GPU reports, e.g. `rtx6000,mem=95`; `mem=...GB` reads decimal "
        "gigabytes). `check` and `plan` then judge memory: the weights on each GPU, the KV cache's capacity per stage "
        "and "
        "whether one `max-model-len` request fits (docs/memory.md). Without it they show what each GPU needs and "
        "refuse "
        "nothing. `--hardware` on the command line overrides it.",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}(,\s*mem=\s*[0-9]+(\.[0-9]+)?\s*(GiB|GB|gib|gb)?)?$",
        max_length=64,
    )
    adapter: str = Field(
        default="auto",
        description="Adapter pack: `auto` (chosen from the target and drafter architectures), `none`, or a pack name "
        "(`ppspec adapters list`).",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
    )
    dtype: str | None = Field(
        default=None,
        description="Weights/activation dtype passed to vLLM (`--dtype`). Default: the checkpoint's.",
        max_length=32,
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow the checkpoint's own Python code to run. Off unless you need it."
    )
    server: Server = Field(default_factory=Server, description="HTTP server settings.")
    launch: Launch = Field(default_factory=Launch, description="Process launch settings.")
    engine: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra vLLM engine arguments, long flag names without `--` (e.g. `max-model-len: 4096`), passed "
        "through.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for the engine processes."
    )
    trust: Trust = Field(
        default_factory=Trust,
        description="What you acknowledge this profile makes the engine do beyond serving the checkpoint: run code, "
        "read paths, reach endpoints (docs/security.md).",
    )
    roles: dict[Role, RoleSpec] | None = Field(
        default=None,
        description="Disaggregated prefill/decode: one engine per role (`prefill`, `decode`), each with its own "
        "topology. "
        "Target and drafter are shared. Needs `kv_transfer`; the top-level `topology` is then not used. "
        "`ppspec plan` shows both engines side by side; `ppspec serve PROFILE --role prefill|decode` starts one.",
    )
    kv_transfer: KvTransfer | None = Field(
        default=None, description="The KV connector between the prefill and decode engines (with `roles`)."
    )
    verify: VerifyDefaults = Field(
        default_factory=VerifyDefaults,
        description="Defaults for `ppspec verify` on this profile's server (e.g. a short run for a tiny demo).",
    )

    @model_validator(mode="after")
    def _roles(self) -> "Profile":
        if self.roles is None and self.kv_transfer is None:
            return self
        if self.roles is None or set(self.roles) != set(ROLES):
            raise ValueError(
                "a disaggregated profile needs `roles` with both `prefill` and `decode`, and `kv_transfer`"
            )
        if self.kv_transfer is None:
            raise ValueError("`roles` needs `kv_transfer` (the KV connector between the two engines)")
        for where, eng in (("engine", self.engine), *((f"roles.{r}.engine", s.engine) for r, s in self.roles.items())):
            # every spelling vLLM's parser reads as it: `kv_transfer_config`, an abbreviation
            # (`kv-transfer`), a dotted key (`kv-transfer-config.kv_connector`)
            if any(
                read_option(k).flag == KV_FLAG
                or str(k).strip().lstrip("-").replace("_", "-").split(".", 1)[0] == KV_FLAG
                for k in eng
            ):
                raise ValueError(f"`{where}.{KV_FLAG}`: ppspec sets it for each engine from `kv_transfer`")
        if "topology" in self.model_fields_set:
            raise ValueError(
                "with `roles`, each role has its own topology: move the top-level `topology` under roles.prefill / "
                "roles.decode"
            )
        return self

    @property
    def disaggregated(self) -> bool:
        return self.roles is not None

    def for_role(self, role: Role) -> "Profile":
        """The single-engine profile of one role: its topology, engine options (merged over the
        shared ones), server and launch; named `<name>-<role>` (its own run directory) but serving
        the shared model name, so a router can send one request to both engines."""
        if self.roles is None:
            raise ValueError("not a disaggregated profile")
        spec = self.roles[role]
        server = spec.server or self.server
        if server.served_model_name is None:
            server = server.model_copy(update={"served_model_name": self.server.served_model_name or self.name})
        return self.model_copy(
            update={
                "name": f"{self.name}-{role}",
                "topology": spec.topology,
                "engine": {**self.engine, **spec.engine},
                "server": server,
                "launch": spec.launch or self.launch,
                "roles": None,
            }
        )

    @field_validator("engine_version")
    @classmethod
    def _engine_version(cls, v: str | None) -> str | None:
        if v is not None and parse_version(v) is None:
            raise ValueError("not a version (write it as vLLM does, e.g. 0.33.0)")
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k, re.ASCII):  # `$` would pass "A\n"
                raise ValueError(f"environment variable name {k!r} is not valid")
        return v

    @property
    def speculative(self) -> bool:
        return self.drafter is not None


# ---------------------------------------------------------------------------------------------
# Loading with line numbers


#: A profile is a few dozen values; YAML aliases can expand a tiny file into billions of them.
MAX_PROFILE_NODES = 20_000
#: ...or a 27 KB file into 40 MB of text: what a profile expands to may be at most twice the
#: largest profile ppspec reads as written (io/yamlload counts every alias where it is used).
MAX_PROFILE_EXPANDED_BYTES = 2 * MAX_PROFILE_BYTES


class _TooManyNodes(Exception):
    pass


def _line_index(text: str, source: str = "<profile>") -> dict[tuple, int]:
    """Map each key path in the YAML document to its 1-based line, for error messages.

    Also the guard against what `safe_load` accepts but a profile must not contain: duplicate keys
    (YAML silently keeps the last one) and alias bombs (a few hundred bytes expanding into billions
    of values, which would hang every later consumer).
    """
    try:
        node = yamlload.compose(text)
    except yaml.YAMLError:
        return {}
    lines: dict[tuple, int] = {}
    budget = [MAX_PROFILE_NODES]

    def walk(n: Any, path: tuple) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            raise _TooManyNodes
        if isinstance(n, yaml.MappingNode):
            seen: dict[str, int] = {}
            for k, v in n.value:
                key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
                line = k.start_mark.line + 1
                if isinstance(k, yaml.ScalarNode) and key in seen and key != "<<":
                    field = _fmt_loc(path + (key,))
                    raise PpspecError(
                        f"duplicate key `{field}` (lines {seen[key]} and {line}): YAML would silently keep only the "
                        "last one",
                        where=f"{source}:{line}",
                        fix="keep one of them",
                    )
                seen[key] = line
                lines[path + (key,)] = line
                walk(v, path + (key,))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                lines[path + (i,)] = v.start_mark.line + 1
                walk(v, path + (i,))

    if node is not None:
        try:
            walk(node, ())
        except _TooManyNodes:
            raise PpspecError(
                f"the profile expands to more than {MAX_PROFILE_NODES} values (YAML anchors/aliases?)",
                where=source,
                fix="write the values out; a profile needs no aliases",
            ) from None
        except RecursionError:
            raise PpspecError(
                "the profile nests too deeply",
                where=source,
                fix="a profile is a flat YAML file; check you passed the right file",
            ) from None
    return lines


def _fmt_loc(loc: tuple) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def parse_profile(text: str, source: str = "<profile>") -> Profile:
    """Parse profile YAML text. Raises PpspecError with the key, its line, and the fix."""
    if len(text.encode("utf-8", "replace")) > MAX_PROFILE_BYTES:
        raise PpspecError(
            f"profile is larger than {MAX_PROFILE_BYTES // 1024} KiB",
            where=source,
            fix="a profile is a short YAML file; check you passed the right file",
        )
    try:
        data = yamlload.load(
            text, what="the profile", source=source, max_nodes=MAX_PROFILE_NODES, max_bytes=MAX_PROFILE_EXPANDED_BYTES
        )
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise PpspecError(
            f"the profile is not valid YAML: {problem}",
            where=where,
            fix="fix the YAML syntax at that line (indentation, a missing ':' or quote)",
        ) from None
    except RecursionError:
        raise PpspecError(
            "the profile nests too deeply",
            where=source,
            fix="a profile is a flat YAML file; check you passed the right file",
        ) from None
    lines = _line_index(text, source)
    if data is None:
        raise PpspecError(
            "the profile is empty",
            where=source,
            fix="start from one of the files in profiles/ (e.g. profiles/tiny_cpu_demo.yaml)",
        )
    if not isinstance(data, dict):
        raise PpspecError(
            f"the profile must be a YAML mapping of keys to values, got a {type(data).__name__}",
            where=source,
            fix="start from one of the files in profiles/ (e.g. profiles/tiny_cpu_demo.yaml)",
        )
    for k in data:
        if not isinstance(k, str):
            raise PpspecError(
                f"profile keys must be strings, got {k!r}", where=source, fix="quote the key or remove it"
            )
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        raise _invalid(e, lines, source) from None


def _error_line(loc: tuple, lines: dict) -> int | None:
    """The line of the innermost key of `loc` the profile has."""
    for cut in range(len(loc), 0, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]]
    return None


def _error_text(err: Any, loc: tuple, field: str) -> tuple[str, str]:
    """(what, hint) of one validation error."""
    if err["type"] == "extra_forbidden":
        from ppspec_cli.planning.reference import did_you_mean, fields_at

        allowed = fields_at(Profile, loc)
        close = did_you_mean(str(loc[-1]), allowed) if allowed else []
        parent = _fmt_loc(loc[:-1])
        if close:
            hint = f"did you mean `{close[0]}`? write `{close[0]}:`" + (f" under `{parent}:`" if parent else "")
        else:
            hint = "remove it; " + (
                f"`ppspec docs {parent}` lists the keys there" if parent else "`ppspec docs` lists every key"
            )
        return f"unknown key `{field}`", hint
    if err["type"] == "missing":
        parent = _fmt_loc(loc[:-1])
        hint = (
            f"add `{loc[-1]}:`"
            + (f" under `{parent}:`" if parent else "")
            + f" (`ppspec docs {field}` says what it takes)"
        )
        return f"missing required key `{field}`", hint
    m = err["msg"].removeprefix("Value error, ")
    got = repr(err.get("input"))
    got = got if len(got) <= 80 else got[:77] + "..."
    msg = f"`{field}`: {m} (got {got})" if not isinstance(err.get("input"), dict) else f"`{field}`: {m}"
    return msg, "see docs/profile-reference.md for the allowed values"


def _invalid(e: ValidationError, lines: dict, source: str) -> PpspecError:
    """The profile's validation errors as one PpspecError: each with its line and fix."""
    msgs = []
    first_line = None
    for err in e.errors():
        loc = tuple(err["loc"])
        line = _error_line(loc, lines)
        first_line = first_line or line
        msg, hint = _error_text(err, loc, _fmt_loc(loc) or "(top level)")
        msgs.append((f"line {line}: " if line else "") + msg + f" — {hint}")
    where = f"{source}:{first_line}" if first_line else source
    what = "invalid profile: " + "; ".join(msgs) if len(msgs) == 1 else "invalid profile:\n    " + "\n    ".join(msgs)
    if len(msgs) == 1:  # the one hint is the fix
        what, _, fix = what.partition(" — ")
    else:
        fix = "edit the profile as each line above says"
    return PpspecError(what, where=where, fix=fix)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file."""
    p = Path(path)
    text = safeio.read_text(
        p,
        limit=MAX_PROFILE_BYTES,
        what="profile file",
        fix="pass a profile YAML file (UTF-8, a few KiB); ready profiles are in profiles/",
    )
    return parse_profile(text, source=str(p))
