"""vLLM's architecture tables: per release, the facts knowledge/archscan.py reads off vLLM's source
for every registered architecture (committed under knowledge/arch/vllm-<version>.json by
tools/vllm_arch_facts.py), and the same read of the installed engine, cached per install.

Which table a verdict uses (`pick`):
1. the installed engine's, when it is the engine that will serve the profile (its build targets
   the profile's platform): a verified release (by its metadata, else by the version its source
   was built as, `vllm/_version.py`) reads its committed table (the same code); any other install
   (a nightly, a release candidate, a fork) is scanned by value, once per install;
2. else the committed table of the profile's engine version (its release);
3. else the newest committed release's (the verdict is then unverified: knowledge/versions.py).

Nothing here imports vLLM.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ppspec_cli.errors import PpspecError
from ppspec_cli.io import safeio

#: The table format (bumped when a reader could misread an older table).
SCHEMA = 1
#: The committed tables, one file per release.
TABLE_DIR = Path(__file__).resolve().parent / "arch"
#: The release-wide sections (knowledge/releasescan) a table must carry; a cached scan without them is stale.
RELEASE_SECTIONS = ("runners", "config_hooks", "removed", "speculators_refused", "target_embed")
#: The drafter rules (knowledge/drafterscan.rules) a table must carry; a cached scan without one is stale.
DRAFTER_RULE_SECTIONS = (
    "speculators",
    "eagle_config",
    "mtp_rewrite",
    "config_override",
    "dspark_class",
    "target_hidden_states",
)
#: A table is a few hundred KB; nothing larger is a table.
MAX_TABLE_BYTES = 8 * 1024 * 1024


def table_document(scanned: dict[str, Any], version: str | None, commit: str | None, *, origin: str) -> dict[str, Any]:
    """The JSON document of one table (what tools/vllm_arch_facts.py writes)."""
    return {
        "schema": SCHEMA,
        "vllm_version": version or "unknown",
        "commit": commit,
        "origin": origin,
        "generated_by": "tools/vllm_arch_facts.py (ppspec_cli.knowledge.archscan)",
        **scanned,
    }


@dataclass(frozen=True)
class ArchTable:
    version: str
    commit: str | None
    origin: str  # "wheel vllm-0.33.0-...whl", "installed source ..."
    source: str  # "committed" | "installed"
    doc: dict[str, Any] = field(repr=False, compare=False)
    #: why this table stands in for the installed engine's (its source or cache could not be read)
    note: str | None = field(default=None, compare=False)

    def _entry(self, group: str, arch: str, platform: str) -> dict[str, Any] | None:
        e = self.doc.get(group, {}).get(arch)
        if not isinstance(e, dict):
            return None
        for plats, facts in (e.get("platforms") or {}).items():
            if platform in plats.split(","):
                return facts if isinstance(facts, dict) and facts.get("class") else None
        return None

    def registers(self, arch: str) -> bool:
        return arch in self.doc.get("targets", {}) or arch in self.doc.get("drafters", {})

    def target(self, arch: str, platform: str) -> dict[str, Any] | None:
        return self._entry("targets", arch, platform)

    def drafter(self, arch: str, platform: str) -> dict[str, Any] | None:
        return self._entry("drafters", arch, platform)

    def mtp_architecture(self, model_type: str | None, arch: str | None) -> str | None:
        """The MTP architecture `method: mtp` rewrites the target to (config/speculative.py)."""
        rw = self.doc.get("mtp_rewrites") or {}
        return (rw.get("architecture") or {}).get(arch or "") or (rw.get("model_type") or {}).get(model_type or "")

    @property
    def counts(self) -> tuple[int, int]:
        return len(self.doc.get("targets", {})), len(self.doc.get("drafters", {}))

    def summary(self) -> dict[str, Any]:
        """What `adapters list --json` shows of a table: its coverage and where its facts came from."""
        n_t, n_d = self.counts
        return {
            "vllm_version": self.version,
            "architectures": n_t,
            "drafter_classes": n_d,
            "source": self.source,
            "origin": self.origin,
            "commit": self.commit,
            "described": self.describe(),
            "note": self.note,
        }

    def describe(self) -> str:
        where = (
            f"generated from the vLLM {self.version} {self.origin}"
            if self.source == "committed"
            else f"read from the installed engine ({self.origin})"
        )
        return f"{where}{f', commit {self.commit}' if self.commit else ''}" + (f"; {self.note}" if self.note else "")


def _shape_problem(doc: Any) -> str | None:
    """Why a table document is not one a reader can use (None: it is): the schema, and the types
    every reader relies on (targets/drafters: name -> {platforms: {platform: dict}}; checks: name ->
    text; strings where a version, commit or origin belongs)."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        return f"not a schema-{SCHEMA} vLLM architecture table"
    for k in ("vllm_version", "origin"):
        if not isinstance(doc.get(k), str):
            return f"{k} is not text"
    if doc.get("commit") is not None and not isinstance(doc.get("commit"), str):
        return "commit is not text"
    for group in ("targets", "drafters"):
        g = doc.get(group, {})
        if not isinstance(g, dict):
            return f"{group} is not a mapping"
        for arch, e in g.items():
            plats = e.get("platforms") if isinstance(e, dict) else None
            if not isinstance(plats, dict) or not all(isinstance(v, dict) for v in plats.values()):
                return f"{group}.{str(arch)[:60]} has no platforms mapping"
    for k in ("checks", "mtp_rewrites"):
        if not isinstance(doc.get(k, {}), dict):
            return f"{k} is not a mapping"
    if not all(isinstance(v, str) for v in doc.get("checks", {}).values()):
        return "checks holds a value that is not text"
    return None


