"""Will it fit: the memory findings of a resolved profile (planning/memory.py's plan, built by
planning/memory_inputs.py). Codes (findings/codes.py, section "Memory and KV cache"):

- `memory-weights-exceed` (error): a GPU's weights alone exceed its budget (memory x gpu-memory-utilization):
  vLLM runs out of memory while loading; the message names the stage, by how much, and the layouts of the same
  GPU count that would fit;
- `kv-cache-too-small` (error): a stage's KV memory cannot hold one request of `max-model-len` tokens: vLLM
  refuses at start ("To serve at least one request with the model's max seq len ...",
  v1/core/kv_cache_planning.py:125 in 0.34, :78 in 0.33);
- `kv-cache-below-max-num-seqs` (warning): the cache holds fewer requests of `max-model-len` than the profile's
  `max-num-seqs` (the rest wait or are preempted);
- `partition-kv-unused` (warning): the declared `layer_partition` leaves a large share of the stages' KV memory
  unused (vLLM sizes every stage's cache by the smallest: kv_cache_planning.py:1683-1698);
- `memory-capacity` (info): per stage the weights on one GPU, the overheads, the KV cache's memory and tokens,
  and which stage limits the engine and why;
- `memory-needs` (info): without `hardware`, what one GPU of each stage needs (nothing refused);
- `memory-not-judged` (info): why the memory could not be judged (unknown sizes, an unreadable `hardware`).
"""

from __future__ import annotations

from typing import Any, Iterator

from ppspec_cli.findings import Finding
from ppspec_cli.findings.codes import (
    HARDWARE_UNKNOWN,
    KV_CACHE_BELOW_MAX_NUM_SEQS,
    KV_CACHE_TOO_SMALL,
    MEMORY_CAPACITY,
    MEMORY_NEEDS,
    MEMORY_NOT_JUDGED,
    MEMORY_WEIGHTS_EXCEED,
    PARTITION_KV_UNUSED,
)
from ppspec_cli.planning.memory import GIB, max_len_that_fits
from ppspec_cli.planning.memory_inputs import Memory, fits_layouts, memory_of

#: the share of the stages' KV memory a declared partition may leave unused before `partition-kv-unused`
UNUSED_SHARE = 0.25


def _g(x: float | None) -> str:
    return "?" if x is None else f"{x / GIB:.1f} GiB"


