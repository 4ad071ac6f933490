"""Checkpoint metadata from a local directory or the Hugging Face hub — metadata only, never weights.

What we read: config.json, model.safetensors.index.json, and safetensors headers (the first 8 + N
bytes of a shard; on the hub through range requests). Nothing else in ppspec touches the hub.
Partial or missing metadata is recorded as a `Gap`, never filled in with a guess.
"""

from __future__ import annotations

import os
import re
import struct
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ppspec_cli.errors import EXIT_REFUSED, PpspecError
from ppspec_cli.io import netio, safeio, shellout
from ppspec_cli.knowledge import methods, packs

# Read limits, one per kind of file, each traced to the largest real file of its kind (with margin).
# A file over its limit is a gap ("over-read-limit": what it would tell is unknown), never "corrupt".
#: config.json: real ones are 1-30 KB (DeepSeek-V3's is 1.7 KB; multimodal configs with per-module
#: quantization lists reach a few hundred KB). 8 MiB is over 20x the largest.
MAX_CONFIG_BYTES = 8 << 20
#: model.safetensors.index.json: DeepSeek-V3 ~9 MB (~92k tensors), Kimi-K2 ~13 MB (~140k); a 4-bit
#: re-quantization with four scale tensors per weight would reach ~50 MB. 128 MiB is ~10x Kimi-K2's;
#: a 13 MB index parses in ~0.4 s here (benchmarks/read_limits.py).
MAX_INDEX_BYTES = 128 << 20
#: One safetensors header: the format's own ceiling (the safetensors library refuses a header over
#: 100,000,000 bytes as corrupt, and so does vLLM's loader); a real shard's header is KBs to a few MB.
MAX_HEADER_BYTES = 100_000_000
#: Bounds across all shards of one checkpoint: the largest public checkpoints hold ~140k tensors
#: (Kimi-K2) in at most ~200 shards (Llama-3.1-405B: 191) with ~15 MB of headers together.
MAX_SHARDS = 10_000
MAX_TENSORS = 2_000_000
MAX_TOTAL_HEADER_BYTES = 512 << 20
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "U32": 4,
    "U16": 2,
    "U64": 8,
    "F4": 1,
}
#: Sizes beyond these are not models but corrupt or hostile configs (and would make plans allocate absurdly).
CONFIG_INT_LIMITS = {"num_hidden_layers": 100_000, "hidden_size": 1 << 20, "vocab_size": 1 << 31}
#: Tower names Hugging Face multimodal checkpoints use, for targets no pack describes.
_HF_TOWER = re.compile(
    r"(?:^|\.)(vision|visual|vision_tower|vision_model|audio|audio_tower|mm_projector|multi_modal_projector)(?:\.|_)"
)
TORCH_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float64": 8}


class _HeaderError(PpspecError):
    """A shard that cannot be read (turned into a `bad-safetensors` gap)."""


@dataclass(frozen=True)
class Gap:
    """Something we could not read or that is incomplete. `code` is stable; rules turn gaps into findings."""

    code: str
    message: str


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * DTYPE_BYTES.get(self.dtype, 0)


@dataclass
class Checkpoint:
    """Metadata of one checkpoint. `config` is the raw config.json; `text` is the language model's part of it."""

    ref: str
    location: str
    source: str  # "local" | "hub"
    config: dict[str, Any] | None = None
    text: dict[str, Any] = field(default_factory=dict)
    text_path: str = ""  # "" | "text_config" | "transformer_layer_config"
    weight_map: dict[str, str] | None = None  # tensor name -> shard file (from the index)
    index_total_size: int | None = None
    tensors: dict[str, TensorInfo] | None = None  # from safetensors headers, when read
    files: list[str] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)

    # ---- facts (None = unknown; never guessed) ----
    @property
    def architectures(self) -> list[str]:
        a = (self.config or {}).get("architectures")
        return [x for x in a if isinstance(x, str)] if isinstance(a, list) else []

    @property
    def model_type(self) -> str | None:
        v = (self.config or {}).get("model_type")
        return v if isinstance(v, str) else None

    def _int(self, key: str, *, text: bool = True) -> int | None:
        src = self.text if text else (self.config or {})
        v = src.get(key)
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 < v <= CONFIG_INT_LIMITS.get(key, 1 << 40)
        return v if ok else None  # a bad value is a gap, not a fact

    @property
    def num_layers(self) -> int | None:
        return self._int("num_hidden_layers")

    @property
    def hidden_size(self) -> int | None:
        return self._int("hidden_size")

    @property
    def vocab_size(self) -> int | None:
        return self._int("vocab_size")

    @property
    def dtype_bytes(self) -> int | None:
        for src in (self.text, self.config or {}):
            d = src.get("torch_dtype") or src.get("dtype")
            if isinstance(d, str) and d in TORCH_DTYPE_BYTES:
                return TORCH_DTYPE_BYTES[d]
        return None

    def tensor_names(self) -> set[str] | None:
        if self.tensors is not None:
            return set(self.tensors)
        if self.weight_map is not None:
            return set(self.weight_map)
        return None

    def find_tensor(self, candidates: list[str]) -> tuple[str, str | None] | None:
        """First candidate name present in the checkpoint -> (name, shard file)."""
        names = self.tensor_names()
        if names is None:
            return None
        for c in candidates:
            if c in names:
                if self.tensors is not None and c in self.tensors:
                    return c, self.tensors[c].file
                return c, (self.weight_map or {}).get(c)
        return None

    def layer_weight_bytes(self, num_layers: int, towers: tuple[str, ...] = ()) -> list[int] | None:
        """Bytes per target layer from safetensors headers (exact), else None. Tensors under a
        multimodal tower (the family pack's `tower_prefixes`; without a pack, the usual Hugging
        Face tower names) are encoder layers, not decoder layers."""
        if not self.tensors:
            return None
        per = [0] * num_layers
        pat = re.compile(r"(?:^|\.)layers\.(\d+)\.")
        for t in self.tensors.values():
            if t.name.startswith(towers) if towers else _HF_TOWER.search(t.name):
                continue
            m = pat.search(t.name)
            if m and int(m.group(1)) < num_layers:
                per[int(m.group(1))] += t.nbytes
        return per

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "location": self.location,
            "source": self.source,
            "architectures": self.architectures,
            "model_type": self.model_type,
            "text_config": self.text_path or None,
            "num_hidden_layers": self.num_layers,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "index": self.weight_map is not None,
            "tensors_read": self.tensors is not None,
            "gaps": [{"code": g.code, "message": g.message} for g in self.gaps],
        }