def _load(path: Path, source: str) -> ArchTable:
    doc = safeio.read_json(
        path, limit=MAX_TABLE_BYTES, what="vLLM architecture table", fix="regenerate it with tools/vllm_arch_facts.py"
    )
    why = _shape_problem(doc)
    if why is not None:
        raise PpspecError(f"{path} is {why}", where=str(path), fix="regenerate it with tools/vllm_arch_facts.py")
    return ArchTable(doc["vllm_version"], doc.get("commit"), doc["origin"], source, doc)


def _release(v: str | None) -> Version | None:
    try:
        return Version(Version(v or "").base_version)
    except InvalidVersion:
        return None


def committed_versions() -> list[str]:
    """The releases with a committed table, oldest first."""
    got = [p.name[len("vllm-") : -len(".json")] for p in TABLE_DIR.glob("vllm-*.json")]
    return sorted((v for v in got if _release(v) is not None), key=lambda v: _release(v))  # type: ignore[arg-type, return-value]


def committed(version: str | None) -> ArchTable | None:
    """The committed table of a version's release (0.33.0rc1, 0.33.0+fork -> 0.33.0)."""
    rel = _release(version)
    for v in committed_versions():
        if _release(v) == rel:
            return _committed_file(v)
    return None


_LOADED: dict[str, ArchTable] = {}


def _committed_file(v: str) -> ArchTable:
    if v not in _LOADED:
        _LOADED[v] = _load(TABLE_DIR / f"vllm-{v}.json", "committed")
    return _LOADED[v]


def newest() -> ArchTable | None:
    vs = committed_versions()
    return _committed_file(vs[-1]) if vs else None


# ---------------------------------------------------------------------------------------------
# The installed engine, read by value


def installed_source_root() -> Path | None:
    """The directory holding the installed `vllm` package (found without importing it)."""
    from ppspec_cli.knowledge.installcache import vllm_root

    root = vllm_root()
    return None if root is None else root.parent


#: An install-cache entry that records a scan whose table was over MAX_TABLE_BYTES (so it is not
#: scanned again on every run): {"schema": SCHEMA, "oversized": bytes}.
_OVERSIZED = "oversized"


def _oversized(size: int, where: str) -> PpspecError:
    return PpspecError(
        f"the installed vLLM's architecture table is {size} bytes, over the {MAX_TABLE_BYTES} a table may be",
        where=where,
        fix=f"delete {where} to scan again",
    )


