"""Prove every adapter pack against one vLLM release's source, without CUDA and without importing
that vLLM (docs/adapters.md, "Packs proven on each release's source").

`prove(source)` runs in a child process (`prove_in_child`): it serves the release's `vllm` from its
source (sourcevllm: a wheel, an unpacked tree, or a committed snapshot) and then does, per pack,
what ppspec's plugin does at engine start, with the plugin's own code:

1. `core`: the plugin's own patches (the tap watch on EagleModelMixin, the worker confirmation on
   EngineCore): applied and verified by value; a release where they fail refuses every engine;
2. a pack's patches: loaded from its file (`plugin.load_patches`), each anchor read
   (`Patch.anchor`: module, target, required attributes, method parameters, native), then
   `plugin._apply_pack` — apply in order, verify each by value including its behaviour check (the
   relay check runs the patched forward on a toy model as 1-3 simulated PP stages through the
   release's EagleModelMixin and PPHandler; the embedding check asks the release's
   `spec_decode_needs_target_embed`) — the exact sequence whose failure is a `PluginRefusal` at
   engine start; then `plugin.assert_needs` for the behaviours the pack adds (the decoder relays
   taps over PP, builds its embedding on the last stage), and everything is reverted;
3. the names a pack states: every architecture and drafter it matches and every drafter class it
   lists (from the release that added it) is in the release's model registry (`_VLLM_MODELS`), and
   every `inner_decoder` it names is a class of that release;
4. a pack's own probes (`probes:`), as `check --probes` runs them.

A pack is `proven` on the release when all of it held, `refused` when the plugin would refuse the
engine start (the message is the plugin's), `failed` when something else did not hold.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ppspec_cli.knowledge.packproofs import FORMAT

#: Patches whose target class is the inner decoder whose behaviours the profile needs (the names
#: relay.standard_relay_patches and the deepseek_v3 pack give them).
_NEEDS = {"relay_forward": "aux_relay_over_pp", "target_embed_on_last_stage": "target_embed_on_last_stage"}


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e)[:600]}"


def _prove_patches(patches: list[Any], pack: str | None, version: str | None) -> tuple[str, str, list[dict[str, Any]]]:
    """Read every anchor, then apply and verify as the plugin does (plugin._apply_pack's loop), revert.
    (state, detail, rows)."""
    from ppspec_cli.running.engine import plugin
    from ppspec_cli.running.engine.patching import revert_all

    rows = []
    for p in patches:
        try:
            state, why = p.anchor()
        except Exception as e:  # noqa: BLE001 - a harness miss is a finding, named
            state, why = "error", _short(e)
        rows.append({"patch": p.qualname, "target": p.target_name, "anchor": state, "detail": why})
    applied: list[Any] = []
    try:
        for i, p in enumerate(patches):
            try:
                p.apply()
                applied.append(p)
            except Exception as e:  # noqa: BLE001
                rows[i]["outcome"] = f"apply failed: {_short(e)}"
                return "refused", f"{p.qualname}: {_short(e)}", rows
        for i, p in enumerate(patches):
            try:
                p.verify()
            except Exception as e:  # noqa: BLE001
                rows[i]["outcome"] = f"verify failed: {_short(e)}"
                return "refused", f"{p.qualname}: {_short(e)}", rows
            rows[i]["outcome"] = f"skipped: {p.skipped}" if p.skipped is not None else "applied and verified by value"
        needs = [
            {"behaviour": _NEEDS[p.name], "decoder": p.target_name} for p in patches if p.name in _NEEDS and p.target
        ]
        try:
            plugin.assert_needs(needs, version, pack)
        except Exception as e:  # noqa: BLE001 - a PluginRefusal, or the harness
            return "refused", _short(e), rows
        return "proven", "", rows
    finally:
        revert_all(applied)


def _registered(vm_version: str | None) -> tuple[set[str], str]:
    """The architectures of the release's model registry (`_VLLM_MODELS`), by value."""
    import importlib

    try:
        reg = importlib.import_module("vllm.model_executor.models.registry")
        return set(reg._VLLM_MODELS), ""
    except Exception as e:  # noqa: BLE001
        return set(), f"the model registry of vLLM {vm_version} could not be read: {_short(e)}"


def _class_exists(ref: str) -> str | None:
    """None when `module:Class` is a class of the release, else why not."""
    import importlib

    mod, _, name = ref.partition(":")
    try:
        obj: Any = importlib.import_module(mod)
        for part in name.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001
        return _short(e)
    return None if isinstance(obj, type) else f"{ref} is not a class ({type(obj).__name__})"


def _prove_pack(pack: Any, version: str | None, registry: set[str], registry_error: str) -> dict[str, Any]:
    from packaging.version import Version

    from ppspec_cli.knowledge.packs import load_pack_module
    from ppspec_cli.running.engine import plugin

    checks: list[dict[str, Any]] = []
    state = "proven"
    detail = ""
    # 2. patches
    if pack.patches_path is not None:
        try:
            patches = plugin.load_patches(pack.name, pack.patches_path, version)
        except Exception as e:  # noqa: BLE001 - a PluginRefusal: the module does not load
            return {"state": "refused", "detail": _short(e), "checks": checks, "patches": []}
        st, why, rows = _prove_patches(patches, pack.name, version)
        checks.append({"check": "patches", "state": "passed" if st == "proven" else "failed", "detail": why})
        if st != "proven":
            return {"state": "refused", "detail": why, "checks": checks, "patches": rows}
    else:
        rows = []
    # 3. names
    if registry_error:
        checks.append({"check": "registry", "state": "failed", "detail": registry_error})
    else:
        named = [*pack.matches.targets, *pack.matches.drafters]
        named += [d.name for d in pack.drafter_classes if version is None or d.known_in(Version(version))]
        absent = sorted(n for n in dict.fromkeys(named) if n not in registry)
        checks.append(
            {
                "check": "registry",
                "state": "failed" if absent else "passed",
                "detail": f"not in vLLM {version}'s model registry: {', '.join(absent)}"
                if absent
                else f"{len(set(named))} names in the model registry",
            }
        )
    refs = [ref for per in pack.facts.inner_decoder.values() for ref in per.values()]
    if refs:
        bad = {ref: why for ref in dict.fromkeys(refs) if (why := _class_exists(ref))}
        checks.append(
            {
                "check": "inner_decoder",
                "state": "failed" if bad else "passed",
                "detail": "; ".join(f"{r}: {w}" for r, w in bad.items()) or f"{len(set(refs))} classes exist",
            }
        )
    # 4. the pack's own probes
    if pack.probes_path is not None:
        try:
            mod = load_pack_module(pack.name, "probes", pack.probes_path)
            for pname, fn in mod.get_probes():
                try:
                    r = fn()
                    checks.append({"check": f"probe {pname}", "state": r.status, "detail": r.detail})
                except Exception as e:  # noqa: BLE001
                    checks.append({"check": f"probe {pname}", "state": "failed", "detail": _short(e)})
        except Exception as e:  # noqa: BLE001
            checks.append({"check": "probes", "state": "failed", "detail": _short(e)})
    bad_checks = [c for c in checks if c["state"] not in ("passed",)]
    if bad_checks:
        state = "failed"
        detail = "; ".join(f"{c['check']}: {c['detail']}" for c in bad_checks)
    return {"state": state, "detail": detail, "checks": checks, "patches": rows}


def prove(source: Any) -> dict[str, Any]:
    """Run in a child process only: it serves `vllm` from `source` (see `forget`)."""
    from ppspec_cli.running.engine.sourcevllm import SourceVllm, snapshot_digest

    vm = SourceVllm(source)
    vm.install()
    try:
        version = vm.version
        from ppspec_cli.knowledge.packs import load_packs
        from ppspec_cli.running.engine import plugin

        try:
            core_state, core_detail, core_rows = _prove_patches(plugin.core_patches(), None, version)
        except Exception as e:  # noqa: BLE001
            core_state, core_detail, core_rows = "refused", _short(e), []
        registry, reg_err = _registered(version)
        packs: dict[str, Any] = {}
        for pack in load_packs():
            try:
                got = _prove_pack(pack, version, registry, reg_err)
            except Exception as e:  # noqa: BLE001 - never lose the other packs
                got = {"state": "failed", "detail": f"the proof crashed: {_short(e)}", "checks": [], "patches": []}
            if core_state != "proven" and got["state"] == "proven":
                got = {**got, "state": "refused", "detail": f"the plugin's own patches fail: {core_detail}"}
            packs[pack.name] = got
        snapshot = vm.record()
    finally:
        forget(vm)
    return {
        "format": FORMAT,
        "vllm_version": version,
        "commit": vm.commit,
        "proof": {
            "core": {"state": core_state, "detail": core_detail, "patches": core_rows},
            "packs": packs,
        },
        "snapshot": snapshot,
        "snapshot_sha256": snapshot_digest(snapshot),
    }


def forget(vm: Any) -> None:
    """Take a release's `vllm` out of this process (and everything that imported it: relay, the
    packs' modules), so the next release can be served in the same child."""
    vm.uninstall()
    for name in list(sys.modules):
        if (
            name == "vllm"
            or name.startswith(("vllm.", "ppspec_cli._packs."))
            or name == "ppspec_cli.running.engine.relay"
        ):
            del sys.modules[name]
            parent, _, child = name.rpartition(".")
            if parent in sys.modules and not parent.startswith("vllm"):
                vars(sys.modules[parent]).pop(child, None)  # `from pkg import relay` reads the attribute first


_CHILD = """
import json, sys
from pathlib import Path
from ppspec_cli.running.engine import packproof, sourcevllm
jobs = json.loads(sys.argv[1])
for kind, where, out in jobs:
    if kind == "snapshot":
        source = sourcevllm.SnapshotSource(json.loads(Path(where).read_text(encoding="utf-8")))
    else:
        source = sourcevllm.TreeSource(Path(where))
    got = packproof.prove(source)
    Path(out).write_text(json.dumps(got, sort_keys=True), encoding="utf-8")
"""

#: Seconds the proofs of one child may take per release (a few seconds each; torch's import dominates).
PROOF_DEADLINE_S = 300


class ProofError(RuntimeError):
    """The proof could not run (the child failed): the message carries its last output."""


def prove_in_child(jobs: list[tuple[str, Path]], *, timeout: float = PROOF_DEADLINE_S) -> list[dict[str, Any]]:
    """Prove every pack against each release in one fresh interpreter. A job is (`source`, a wheel
    or a folder holding vllm/) or (`snapshot`, a snapshot file written by tools/prove_packs.py)."""
    import tempfile

    from ppspec_cli.io import spawn

    with tempfile.TemporaryDirectory(prefix="ppspec-packproof-") as tmp:
        plan = []
        for i, (kind, where) in enumerate(jobs):
            if kind not in ("source", "snapshot"):
                raise ValueError(kind)
            plan.append([kind, str(where), str(Path(tmp) / f"proof-{i}.json")])
        env = spawn.child_env()
        env.pop("PPSPEC_PLAN_FILE", None)
        cp = spawn.run(
            spawn.python_argv("-c", _CHILD, json.dumps(plan)),
            capture_output=True,
            text=True,
            timeout=timeout * max(1, len(jobs)),
            env=env,
        )
        outs = [Path(p[2]) for p in plan]
        if cp.returncode != 0 or not all(o.is_file() for o in outs):
            tail = (cp.stderr or cp.stdout or "")[-3000:]
            raise ProofError(
                f"the proof of {', '.join(str(w) for _, w in jobs)} failed to run (exit {cp.returncode}):\n{tail}"
            )
        return [json.loads(o.read_text(encoding="utf-8")) for o in outs]