# ---------------------------------------------------------------------------------------------
# Config interpretation


def text_part(config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The language-model part of a config: multimodal checkpoints nest it under `text_config`,
    speculators-format drafters under `transformer_layer_config`."""
    for key in ("text_config", "transformer_layer_config"):
        sub = config.get(key)
        if isinstance(sub, dict) and ("num_hidden_layers" in sub or "hidden_size" in sub):
            merged = dict(sub)
            return merged, key
    return config, ""


def speculators_view(config: dict[str, Any]) -> dict[str, Any]:
    """How vLLM sees a speculators-format drafter (vLLM's speculators config conversion): the
    `transformer_layer_config` keys plus the drafter keys mapped to the top level, per method
    (each method's `convert_speculators` in knowledge/methods), and the architectures vLLM serves
    it as (the packs' drafter classes). Any other config is returned as it is."""
    return methods.speculators_view(config, packs.drafter_classes())


def parse_safetensors_header(raw: bytes, *, file: str, file_size: int | None) -> dict[str, TensorInfo]:
    """Validate and parse a safetensors header (the 8-byte length + JSON). Raises ValueError on a lie."""
    if len(raw) < 8:
        raise ValueError("file is shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > MAX_HEADER_BYTES:
        raise ValueError(f"header length {n} exceeds {MAX_HEADER_BYTES}")
    if len(raw) < 8 + n:
        raise ValueError(f"header truncated: claims {n} bytes, {len(raw) - 8} present")
    try:
        header = safeio.parse_json(raw[8 : 8 + n], what="header", max_depth=8, error=_HeaderError)
    except _HeaderError as e:
        raise ValueError(e.what) from None
    if not isinstance(header, dict):
        raise ValueError("header is not a JSON object")
    if len(header) > MAX_TENSORS:
        raise ValueError(f"header lists {len(header)} tensors, more than {MAX_TENSORS}")
    out: dict[str, TensorInfo] = {}
    data_len = None if file_size is None else file_size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict):
            raise ValueError(f"tensor {name!r}: entry is not an object")
        dtype, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"tensor {name!r}: unknown dtype {dtype!r}")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise ValueError(f"tensor {name!r}: bad shape {shape!r}")
        if not (
            isinstance(offs, list)
            and len(offs) == 2
            and all(isinstance(o, int) for o in offs)
            and 0 <= offs[0] <= offs[1]
        ):
            raise ValueError(f"tensor {name!r}: bad data_offsets {offs!r}")
        t = TensorInfo(name, dtype, tuple(shape), file)
        if offs[1] - offs[0] != t.nbytes:
            raise ValueError(
                f"tensor {name!r}: data_offsets span {offs[1] - offs[0]} bytes but dtype x shape needs {t.nbytes}"
            )
        if data_len is not None and offs[1] > data_len:
            raise ValueError(
                f"tensor {name!r}: data_offsets end {offs[1]} past the end of the file's data ({data_len} bytes)"
            )
        out[name] = t
    return out


# ---------------------------------------------------------------------------------------------
# Loading


def _read_json(path: Path, what: str) -> dict[str, Any]:
    data = safeio.read_json(
        path,
        limit=MAX_CONFIG_BYTES,
        what=what,
        fix="restore the file from the model repository",
        exit_code=EXIT_REFUSED,
    )
    if not isinstance(data, dict):
        raise PpspecError(
            f"{what} must be a JSON object",
            where=str(path),
            fix="restore the file from the model repository",
            exit_code=EXIT_REFUSED,
        )
    return data


def _apply_config(ck: Checkpoint, cfg: dict[str, Any], where: str) -> None:
    if "_partial" in cfg:
        ck.gaps.append(
            Gap(
                "partial-config", f"{where} is marked partial ({str(cfg['_partial'])[:160]}); keys it lacks are unknown"
            )
        )
    ck.config = cfg
    view = speculators_view(cfg)
    text, path = text_part(view if view is not cfg else cfg)
    if view is not cfg:
        path = "transformer_layer_config"
    ck.text, ck.text_path = text, path
    for key in ("num_hidden_layers", "hidden_size", "vocab_size"):
        v = text.get(key)
        if v is None:
            ck.gaps.append(
                Gap(
                    "missing-" + key.replace("_", "-"),
                    f"config has no `{key}`" + (f" (looked in `{path}`)" if path else ""),
                )
            )
        elif not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            ck.gaps.append(
                Gap("bad-" + key.replace("_", "-"), f"config `{key}` is {str(v)[:40]!r}, not a positive integer")
            )
        elif v > CONFIG_INT_LIMITS[key]:
            ck.gaps.append(
                Gap(
                    "bad-" + key.replace("_", "-"),
                    f"config `{key}` is {v}, beyond any real model (limit {CONFIG_INT_LIMITS[key]})",
                )
            )
    if not ck.architectures:
        ck.gaps.append(Gap("missing-architectures", "config has no `architectures` list"))


def _apply_index(ck: Checkpoint, idx: dict[str, Any], where: str) -> None:
    wm = idx.get("weight_map")
    if "_partial" in idx:
        ck.gaps.append(Gap("partial-index", f"{where} is marked partial; tensor placement is not known"))
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        ck.gaps.append(Gap("bad-index", f"{where} has no usable `weight_map`"))
        return
    ck.weight_map = dict(wm)
    ts = (idx.get("metadata") or {}).get("total_size") if isinstance(idx.get("metadata"), dict) else None
    ck.index_total_size = ts if isinstance(ts, int) else None


def _safe_shard_name(name: str) -> bool:
    if not name or name.startswith("/") or "\x00" in name or ".." in Path(name).parts:
        return False
    return all(len(part.encode("utf-8", "replace")) <= 255 for part in Path(name).parts)  # else ENAMETOOLONG


def _open_local(ref: str, path: Path) -> Checkpoint:
    """An empty local Checkpoint for an existing, listable directory (its file names listed)."""
    if not path.exists():
        raise PpspecError(
            f"checkpoint directory not found: {path}",
            where=ref,
            fix="check the path, or use a hub id (org/name)",
            exit_code=EXIT_REFUSED,
        )
    if not path.is_dir():
        raise PpspecError(
            f"checkpoint path is not a directory: {path}",
            where=ref,
            fix="point at the directory that holds config.json",
            exit_code=EXIT_REFUSED,
        )
    ck = Checkpoint(ref=ref, location=str(path), source="local")
    try:
        ck.files = sorted(p.name for p in path.iterdir())
    except OSError as e:
        raise PpspecError(
            f"cannot list checkpoint directory: {e.strerror}",
            where=str(path),
            fix="check permissions",
            exit_code=EXIT_REFUSED,
        ) from None
    return ck


def _local_config_path(ck: Checkpoint, path: Path) -> Path | None:
    """config.json, else the first `config*.json` (a partial config), else None."""
    cfg_path = path / "config.json"
    if cfg_path.exists():
        return cfg_path
    partial = [f for f in ck.files if f.startswith("config") and f.endswith(".json")]
    return path / partial[0] if partial else None


def _read_config(ck: Checkpoint, file: Path, name: str) -> None:
    over = _over_limit(file, name, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES")
    if over:
        ck.gaps.append(Gap("config-over-read-limit", over))
        return
    _apply_config(ck, _read_json(file, name), name)


def _over_limit(file: Path, name: str, limit: int, constant: str) -> str | None:
    """When `file` is larger than `limit`: the gap's message (what, and the limit named); else None."""
    try:
        size = file.stat().st_size
    except OSError:
        return None  # the read reports it
    if size <= limit:
        return None
    return (
        f"{name} is {size / 2**20:.1f} MiB, over the {limit >> 20} MiB ppspec reads ({constant}): what it holds "
        "is unknown to ppspec"
    )


def _read_index(ck: Checkpoint, file: Path, name: str) -> None:
    over = _over_limit(file, name, MAX_INDEX_BYTES, "MAX_INDEX_BYTES")
    if over:
        ck.gaps.append(Gap("over-read-limit", over))
        return
    data = safeio.read_json(
        file, limit=MAX_INDEX_BYTES, what=name, fix="restore the file from the model repository", exit_code=EXIT_REFUSED
    )
    if not isinstance(data, dict):
        raise PpspecError(
            f"{name} must be a JSON object",
            where=str(file),
            fix="restore the file from the model repository",
            exit_code=EXIT_REFUSED,
        )
    _apply_index(ck, data, name)


def _local_shards(ck: Checkpoint, path: Path) -> tuple[list[str], list[str], list[str]]:
    """The shard files to read headers of -> (present, missing, unsafe), with their gaps: the
    index's shards when there is an index, else the directory's *.safetensors."""
    shards = (
        sorted(set((ck.weight_map or {}).values()))
        if ck.weight_map
        else [f for f in ck.files if f.endswith(".safetensors")]
    )
    unsafe = [s for s in shards if not _safe_shard_name(s)]
    if unsafe:
        # Never follow an index out of the checkpoint directory (`../x`, absolute paths).
        ck.gaps.append(
            Gap(
                "unsafe-shard-name",
                "the index names shard file(s) outside the checkpoint directory, not read: "
                f"{', '.join(repr(u) for u in unsafe[:3])}",
            )
        )
    present = [s for s in shards if s not in unsafe and (path / s).is_file()]
    missing = [s for s in shards if s not in present and s not in unsafe]
    if ck.weight_map is not None and missing and present:
        ck.gaps.append(
            Gap(
                "missing-shards",
                f"the index names {len(missing)} shard file(s) that are not in the directory (e.g. {missing[0]})",
            )
        )
    return present, missing, unsafe


def _read_local_headers(ck: Checkpoint, path: Path, present: list[str]) -> dict[str, TensorInfo] | None:
    """The tensors of the `present` shards from their safetensors headers (bounded reads of
    8 + N bytes each, bounded in total); None, with a gap, when there are none or one is bad."""
    if not present:
        ck.gaps.append(Gap("no-weights", "no safetensors files here (metadata only): tensor-level checks are not run"))
        return None
    if len(present) > MAX_SHARDS:
        ck.gaps.append(
            Gap(
                "over-read-limit",
                f"{len(present)} shard files, more than the {MAX_SHARDS} ppspec reads headers of (MAX_SHARDS): "
                "tensor-level checks not run",
            )
        )
        return None
    tensors: dict[str, TensorInfo] = {}
    header_bytes = 0
    for s in present:
        fp = path / s
        try:
            head, size = safeio.read_head(fp, 8, what=f"shard {s}", error=_HeaderError)
            if len(head) == 8:
                (n,) = struct.unpack("<Q", head)
                header_bytes += min(n, MAX_HEADER_BYTES)
                if header_bytes > MAX_TOTAL_HEADER_BYTES:
                    ck.gaps.append(
                        Gap(
                            "over-read-limit",
                            f"the shards' headers together exceed the {MAX_TOTAL_HEADER_BYTES >> 20} MiB ppspec "
                            "reads (MAX_TOTAL_HEADER_BYTES): tensor-level checks not run",
                        )
                    )
                    return None
                head, size = safeio.read_head(fp, 8 + min(n, MAX_HEADER_BYTES), what=f"shard {s}", error=_HeaderError)
            tensors.update(parse_safetensors_header(head, file=s, file_size=size))
            if len(tensors) > MAX_TENSORS:
                ck.gaps.append(
                    Gap(
                        "over-read-limit",
                        f"the shards hold more than {MAX_TENSORS} tensors together (MAX_TENSORS): tensor-level "
                        "checks not run",
                    )
                )
                return None
        except ValueError as e:
            ck.gaps.append(Gap("bad-safetensors", f"{s}: {e}"))
            return None
        except _HeaderError as e:
            ck.gaps.append(Gap("bad-safetensors", f"{s}: {e.what}"))
            return None
    return tensors


def _use_tensors(ck: Checkpoint, tensors: dict[str, TensorInfo]) -> Checkpoint:
    """Keep the headers' tensors, noting where the index disagrees with them (local and hub alike)."""
    if ck.weight_map is not None:
        wrong = sorted(n for n, f in ck.weight_map.items() if n not in tensors or tensors[n].file != f)
        if wrong:
            ck.gaps.append(
                Gap(
                    "index-mismatch",
                    f"{len(wrong)} tensor(s) of the index are not in the shard it names (e.g. {wrong[0]} -> "
                    f"{ck.weight_map[wrong[0]]}); the headers are used",
                )
            )
    ck.tensors = tensors
    return ck


def load_local(ref: str, path: Path, *, read_headers: bool = True) -> Checkpoint:
    """Metadata from a local directory. A directory with only config files is normal (a login node)."""
    ck = _open_local(ref, path)
    cfg_path = _local_config_path(ck, path)
    if cfg_path is None:
        ck.gaps.append(Gap("missing-config", f"no config.json in {path}"))
        return ck
    _read_config(ck, cfg_path, cfg_path.name)
    idx_candidates = [f for f in ck.files if f.startswith("model.safetensors.index") and f.endswith(".json")]
    if idx_candidates:
        _read_index(ck, path / idx_candidates[0], idx_candidates[0])
    if not read_headers:
        return ck
    present, missing, unsafe = _local_shards(ck, path)
    tensors = _read_local_headers(ck, path, present)
    if tensors is None:
        return ck
    if ck.weight_map is not None and (missing or unsafe):
        return ck  # incomplete view: keep the index as the name list
    return _use_tensors(ck, tensors)


def _endpoint() -> str:
    try:
        from huggingface_hub import constants

        ep = str(constants.ENDPOINT)
    except Exception:  # noqa: BLE001
        return "the hub"
    return re.sub(r"//[^/@]*@", "//", ep)  # never echo credentials embedded in the URL


def _hf_download_line(ref: str, revision: str | None) -> str:
    """The `hf download` line that caches what ppspec reads of `ref`, pasteable as printed (the
    `hf` beside this Python when there is one: a venv's bin/ is often not on PATH)."""
    argv = [shellout.beside_python("hf") or "hf", "download", ref, "config.json", "model.safetensors.index.json"]
    return shellout.command(argv + (["--revision", revision] if revision else []))


def _hub_error(e: Exception, ref: str, *, offline: bool = False, revision: str | None = None) -> PpspecError:
    name = type(e).__name__
    if name in ("RepositoryNotFoundError", "GatedRepoError"):
        return PpspecError(
            f"hub repository {ref!r} was not found or is gated ({name})",
            where=ref,
            fix="check the id; for gated models log in (`hf auth login`) or set HF_TOKEN",
            exit_code=EXIT_REFUSED,
        )
    if name == "RevisionNotFoundError":
        return PpspecError(
            f"revision not found for {ref!r}", where=ref, fix="check `revision` in the profile", exit_code=EXIT_REFUSED
        )
    if name in ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "IncompleteSnapshotError"):
        if offline:
            return PpspecError(
                f"{ref!r} is not in the local Hugging Face cache and ppspec is offline (--offline or HF_HUB_OFFLINE=1)",
                where=ref,
                fix=f"download its metadata once while online (`{_hf_download_line(ref, revision)}`), or point "
                "`model` at a local directory",
                exit_code=EXIT_REFUSED,
            )
        return PpspecError(
            f"the Hugging Face hub ({_endpoint()}) could not be reached and {ref!r} is not in the local cache",
            where=ref,
            fix="check the network, proxy and HF_ENDPOINT; or download the metadata where the hub is reachable; or "
            "point `model` at a local directory",
            exit_code=EXIT_REFUSED,
        )
    detail = str(e).splitlines()[0][:200] if str(e) else ""
    return PpspecError(
        f"could not read {ref!r} from the hub: {name}: {detail}",
        where=ref,
        fix="check the network / HF_ENDPOINT, or use a local directory",
        exit_code=EXIT_REFUSED,
    )


# Every hub exchange for one checkpoint (reachability HEAD, sizes, downloads, header range reads)
# shares ONE total deadline: huggingface_hub's shared httpx2 client runs on netio's deadline
# connections, so a hub that drips bytes cannot hold `check`/`plan`/`serve` past it.
HUB_DEADLINE_ENV = "PPSPEC_HUB_DEADLINE"
HUB_DEADLINE_DEFAULT = 60.0
_HUB_CLOCK = netio.Clock()
_hub_client: dict[str, Any] = {}  # "installed" -> endpoint; "last" -> the last file requested


def _hub_budget(env: str = HUB_DEADLINE_ENV, default: float = HUB_DEADLINE_DEFAULT) -> float:
    """$PPSPEC_HUB_DEADLINE or $PPSPEC_HUB_DOWNLOAD_DEADLINE (io/settings: seconds in (0, 86400], else one error), or
    `default`."""
    from ppspec_cli.io.settings import settings

    s = settings()
    budget = s.hub_download_deadline if env == HUB_DOWNLOAD_DEADLINE_ENV else s.hub_deadline
    return default if budget is None else budget


def _install_hub_client() -> None:
    """huggingface_hub's shared client, rebuilt on connections bounded by _HUB_CLOCK (once per endpoint)."""
    from huggingface_hub import constants, get_session, set_client_factory

    endpoint = str(constants.ENDPOINT)
    if _hub_client.get("installed") == endpoint:
        return
    hooks = get_session().event_hooks  # the hub's own: offline mode, request ids

    def note(request: Any) -> None:  # which file an overrun was reading, for the message
        path = urllib.parse.unquote(str(request.url.path))
        _hub_client["last"] = path.split("/resolve/", 1)[-1].split("/", 1)[-1]

    proxy = netio.proxy_for(endpoint)
    set_client_factory(
        lambda: netio.httpx2_client(
            _HUB_CLOCK,
            proxy,
            event_hooks={"request": [*hooks["request"], note], "response": hooks["response"]},
            follow_redirects=True,
            timeout=None,
        )
    )
    _hub_client["installed"] = endpoint


#: The most bytes one checkpoint's hub metadata (config, index, safetensors headers) may take.
HUB_METADATA_LIMIT = MAX_CONFIG_BYTES + MAX_INDEX_BYTES + MAX_TOTAL_HEADER_BYTES + (64 << 20)
#: The most bytes serve downloads of a hub drafter (its JSON and safetensors files).
HUB_DOWNLOAD_LIMIT_ENV = "PPSPEC_HUB_DOWNLOAD_LIMIT_GB"
HUB_DOWNLOAD_LIMIT_DEFAULT_GB = 64.0


def _hub_limit() -> float:
    """$PPSPEC_HUB_DOWNLOAD_LIMIT_GB (io/settings: a size in GB in (0, 1048576], else one error) in bytes."""
    from ppspec_cli.io.settings import settings

    gb = settings().hub_download_limit_gb
    return (HUB_DOWNLOAD_LIMIT_DEFAULT_GB if gb is None else gb) * 1e9


def _hub_too_large(ref: str, limit: float, env: str | None = None) -> PpspecError:
    what = _hub_client.get("last") or "metadata"
    return PpspecError(
        f"the hub ({_endpoint()}) sent more than {limit / 1e6:.0f} MB for {ref!r} (while reading {what!r}); abandoned",
        where=f"{ref}/{what}",
        fix="check HF_ENDPOINT (a hub serves small metadata files)"
        + (f"; raise {env} for a larger drafter" if env else "")
        + ", or point `model` at a local directory",
        exit_code=EXIT_REFUSED,
    )


def _hub_overrun(ref: str, budget: float) -> PpspecError:
    what = _hub_client.get("last") or "metadata"
    return PpspecError(
        f"the hub ({_endpoint()}) did not finish sending {what!r} of {ref!r} within the {budget:g} s deadline for "
        "one checkpoint's metadata; abandoned",
        where=f"{ref}/{what}",
        fix=f"check the network / HF_ENDPOINT; for a slow hub raise {HUB_DEADLINE_ENV} (seconds); or point `model` "
        "at a local directory",
        exit_code=EXIT_REFUSED,
    )


_REACHABILITY: dict[str, bool] = {}  # endpoint -> unreachable, once per process


def _hub_unreachable(ref: str, revision: str | None) -> bool:
    """One HEAD of the repo's config.json, no retries: True when the hub gives no usable answer
    (connection refused, timeout, 5xx/429). Any real answer (200, 404, 401) counts as reachable:
    hf_hub_download then reports it precisely."""
    ep = _endpoint()
    if ep in _REACHABILITY:
        return _REACHABILITY[ep]
    try:
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url

        get_hf_file_metadata(hf_hub_url(ref, "config.json", revision=revision), timeout=constants.HF_HUB_ETAG_TIMEOUT)
        down = False
    except Exception as e:  # noqa: BLE001
        if _HUB_CLOCK.expired():
            raise
        status = getattr(getattr(e, "response", None), "status_code", None)
        down = status is None or status in (408, 429, 500, 502, 503, 504)
    _REACHABILITY[ep] = down
    return down


HUB_DOWNLOAD_DEADLINE_ENV = "PPSPEC_HUB_DOWNLOAD_DEADLINE"
HUB_DOWNLOAD_DEADLINE_DEFAULT = 3600.0
#: What serve downloads of a hub drafter to build its config overlay: what the engine loads
#: (config and tokenizer JSON, safetensors). Never code (*.py), never pickles (*.bin, *.pt).
SNAPSHOT_PATTERNS = ["*.json", "*.safetensors"]


class DownloadCancelled(Exception):
    """`download_snapshot` was cancelled (a stop signal): nothing further is downloaded."""


#: How often (seconds) the waiting thread asks whether the download was cancelled.
_CANCEL_POLL_S = 0.2


def _snapshot_cancellable(ref: str, revision: str | None, cancelled: Callable[[], bool]) -> str:
    """huggingface_hub's snapshot_download in a daemon thread, waited on so that `cancelled()` is
    asked while it runs (a signal handler only records: a download blocked on a stalled hub would
    otherwise hold `serve` until the deadline). On cancel the hub clock expires, so every exchange
    still running ends at its next socket operation, and DownloadCancelled is raised."""
    from huggingface_hub import snapshot_download

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["path"] = snapshot_download(ref, revision=revision, allow_patterns=SNAPSHOT_PATTERNS)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e

    t = threading.Thread(target=work, name="ppspec-hub-download", daemon=True)
    t.start()
    while t.is_alive():
        if cancelled():
            _HUB_CLOCK.reset(0.0, 0)  # every exchange still running ends at its next operation
            raise DownloadCancelled(ref)
        t.join(_CANCEL_POLL_S)
    if "error" in box:
        raise box["error"]
    return box["path"]


def download_snapshot(ref: str, revision: str | None, cancelled: Callable[[], bool] | None = None) -> Path:
    """The files of hub repo `ref` the engine loads, downloaded (or found in the cache) within one
    total deadline (PPSPEC_HUB_DOWNLOAD_DEADLINE seconds, default 3600) on the same bounded client
    as the metadata reads. Returns the local snapshot directory; every failure is one PpspecError.
    `cancelled`: asked while the download runs; when it says yes, DownloadCancelled."""
    from huggingface_hub import constants, snapshot_download

    budget = _hub_budget(HUB_DOWNLOAD_DEADLINE_ENV, HUB_DOWNLOAD_DEADLINE_DEFAULT)
    _hub_client.pop("last", None)
    xet_was_disabled = constants.HF_HUB_DISABLE_XET
    try:
        _install_hub_client()
        constants.HF_HUB_DISABLE_XET = True  # hf_xet's own connections would escape the deadline
        _HUB_CLOCK.reset(budget, _hub_limit())
        if cancelled is not None:
            return Path(_snapshot_cancellable(ref, revision, cancelled))
        return Path(snapshot_download(ref, revision=revision, allow_patterns=SNAPSHOT_PATTERNS))
    except DownloadCancelled:
        raise
    except Exception as e:  # noqa: BLE001 - one clear message
        if _HUB_CLOCK.over():
            raise _hub_too_large(ref, _hub_limit(), HUB_DOWNLOAD_LIMIT_ENV) from None
        if _HUB_CLOCK.expired():
            raise PpspecError(
                f"the hub ({_endpoint()}) did not finish sending {ref!r} within the {budget:g} s download deadline; "
                "abandoned",
                where=f"{ref}/{_hub_client.get('last') or ''}",
                fix=f"raise {HUB_DOWNLOAD_DEADLINE_ENV} (seconds) for a slow link, or download it first (hf download "
                f"{ref}) and point the profile at the directory",
                exit_code=EXIT_REFUSED,
            ) from None
        raise PpspecError(
            f"cannot download {ref!r} from the hub ({_endpoint()}): {type(e).__name__}: {str(e)[:200]}",
            where=ref,
            fix=f"check the repository id and the network, or download it first (hf download {ref}) and point the "
            "profile at the directory",
            exit_code=EXIT_REFUSED,
        ) from None
    finally:
        if (
            not _HUB_CLOCK.expired() or cancelled is None or not cancelled()
        ):  # a cancelled download's threads stay on an expired clock
            _HUB_CLOCK.clear()
        constants.HF_HUB_DISABLE_XET = xet_was_disabled


def load_hub(ref: str, revision: str | None, *, offline: bool = False, read_headers: bool = True) -> Checkpoint:
    """Metadata from the hub (or its local cache): config, index, and safetensors headers by range
    reads, all within one total deadline (PPSPEC_HUB_DEADLINE seconds, default 60)."""
    from huggingface_hub import constants

    budget = _hub_budget()
    _hub_client.pop("last", None)
    # hf_xet downloads on its own (Rust) connections, outside the deadline: metadata files are
    # small, so they come over the bounded HTTP client even when the hub announces Xet storage.
    xet_was_disabled = constants.HF_HUB_DISABLE_XET
    try:
        _install_hub_client()
        constants.HF_HUB_DISABLE_XET = True
        _HUB_CLOCK.reset(budget, HUB_METADATA_LIMIT)
        return _load_hub(ref, revision, offline=offline, read_headers=read_headers)
    except PpspecError:
        raise
    except Exception:
        if _HUB_CLOCK.over():
            raise _hub_too_large(ref, HUB_METADATA_LIMIT) from None
        if _HUB_CLOCK.expired():
            raise _hub_overrun(ref, budget) from None
        raise
    finally:
        _HUB_CLOCK.clear()
        constants.HF_HUB_DISABLE_XET = xet_was_disabled


def _hub_fetch(ref: str, name: str, revision: str | None, *, cache_only: bool, offline: bool) -> Path | None:
    """One metadata file of hub repo `ref` (its announced size checked first), or from the cache
    only; None when the repository has no such file (or an optional one is not cached)."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.utils import EntryNotFoundError

    try:
        if not cache_only:
            # the size the hub announces, checked before anything is downloaded
            size = get_hf_file_metadata(
                hf_hub_url(ref, name, revision=revision), timeout=constants.HF_HUB_ETAG_TIMEOUT
            ).size
            limit = MAX_INDEX_BYTES if name.startswith("model.safetensors.index") else MAX_CONFIG_BYTES
            if size is not None and size > limit:
                raise PpspecError(
                    f"the hub announces {name} as {size} bytes, more than the {limit >> 20} MiB ppspec reads; not "
                    "downloaded",
                    where=f"{ref}/{name}",
                    fix="check that this is really a model repository",
                    exit_code=EXIT_REFUSED,
                )
        return Path(hf_hub_download(ref, name, revision=revision, local_files_only=cache_only))
    except PpspecError:
        raise
    except Exception as e:  # noqa: BLE001 - translated into one clear message
        if _HUB_CLOCK.expired():
            raise  # load_hub reports the overrun
        # LocalEntryNotFoundError (and its IncompleteSnapshotError) is also an
        # EntryNotFoundError: "not cached, hub offline/unreachable" is not "no such file".
        if any(c.__name__ == "LocalEntryNotFoundError" for c in type(e).__mro__):
            if name == "config.json":
                raise _hub_error(e, ref, offline=offline, revision=revision) from None
            return None  # optional file not in the cache
        if isinstance(e, EntryNotFoundError):
            return None
        raise _hub_error(e, ref, offline=offline, revision=revision) from None


def _hub_headers_skipped(ck: Checkpoint, *, offline: bool, unreachable: bool) -> bool:
    """True, with the gap that says why, when the hub's safetensors headers are not to be read."""
    if offline:
        ck.gaps.append(Gap("no-weights", "offline: safetensors headers not read (tensor-level checks not run)"))
        return True
    if unreachable:
        ck.gaps.append(
            Gap(
                "no-weights",
                f"the hub ({_endpoint()}) could not be reached: metadata from the local cache, safetensors headers "
                "not read",
            )
        )
        return True
    if ck.weight_map is not None and len(set(ck.weight_map.values())) > MAX_SHARDS:
        ck.gaps.append(
            Gap(
                "over-read-limit",
                f"the index names more than {MAX_SHARDS} shard files (MAX_SHARDS): headers not read, tensor-level "
                "checks not run",
            )
        )
        return True
    return False


def _hub_safetensors_metadata(ck: Checkpoint, ref: str, revision: str | None) -> Any | None:
    """The repository's safetensors headers by range reads; None, with a gap, when unreadable."""
    from huggingface_hub import get_safetensors_metadata

    try:
        return get_safetensors_metadata(ref, revision=revision)  # range reads of the headers only
    except Exception as e:  # noqa: BLE001
        if _HUB_CLOCK.expired():
            raise  # load_hub reports the overrun
        kind = type(e).__name__
        if kind == "SafetensorsParsingError":
            ck.gaps.append(
                Gap(
                    "bad-safetensors",
                    f"a safetensors header on the hub is corrupt: {str(e).splitlines()[0][:200] if str(e) else kind}",
                )
            )
        elif kind == "NotASafetensorsRepoError":
            ck.gaps.append(Gap("no-weights", "the repository has no safetensors weights: tensor-level checks not run"))
        else:
            ck.gaps.append(Gap("no-weights", f"safetensors headers not read ({kind}): tensor-level checks not run"))
        return None


def _hub_tensors(ck: Checkpoint, meta: Any) -> dict[str, TensorInfo] | None:
    """The tensors huggingface_hub parsed from the headers, checked as the local reader checks
    them; None, with a gap, when there are too many or one does not add up."""
    if sum(len(fm.tensors) for fm in meta.files_metadata.values()) > MAX_TENSORS:
        ck.gaps.append(
            Gap(
                "over-read-limit",
                f"the shards hold more than {MAX_TENSORS} tensors together (MAX_TENSORS): tensor-level checks not run",
            )
        )
        return None
    tensors: dict[str, TensorInfo] = {}
    for fname, fm in meta.files_metadata.items():
        for tname, ti in fm.tensors.items():
            t = TensorInfo(tname, ti.dtype, tuple(ti.shape), fname)
            offs = tuple(getattr(ti, "data_offsets", ()) or ())
            if t.dtype not in DTYPE_BYTES or (len(offs) == 2 and offs[1] - offs[0] != t.nbytes):
                # the same lie the local reader refuses: a span that does not fit dtype x shape
                ck.gaps.append(
                    Gap(
                        "bad-safetensors",
                        f"{fname}: tensor {tname!r} ({t.dtype} {list(t.shape)}) does not match its data_offsets "
                        f"{list(offs)}",
                    )
                )
                return None
            tensors[tname] = t
    return tensors


def _load_hub(ref: str, revision: str | None, *, offline: bool, read_headers: bool) -> Checkpoint:
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - dependency
        raise PpspecError(
            "huggingface_hub is not installed", fix="pip install huggingface_hub", exit_code=EXIT_REFUSED
        ) from None
    offline = offline or bool(constants.HF_HUB_OFFLINE)
    ck = Checkpoint(ref=ref, location=f"{ref}@{revision or 'main'}", source="hub")
    # hf_hub_download retries an unreachable hub for ~25 s per file before falling back to the
    # cache; one HEAD without retries tells us first, and then we read the cache only.
    unreachable = False if offline else _hub_unreachable(ref, revision)
    cache_only = offline or unreachable
    cfg = _hub_fetch(ref, "config.json", revision, cache_only=cache_only, offline=offline)
    if cfg is None:
        ck.gaps.append(Gap("missing-config", "the repository has no config.json"))
        return ck
    ck.files.append("config.json")
    _read_config(ck, cfg, "config.json")
    idx = _hub_fetch(ref, "model.safetensors.index.json", revision, cache_only=cache_only, offline=offline)
    if idx is not None:
        ck.files.append("model.safetensors.index.json")
        _read_index(ck, idx, "model.safetensors.index.json")
    if not read_headers or _hub_headers_skipped(ck, offline=offline, unreachable=unreachable):
        return ck
    meta = _hub_safetensors_metadata(ck, ref, revision)
    tensors = None if meta is None else _hub_tensors(ck, meta)
    return ck if tensors is None else _use_tensors(ck, tensors)


_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def is_local_ref(ref: str, base_dir: Path | None = None) -> bool:
    """A path (absolute, ./, ../, ~) or an existing directory is local; `org/name` is a hub id.
    With `base_dir` (the profile's folder) a relative reference is looked up there, never in the
    working directory: the answer is the same wherever ppspec runs."""
    if ref.startswith(("/", "./", "../", "~")):
        return True
    if os.path.isdir(ref if base_dir is None else base_dir / ref):
        return True
    return not _HUB_ID.fullmatch(ref)


def local_path(ref: str, base_dir: Path | None) -> Path:
    """Where a local reference points: `~` expanded; a relative path against the profile's folder
    (as compose-style tools resolve theirs), or the working directory when there is no profile."""
    p = Path(os.path.expanduser(ref))
    return p if p.is_absolute() or base_dir is None else base_dir / p


def _load_demo(ref: str, *, read_headers: bool) -> Checkpoint:
    """A `demo:` model's metadata: the cache's build when it holds a current one, else the model's
    description (config and tensor shapes from its builder, no weights). Never builds: that is
    `serve`'s job (running/launch.py)."""
    from ppspec_cli import demo

    name = ref.split(":", 1)[1]
    built = demo.built_demo_model(name)
    if built is not None:
        return load_local(ref, built, read_headers=read_headers)
    d = demo.describe_demo_model(name)
    ck = Checkpoint(
        ref=ref, location=str(demo.demo_cache_dir() / name), source="local", files=["config.json", "model.safetensors"]
    )
    _apply_config(ck, d.config, "config.json")
    if read_headers:
        _use_tensors(
            ck, {k: TensorInfo(k, dtype, shape, "model.safetensors") for k, (dtype, shape) in d.tensors.items()}
        )
    return ck


def load_checkpoint(
    ref: str,
    revision: str | None = None,
    *,
    offline: bool = False,
    base_dir: Path | None = None,
    read_headers: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Checkpoint:
    """Load metadata for a model reference (local dir, hub id, or `demo:<name>`)."""
    if ref.startswith("demo:"):
        return _load_demo(ref, read_headers=read_headers)
    if (
        any(len(part.encode("utf-8", "replace")) > 255 for part in ref.split("/"))
        or len(ref.encode("utf-8", "replace")) > 4096
    ):
        raise PpspecError(
            "model reference has a path component longer than 255 bytes (or is longer than 4096 bytes)",
            where=ref[:80] + "...",
            fix="check the model path or hub id in the profile",
            exit_code=EXIT_REFUSED,
        )
    if is_local_ref(ref, base_dir):
        p = local_path(ref, base_dir)
        if not p.exists() and not ref.startswith(("/", "./", "../", "~")):
            raise PpspecError(
                f"model {ref!r} is neither an existing "
                f"directory{'' if base_dir is None else f' (next to the profile: {p})'} nor a hub id of the form "
                "org/name",
                where=ref,
                fix="give a local checkpoint directory (relative paths start from the profile's folder) or a Hugging "
                "Face hub id (org/name, as the model's hub page writes it)",
                exit_code=EXIT_REFUSED,
            )
        ck = load_local(ref, p, read_headers=read_headers)
        if _HUB_ID.fullmatch(ref):
            ck.gaps.append(
                Gap(
                    "local-folder",
                    f"{ref!r} has the form of a hub id (org/name) and is the folder {p} next to the profile: it is "
                    "read as that folder",
                )
            )
        return ck
    if progress:
        from huggingface_hub import constants

        cache_only = offline or bool(constants.HF_HUB_OFFLINE)
        progress(f"reading {ref} metadata from the {'local Hugging Face cache (offline)' if cache_only else 'hub'}")
    return load_hub(ref, revision, offline=offline, read_headers=read_headers)