def _cached(doc: Any, version: str) -> ArchTable | None:
    """A cached table usable as it is: of this version, of the shape every reader relies on, with
    the release-wide sections (an entry written before they were read is stale: scanned again)."""
    if not isinstance(doc, dict) or doc.get("vllm_version") != version or _shape_problem(doc) is not None:
        return None
    if not all(k in doc for k in RELEASE_SECTIONS):
        return None
    dr = doc.get("drafter_rules")
    if not isinstance(dr, dict) or not all(k in dr for k in DRAFTER_RULE_SECTIONS):
        return None
    return ArchTable(version, doc.get("commit"), str(doc["origin"]), "installed", doc)


def installed_table(root: Path, version: str) -> ArchTable:
    """The installed engine's table: scanned once per install, then read from the install cache
    (knowledge/installcache.py). The scan and the cache are untrusted input like any other: an
    entry that is not a table of the right shape is a miss (scanned again and replaced); a scan
    that fails, or whose table would be over MAX_TABLE_BYTES (recorded, so it is not scanned again
    on every run), is one PpspecError saying why (`pick` then uses a committed table and says so)."""
    from ppspec_cli.knowledge import archscan, installcache, releasescan

    key = installcache.install_key(root / "vllm")
    where = str(installcache.path("arch", key)) if key is not None else str(root / "vllm")
    doc = installcache.read("arch", key) if key is not None else None
    if isinstance(doc, dict) and doc.get("schema") == SCHEMA and isinstance(doc.get(_OVERSIZED), int):
        raise _oversized(doc[_OVERSIZED], where)  # a recorded oversized scan is a known answer
    got = _cached(doc, version)
    if got is not None:
        return got
    try:
        _, commit = archscan.source_version(root)
        doc = table_document(
            releasescan.scan(root), version, commit, origin=f"installed vLLM {version} at {root / 'vllm'}"
        )
        size = len(json.dumps(doc, sort_keys=True).encode())
    except (RecursionError, MemoryError, ValueError, OSError) as e:
        raise PpspecError(
            f"the installed vLLM's source at {root / 'vllm'} could not be read ({type(e).__name__})",
            where=str(root / "vllm"),
            fix="reinstall vLLM",
        ) from None
    if size > MAX_TABLE_BYTES:
        if key is not None:
            installcache.write("arch", key, {"schema": SCHEMA, _OVERSIZED: size})
        raise _oversized(size, where)
    if key is not None:
        installcache.write("arch", key, doc)
    return ArchTable(version, commit, str(doc["origin"]), "installed", doc)


def engine_table(installed: Any) -> ArchTable | None:
    """The table of the installed engine (a VllmInstall) read by value: a verified release (by its
    metadata, else by the version its source was built as) reads its committed table (the same
    code); any other install is scanned once per install. None without an installed source. The
    run's gatherer asks this where the installed engine serves the profile; `pick` is pure."""
    from ppspec_cli.knowledge.versions import verdict

    if installed is None:
        return None
    if verdict(installed.version).verified and (t := committed(installed.version)) is not None:
        return t
    root = installed_source_root()
    if root is None:
        return None
    from ppspec_cli.knowledge import archscan

    built = archscan.source_version(root)[0] or installed.version  # what the source was built as
    if verdict(built).verified and (t := committed(built)) is not None:
        return t  # the code on disk is a verified release
    return installed_table(root, built)


def pick(platform: str, installed: Any, facts_version: str, engine: ArchTable | Exception | None) -> ArchTable | None:
    """The table a verdict uses (module doc): the installed engine's (`engine`, gathered: its table,
    or why its source could not be read) when it is the engine that serves `platform`; else the
    committed table of `facts_version`, else the newest. An installed engine whose source or cache
    is unusable (a PpspecError) gets a committed table that says so (its `note`); any other error
    is raised (the caller: no table)."""
    if installed is not None and installed.platform == platform and engine is not None:
        if isinstance(engine, PpspecError):
            fallback = committed(facts_version) or newest()
            if fallback is None:
                return None
            return replace(
                fallback,
                note=f"the installed engine's own facts are not used ({engine.what[:300]}); vLLM "
                f"{fallback.version}'s committed table stands in",
            )
        if isinstance(engine, Exception):
            raise engine
        return engine
    return committed(facts_version) or newest()