def _tokens(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def memory_findings(r: Any, mem: Memory | None = None) -> Iterator[Finding]:
    """The findings above for a resolved profile (its `hardware`, or none)."""
    if r.plan is None or r.target is None or r.profile.disaggregated:
        return
    mem = mem if mem is not None else r.memory if r.memory is not None else memory_of(r)
    if mem.unknown is not None and mem.unknown.startswith("hardware "):
        yield HARDWARE_UNKNOWN.at(
            "hardware",
            mem.unknown,
            fix="use h100, h200, a100 or l40s, or NAME,mem=GiB (the memory one GPU reports)",
        )
        return
    if mem.unknown is not None:
        yield MEMORY_NOT_JUDGED.at(
            "target.model",
            f"memory per GPU not judged: {mem.unknown}",
            fix="read the checkpoint where its index or safetensors headers are (or declare the family's weight "
            "layout in its pack)",
        )
        return
    mp, s = mem.plan, mem.settings
    if mp is None or s is None:
        return
    topo = r.profile.topology
    gpus = topo.tensor_parallel * topo.pipeline_parallel
    where = f"TP {topo.tensor_parallel} x PP {topo.pipeline_parallel}"
    if mp.budget is None and mp.engine_tokens is None:
        per = "; ".join(
            f"stage {x.rank}: {_g(x.weights)} weights + {_g(x.overhead)} activations/graphs/runtime"
            + (f" + {_g(x.request_bytes)} KV for one {s.max_model_len:,}-token request" if x.request_bytes else "")
            for x in mp.stages
        )
        yield MEMORY_NEEDS.at(
            "hardware",
            f"one GPU of each stage needs ({where}, {mem.weights_source}): {per}; nothing is judged without `hardware`",
            fix="set `hardware:` in the profile (or pass --hardware h100 / NAME,mem=GiB) to judge the fit and the KV "
            "capacity",
        )
        return
    dev = mem.device
    budget = mp.budget
    if budget is None:  # the KV cache's size is given (kv-cache-memory-bytes; the CPU's VLLM_CPU_KVCACHE_SPACE)
        budget_txt = f"a KV cache of {_g(s.kv_cache_memory_bytes)} (kv-cache-memory-bytes / VLLM_CPU_KVCACHE_SPACE)"
    else:
        budget_txt = (
            f"{_g(budget)} ({dev.name if dev else '?'}: {_g(mp.device_bytes)} x gpu-memory-utilization "
            f"{s.utilization:g})"
        )
    over = mp.over_budget()
    if over and budget is not None:
        worst = max(over, key=lambda x: x.weights)
        fits: list[str] = []
        for n in (gpus, 2 * gpus, 4 * gpus):  # the same GPUs first, then twice and four times as many
            fits = [f"TP {a} x PP {b}" for a, b in fits_layouts(r, n, budget)]
            if fits:
                break
        yield MEMORY_WEIGHTS_EXCEED.at(
            "topology",
            f"{where}: the weights on one GPU of stage {worst.rank} are {_g(worst.weights)}, "
            f"{_g(worst.weights - budget)} over its budget {budget_txt}"
            + (f"; also stage(s) {', '.join(str(x.rank) for x in over if x is not worst)}" if len(over) > 1 else "")
            + f" (weights from {mem.weights_source}): vLLM runs out of memory while loading",
            fix=(
                f"layouts whose weights fit on {n} GPU(s)"
                + (f" (none of {gpus} GPUs does)" if n > gpus else "")
                + f": {', '.join(fits)}"
                if fits
                else f"no TP x PP split of up to {4 * gpus} GPUs fits: use more GPUs"
            )
            + " (or a quantized checkpoint; raising gpu-memory-utilization helps only at the margin)",
        )
        return
    short = mp.short_of_one_request()
    if short:
        x = short[0]
        st_in = mem.inputs.stages[x.rank] if mem.inputs is not None else None
        fit_len = max_len_that_fits(mem.inputs, x, st_in) if mem.inputs is not None and st_in is not None else 0
        avail = x.available or 0.0
        yield KV_CACHE_TOO_SMALL.at(
            "engine.max-model-len",
            f"the KV cache of stage {x.rank} cannot hold one request of max-model-len {s.max_model_len:,} "
            f"({s.max_model_len_source}): it needs {_g(x.request_bytes)}, and {_g(max(0.0, avail))} is left for it"
            + (
                f" after {_g(x.weights)} of weights and {_g(x.overhead)} of activations, CUDA graphs and runtime "
                f"within {budget_txt}"
                if budget is not None
                else f" ({budget_txt})"
            )
            + '. vLLM refuses at start: "To serve at '
            f"least one request with the model's max seq len ({s.max_model_len}), ... KV cache is needed, which is "
            'larger than the available KV cache memory" (v1/core/kv_cache_planning.py:125 in 0.34, :78 in 0.33)',
            fix=(f"set engine.max-model-len to at most {fit_len:,}" if fit_len else "free memory for the KV cache")
            + f", raise gpu-memory-utilization (now {s.utilization:g}), or spread the layers over more GPUs",
        )
    if mp.max_concurrency is not None and s.max_num_seqs_declared and mp.max_concurrency < s.max_num_seqs and not short:
        yield KV_CACHE_BELOW_MAX_NUM_SEQS.at(
            "engine.max-num-seqs",
            f"the KV cache holds {_tokens(mp.engine_tokens)} tokens: {mp.max_concurrency:.1f} requests of "
            f"max-model-len {s.max_model_len:,}, fewer than max-num-seqs {s.max_num_seqs} (stage {mp.limiting} limits "
            "it); requests beyond that wait or are preempted when their contexts are long",
            fix=f"lower max-num-seqs to {max(1, int(mp.max_concurrency))} or max-model-len, raise "
            "gpu-memory-utilization, or add GPUs (`ppspec plan` proposes a partition that balances memory)",
        )
    yield from _unused(r, mp, mem)
    yield _capacity(r, mp, mem, where, budget_txt)


def _unused(r: Any, mp, mem: Memory) -> Iterator[Finding]:
    """A declared partition whose stages' KV memory is largely unused (the engine takes the smallest stage)."""
    if r.profile.topology.layer_partition is None or mp.engine_blocks is None or len(mp.stages) < 2:
        return
    total = sum(max(0.0, x.available or 0.0) for x in mp.stages)
    used = sum(mp.engine_blocks * x.bytes_per_block for x in mp.stages)
    if total <= 0 or (total - used) / total < UNUSED_SHARE:
        return
    sugg = r.plan.suggested_partition
    yield PARTITION_KV_UNUSED.at(
        "topology.layer_partition",
        f"layer_partition {list(r.plan.partition)} leaves {(total - used) / total:.0%} of the stages' KV memory "
        f"unused: vLLM sizes every stage's cache by the smallest (stage {mp.limiting}, kv_cache_planning.py:"
        "1683-1698)",
        fix=f"use layer_partition {list(sugg)} (`ppspec plan` balances memory with the drafter on the last stage)"
        if sugg and list(sugg) != list(r.plan.partition)
        else "move layers off the limiting stage, or drop layer_partition for vLLM's default split",
    )


def _capacity(r: Any, mp, mem: Memory, where: str, budget_txt: str) -> Finding:
    s = mem.settings
    per = "; ".join(
        f"stage {x.rank}: {_g(x.weights)} weights, {_g(x.overhead)} overheads, {_g(x.available)} KV = "
        f"{_tokens(x.tokens)} tokens"
        for x in mp.stages
    )
    lim = mp.stages[mp.limiting] if mp.limiting is not None else None
    why = ""
    if lim is not None and len(mp.stages) > 1:
        why = (
            f"; stage {lim.rank} limits it ({_g(lim.weights)} of weights"
            + (
                (", the lm_head and the drafter" if r.profile.drafter is not None else ", the lm_head and the sampler")
                if lim.rank == len(mp.stages) - 1
                else ""
            )
            + f", {lim.bytes_per_block / mp.block_size / 1024:.0f} KiB of KV per token): vLLM sizes every stage's "
            "cache by the smallest"
        )
    conc = (
        f", {mp.max_concurrency:.1f} requests of {mp.max_model_len:,} tokens" if mp.max_concurrency is not None else ""
    )
    return MEMORY_CAPACITY.at(
        "hardware",
        f"{where} within {budget_txt}: {per}. The engine's KV cache: {_tokens(mp.engine_tokens)} tokens{conc}{why}"
        + (f" (max-num-seqs {s.max_num_seqs}{'' if s.max_num_seqs_declared else ', vLLM default'})" if s else ""),
        fix="`ppspec plan` shows the same per stage; docs/memory.md explains each figure and its error",
    )