# ---------------------------------------------------------------------------------------------
# Capabilities (knowledge/packs.py's names) answered from a table


def _short(ref: str | None) -> str:
    return (ref or "?").rsplit(":", 1)[-1]


def relay_verdict(t: dict[str, Any]) -> tuple[str, str]:
    """('native' | 'unsupported' | 'trap' | 'unknown', reason) for relaying taps over PP."""
    relay = t.get("relay")
    dec = _short(t.get("decoder"))
    if not isinstance(relay, dict):
        return (
            "unknown",
            f"vLLM's source does not say which inner decoder it builds ({t.get('relay_why') or t.get('decoder_why')})",
        )
    if relay.get("relays_over_pp"):
        return (
            "native",
            f"its inner decoder {dec} opts in ({relay.get('opt_in_at')}) and its forward relays taps "
            f"({relay.get('forward_at')})",
        )
    if t.get("decoder") is None:
        return "unsupported", f"{t.get('decoder_why')} ({t.get('decoder_at')})"
    if relay.get("opt_in"):
        return "trap", (
            f"its inner decoder {dec} inherits supports_aux_hidden_states_over_pp = True from "
            f"{_short(relay.get('opt_in_defined_by'))} "
            f"({relay.get('opt_in_at')}) but runs its own forward ({relay.get('forward_at')}), which never relays "
            "taps between stages"
        )
    where = relay.get("opt_in_at") or t.get("decoder_at")
    return (
        "unsupported",
        f"its inner decoder {dec} ({t.get('decoder_at')}) does not opt in to relaying taps over PP "
        f"(supports_aux_hidden_states_over_pp is False: {where})",
    )


def drafter_load_verdict(
    t: dict[str, Any], checks: dict[str, str], pp: int, method: str, runner: str
) -> tuple[str, str]:
    """('refused' | 'ok' | 'unknown', reason): whether vLLM's drafter load accepts the target.
    The V1 runner (SpecDecodeBaseProposer.load_model, every method that reads the target's hidden
    states) needs, at PP world size 1, `.model` of the target (of its language model) with
    `embed_tokens` or `embedding` (`_maybe_share_embeddings`), and reads `.model` at any PP
    (`_maybe_share_lm_head`). Model Runner V2 reads `.model` unguarded in the loaders of eagle,
    eagle3, mtp and dspark (`v2_reads_target_model_<method>`), and shares the embedding only where
    the target has one. `runner`: 'v1' | 'v2' (the profile's, planning/resolve: CPU runs V1)."""
    cls = _short(t.get("class"))
    v1 = runner == "v1"
    if t.get("target_model") is False:
        return _no_model_verdict(t, checks, pp, method, v1)
    if t.get("target_model") is None:
        return "unknown", str(t.get("target_model_why") or t.get("decoder_why"))
    if not v1 or pp > 1:
        return "ok", (
            f"{cls} has `.model`; "
            + (
                "Model Runner V2 shares the target embedding only where the target has one"
                if not v1
                else "at pipeline_parallel > 1 the V1 runner loads the drafter's embedding itself "
                f"({checks.get('drafter_share_embed_pp1', '?')})"
            )
        )
    emb = t.get("model_embed")
    if emb is False and checks.get("drafter_needs_target_embed"):
        return "refused", (
            f"its `.model` {_short(t.get('decoder'))} ({t.get('model_embed_at')}) has neither embed_tokens nor "
            "embedding: vLLM's V1 runner raises "
            "AttributeError(\"Target model does not have 'embed_tokens' or 'embedding' attribute\") "
            f"({checks['drafter_needs_target_embed']})"
        )
    if emb is None or emb is False:
        return "unknown", str(t.get("model_embed_why") or "the table carries no drafter-load check")
    return "ok", f"its `.model` has {emb} ({t.get('model_embed_at')})"


def _no_model_verdict(t: dict[str, Any], checks: dict[str, str], pp: int, method: str, v1: bool) -> tuple[str, str]:
    cls = _short(t.get("class"))
    no_attr = f"AttributeError(\"'{cls}' object has no attribute 'model'\")"
    where = f"{cls} ({t.get('target_model_at')}) has no `.model`"
    if v1 and pp == 1 and checks.get("drafter_needs_target_model"):
        return (
            "refused",
            f"{where}: vLLM's V1 runner raises AttributeError(\"Target model does not have 'model' attribute\") "
            f"({checks['drafter_needs_target_model']})",
        )
    if v1 and checks.get("drafter_reads_target_model"):
        return (
            "refused",
            f"{where}: vLLM's V1 runner reads target.model at drafter load ({checks['drafter_reads_target_model']}): "
            f"{no_attr}",
        )
    if not v1 and checks.get(f"v2_reads_target_model_{method}"):
        return (
            "refused",
            f"{where}: Model Runner V2 reads target.model when it loads the {method} drafter "
            f"({checks[f'v2_reads_target_model_{method}']}): {no_attr}",
        )
    if not v1:
        return "ok", f"{where}, but Model Runner V2's {method} loader reads it through getattr with a default"
    return "unknown", f"{where}; the table carries no drafter-load check"


def table_support(
    table: ArchTable | None, arch: str | None, capability: str, platform: str, entry: dict[str, Any] | None = None
) -> tuple[str, str] | None:
    """(status, reason) from the table, or None when the table cannot say (no table, architecture
    not registered, or a capability the table does not carry). `entry`: the architecture's facts
    already resolved for a checkpoint (with_language_model)."""
    if table is None or not arch:
        return None
    t = entry if entry is not None else table.target(arch, platform)
    if t is None:
        return None
    src = f"vLLM {table.version} source"
    if capability == "aux_relay_over_pp":
        status, why = relay_verdict(t)
        if status == "unknown":
            return None
        return ("unsupported" if status == "trap" else status), f"{src}: {why}"
    if capability == "target_embed_on_last_stage":
        emb = t.get("embed_last_stage")
        if emb is None:
            return None
        return (
            ("native" if emb else "unsupported"),
            f"{src}: {_short(t.get('decoder') or t.get('class'))} {'builds' if emb else 'does not build'} its "
            f"embedding on the last stage ({t.get('embed_at')})",
        )
    return None


#: archscan.TEXT_CONFIG_PATH: the language model's config is the checkpoint's text config.
TEXT_CONFIG_PATH = "(text config)"


def with_language_model(
    table: ArchTable,
    t: dict[str, Any],
    config: dict[str, Any] | None,
    platform: str,
    text: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A multimodal class whose language model vLLM picks at run time from the config's
    `architectures` (`init_vllm_registered_model(hf_config=config.text_config)`): the decoder facts
    of that registered architecture, for this checkpoint. Unchanged when it cannot be told."""
    where = t.get("language_model_from")
    if not where or not isinstance(config, dict):
        return t
    sub = config if where == "." else (text if where == TEXT_CONFIG_PATH else config.get(where))
    archs = sub.get("architectures") if isinstance(sub, dict) else None
    inner_arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    inner = table.target(inner_arch, platform) if inner_arch else None
    if inner is None and inner_arch is None and isinstance(sub, dict):
        # vLLM then asks transformers for the causal-LM class of the model_type: not in vLLM's source
        at = (table.doc.get("checks") or {}).get("lm_arch_from_transformers") or "VllmConfig.with_hf_config"
        why = (
            f"the checkpoint's {where if where != '.' else 'config'} names no architectures: vLLM builds the "
            "language model "
            f"transformers' table names for model_type {sub.get('model_type')!r} ({at}), which is not in vLLM's source"
        )
        return {**t, "relay_why": why, "decoder_why": why, "embed_why": why, "target_model_why": why}
    if inner is None:
        return t
    keep = (
        "decoder",
        "decoder_at",
        "decoder_why",
        "relay",
        "relay_why",
        "embed_last_stage",
        "embed_at",
        "embed_why",
        "layer_rule",
        "layer_rule_why",
        "target_model",
        "target_model_at",
        "target_model_why",
        "model_embed",
        "model_embed_at",
        "model_embed_why",
        "embed_not_needed",
    )
    merged = {k: v for k, v in t.items() if k not in keep}
    merged.update({k: inner[k] for k in keep if k in inner})
    merged["language_model"] = f"{inner_arch} (from the config's {where if where != '.' else ''} architectures)"
    return merged


# ---------------------------------------------------------------------------------------------
# Hybrid layer layouts (the table's layer_rule, knowledge/archscan.layer_rule), applied to a config


def layer_kinds(rule: dict[str, Any] | None, text: dict[str, Any], n_layers: int) -> list[str] | None:
    """Each layer's kind, by the rule vLLM's source applies to the target's (text) config; None
    when the config does not carry what the rule reads (then nothing is said)."""
    if not rule or n_layers <= 0:
        return None
    kind = rule.get("rule", "list")
    if kind == "list":
        got = text.get(rule.get("key", ""))
        got = list(got) if isinstance(got, list | str) else None
        return got if got is not None and len(got) == n_layers and all(isinstance(k, str) for k in got) else None
    if kind == "uniform":
        return [str(rule.get("layer_class"))] * n_layers
    if kind == "every":
        g = text.get(rule["key"], rule.get("default"))
        if not isinstance(g, int) or isinstance(g, bool) or g <= 0:
            return None
        off, last_group = int(rule.get("offset", 0)), n_layers // g * g
        out = []
        for i in range(n_layers):
            on = (i + off) % g == 0 or (bool(rule.get("tail")) and i >= last_group)
            out.append(rule["hit"] if on == bool(rule.get("hit_on_multiple")) else rule["miss"])
        return out
    if kind == "listed":
        v: Any = text
        for k in rule.get("key", []):
            v = v.get(k) if isinstance(v, dict) else None
        if not isinstance(v, list) or not all(isinstance(x, int) for x in v):
            return None
        off = int(rule.get("offset", 0))
        return [rule["hit"] if i + off in v else rule["miss"] for i in range(n_layers)]
    return None


def describe_layer_rule(rule: dict[str, Any]) -> str:
    """How vLLM decides each layer's kind, in words, with the source line."""
    kind = rule.get("rule", "list")
    if kind == "uniform":
        return f"every layer is one {rule.get('layer_class')} ({rule.get('class_at')}; built at {rule.get('at')})"
    if kind == "every":
        tail = ", and the layers after the last whole group" if rule.get("tail") else ""
        which = "holds" if rule.get("hit_on_multiple") else "does not hold"
        return (
            f"the config's `{rule['key']}` (g): is_{rule['hit']}_layer {which} on layer i where (i + "
            f"{rule.get('offset', 0)}) % g == 0{tail} "
            f"({rule.get('at')}, called at {rule.get('called_at')})"
        )
    if kind == "listed":
        return (
            f"the config's `{'.'.join(rule['key'])}`: is_{rule['hit']}_layer holds on layer i where i + "
            f"{rule.get('offset', 0)} is listed ({rule.get('at')}, called at {rule.get('called_at')})"
        )
    return f"the config's `{rule.get('key')}` ({rule.get('at')})"


def with_embed_rule(t: dict[str, Any], config: dict[str, Any] | None, text: dict[str, Any] | None) -> dict[str, Any]:
    """A class that keeps its embedding on the last PP stage only when the checkpoint ties it (the
    table's `embed_rule`: the Transformers backend's `pipeline_parallel`): the embedding fact for
    this checkpoint. vLLM reads the flag on the text config and on the top-level config (either
    set keeps it); a flag the config files leave out takes the config class's default, which is
    not in them: then nothing is said."""
    rule = t.get("embed_rule")
    if not isinstance(rule, dict) or t.get("embed_last_stage") is not None:
        return t
    flag = rule.get("config_flag", "")
    cfgs = [c for c in (text, config) if isinstance(c, dict)]
    vals = [c.get(flag) for c in cfgs]
    if any(v is True for v in vals):
        got: bool | None = True
    elif vals and all(v is False for v in vals):
        got = False
    else:
        return t
    why = (
        f"{'ties' if got else 'does not tie'} its embeddings ({flag}); the class keeps the embedding on the last "
        f"stage only then ({rule.get('at')})"
    )
    return {**t, "embed_last_stage": got, "embed_at": why}


# ---------------------------------------------------------------------------------------------
# Release-wide facts (knowledge/releasescan): runners, config hooks, what a release dropped


def platform_runner(table: ArchTable | None, platform: str) -> tuple[str, str] | None:
    """('v1' | 'v2', why with file:line): the model runner a default install of the table's release
    builds on `platform` (the `runners` section); None when the table does not say (an older table,
    an unread worker)."""
    if table is None:
        return None
    e = (((table.doc.get("runners") or {}).get("platforms") or {}).get(platform)) or {}
    runner = e.get("runner")
    if runner not in ("v1", "v2"):
        return None
    return runner, f"vLLM {table.version} on {platform}: {e.get('why') or e.get('worker_at')}"


def runner_section(table: ArchTable | None) -> dict[str, Any]:
    return (table.doc.get("runners") or {}) if table is not None else {}


def has_v1_runner(table: ArchTable | None) -> bool | None:
    """Whether the release has Model Runner V1 (None: the table does not say)."""
    run = runner_section(table)
    if not run.get("classes"):
        return None
    return "v1" in run["classes"]


def runner_relays_taps(table: ArchTable | None, runner: str) -> tuple[bool, str] | None:
    """(whether the runner relays taps between PP stages, where it does) from the table's `runners`
    section; None when the table does not say."""
    got = runner_section(table).get("relays_taps")
    if not isinstance(got, dict) or runner not in got:
        return None
    return got[runner] is not None, str(got[runner] or "")


def v1_refuses(table: ArchTable | None, method: str) -> str | None:
    """Where Model Runner V1 of the table's release refuses a method (file:line), else None."""
    return (runner_section(table).get("v1_refuses_methods") or {}).get(method)


def config_refusals(table: ArchTable | None, arch: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The architecture's `verify_and_update_config` hook and the refusals read from it (vLLM's
    `MODELS_CONFIG_MAP`, keyed on the architecture vLLM resolved); None without one."""
    if table is None or not arch:
        return None
    h = (table.doc.get("config_hooks") or {}).get(arch)
    if not isinstance(h, dict):
        return None
    return h, [r for r in h.get("refuses") or [] if isinstance(r, dict)]


def removed(table: ArchTable | None, arch: str | None) -> dict[str, Any] | None:
    """{"until", "at"} when the table's release refuses `arch` as no longer supported."""
    if table is None or not arch:
        return None
    got = (table.doc.get("removed") or {}).get(arch)
    return got if isinstance(got, dict) else None


def dropped(table: ArchTable | None, arch: str | None) -> dict[str, Any] | None:
    """An architecture or drafter class the table's release does not register but an older
    committed release did: {"last": the newest such release, "at": its registry line, "dropped_in":
    the first committed release after it (the one that dropped it)}. None when the table registers
    it or no committed release ever did."""
    if table is None or not arch or table.registers(arch):
        return None
    mine = _release(table.version)
    older = [v for v in committed_versions() if mine is None or (_release(v) or mine) < mine]
    for i in range(len(older) - 1, -1, -1):
        t = _committed_file(older[i])
        e = t.doc.get("targets", {}).get(arch) or t.doc.get("drafters", {}).get(arch)
        if isinstance(e, dict):
            after = [
                v for v in committed_versions() if (_release(v) or Version("0")) > (_release(older[i]) or Version("0"))
            ]
            return {"last": older[i], "at": e.get("registry"), "dropped_in": after[0] if after else table.version}
    return None


def speculators_refused(table: ArchTable | None, kind: str | None) -> dict[str, Any] | None:
    """{"at", "message"} when the table's release refuses a speculators-format kind (P-EAGLE)."""
    if table is None or not isinstance(kind, str):
        return None
    got = (table.doc.get("speculators_refused") or {}).get(kind)
    return got if isinstance(got, dict) else None
