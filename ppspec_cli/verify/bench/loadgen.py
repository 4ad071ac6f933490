"""The load generator of `ppspec bench`, run as its own process (`python -m
ppspec_cli.verify.bench.loadgen`): vLLM's benchmark client (`vllm bench serve`'s Python module)
drives each concurrency level, and ppspec adds what that client does not give.

Why a process of its own: importing vLLM takes tens of seconds, so the parent starts this process
while the engine loads; it imports vLLM, says `ready`, and waits for the job (one JSON line on
stdin). It runs in its own process group, so the parent stops it and everything it started with
one signal.

What it adds to vLLM's client:
- the `/metrics` scrapes around each level's measured requests, taken at the moments vLLM's client
  takes its own (after its test request), through ppspec's parser and the verify formulas
  (verify/metrics.py): acceptance length, rate, per position;
- the greedy parity pass: the level's own seeded prompts, sent one at a time through ppspec's
  client with `return_token_ids`, so outputs compare token for token between arms.

Events go to the parent as JSON lines on the original stdout; vLLM's own printing goes to stderr
(the parent keeps it in a log file).
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Longest job line the parent may send (it is a few hundred bytes).
MAX_JOB_BYTES = 1 << 16


def _emit(out, event: str, **kw: Any) -> None:
    out.write(json.dumps({"event": event, **kw}, separators=(",", ":")) + "\n")
    out.flush()


def vllm_args(job: dict, *, concurrency: int, num_prompts: int, output_len: int, result_file: str | None) -> list[str]:
    """The `vllm bench serve` arguments of one level (also shown in the report, as a command)."""
    argv = [
        "--backend",
        "openai",
        "--base-url",
        job["base_url"],
        "--endpoint",
        "/v1/completions",
        "--model",
        job["model"],
        "--tokenizer",
        job["tokenizer"],
        "--dataset-name",
        "random",
        "--random-input-len",
        str(job["input_len"]),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--seed",
        str(job["seed"]),
        "--ignore-eos",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--num-warmups",
        "0",
        "--disable-tqdm",
    ]
    if result_file:
        argv += [
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(Path(result_file).parent),
            "--result-filename",
            Path(result_file).name,
        ]
    return argv


class _Hooks:
    """Wraps two functions of vLLM's benchmark module: the /metrics fetch it does right before and
    right after the measured requests (ppspec scrapes the full page at those moments), and
    `benchmark` (to keep the level's prompts for the parity pass)."""

    def __init__(self, serve_mod, client, expected_tokens):
        self.mod = serve_mod
        self.client = client
        self.expected_tokens = expected_tokens
        self.scrapes: list[tuple[str, Any]] = []
        self.prompts: list[Any] = []
        self._orig_fetch = getattr(serve_mod, "fetch_spec_decode_metrics", None)
        self._orig_bench = serve_mod.benchmark

    def install(self) -> None:
        from ppspec_cli.verify import metrics as m
        from ppspec_cli.verify.runner import _settled_delta

        hooks = self

        if self._orig_fetch is not None:

            async def fetch(*a, **kw):
                if not hooks.scrapes:
                    hooks.scrapes.append(("before", m.parse_prometheus(hooks.client.metrics())))
                else:
                    after, _d, settled = _settled_delta(hooks.client, hooks.scrapes[0][1], hooks.expected_tokens())
                    hooks.scrapes.append(("after" if settled else "after-unsettled", after))
                return await hooks._orig_fetch(*a, **kw)

            self.mod.fetch_spec_decode_metrics = fetch

        async def bench(*a, **kw):
            hooks.prompts = [r.prompt for r in kw.get("input_requests") or []]
            return await hooks._orig_bench(*a, **kw)

        self.mod.benchmark = bench

    def remove(self) -> None:
        if self._orig_fetch is not None:
            self.mod.fetch_spec_decode_metrics = self._orig_fetch
        self.mod.benchmark = self._orig_bench


def run_level(
    serve_mod, parser_factory, client, job: dict, concurrency: int, *, repeat: int = 0, warmup: bool = False
) -> dict:
    """One `vllm bench serve` run at one concurrency, with ppspec's scrapes around it: its result
    dict, the scrapes, the prompts."""
    from ppspec_cli.verify import metrics as m

    n = job["prompts_per_level"][str(concurrency)]
    out_len = job["max_tokens"]
    result_file = None
    if warmup:
        n = concurrency
        out_len = min(16, out_len)
    else:
        result_file = str(Path(job["out_dir"]) / f"c{concurrency}-r{repeat}.vllm.json")
    state = {"completed": n}
    hooks = _Hooks(serve_mod, client, lambda: state["completed"] * out_len)
    hooks.install()
    before_all = m.parse_prometheus(client.metrics())
    try:
        args = parser_factory().parse_args(
            vllm_args(job, concurrency=concurrency, num_prompts=n, output_len=out_len, result_file=result_file)
        )
        result = serve_mod.main(args)
    finally:
        hooks.remove()
    scrapes = [s for _k, s in hooks.scrapes]
    warnings = []
    if len(scrapes) >= 2:
        before, after = scrapes[0], scrapes[-1]
        if hooks.scrapes[-1][0] != "after":
            warnings.append("the counters did not settle after the last response; acceptance may miss the last steps")
    else:
        before = before_all
        from ppspec_cli.verify.runner import _settled_delta

        after, _d, _ok = _settled_delta(client, before, None)
        warnings.append(
            "vLLM's client did not scrape /metrics around its requests (changed hook): the counters include its test "
            "request"
        )
    return {
        "result": result,
        "before": before,
        "after": after,
        "prompts": hooks.prompts,
        "warnings": warnings,
        "argv": vllm_args(job, concurrency=concurrency, num_prompts=n, output_len=out_len, result_file=result_file),
    }


def level_record(job: dict, concurrency: int, run: dict, repeat: int = 0) -> dict:
    """A level's figures: vLLM's client's latency/throughput numbers, ppspec's acceptance figures
    from the /metrics delta (verify's formulas), vLLM's own acceptance figures next to them."""
    from ppspec_cli.verify import metrics as m

    res = run["result"]
    d = m.delta(run["before"], run["after"])
    names = m.model_names(run["after"])
    match = {"model_name": job["model"]} if len(names) > 1 and job["model"] in names else None
    stats = m.spec_decode_stats(d, match, configured=m.spec_decode_configured(run["after"]))

    def pct(metric: str) -> dict:
        return {
            "mean": res.get(f"mean_{metric}_ms"),
            "p50": res.get(f"p50_{metric}_ms", res.get(f"median_{metric}_ms")),
            "p99": res.get(f"p99_{metric}_ms"),
        }

    return {
        "arm": job["arm"],
        "concurrency": concurrency,
        "speculation": job["speculation"],
        "num_speculative_tokens": job.get("num_speculative_tokens"),
        "schedule": job.get("schedule"),
        "repeat": repeat,
        "num_prompts": job["prompts_per_level"][str(concurrency)],
        "max_tokens": job["max_tokens"],
        "input_len": job["input_len"],
        "seed": job["seed"],
        **(job.get("identity") or {}),
        "device": job.get("device"),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "file": f"c{concurrency}-r{repeat}.json",
        "completed": res.get("completed"),
        "failed": res.get("failed"),
        "duration_s": res.get("duration"),
        "output_tokens": res.get("total_output_tokens"),
        "output_tokens_per_s": res.get("output_throughput"),
        "request_throughput": res.get("request_throughput"),
        "tpot_ms": pct("tpot"),
        "itl_ms": pct("itl"),
        "ttft_ms": pct("ttft"),
        "e2el_ms": pct("e2el"),
        "acceptance_length": stats.mean_acceptance_length,
        "acceptance_rate": stats.acceptance_rate,
        "per_position_acceptance": stats.per_position_acceptance,
        "spec_decode": stats.to_dict(),
        "vllm_acceptance_length": res.get("spec_decode_acceptance_length"),
        "vllm_acceptance_rate": res["spec_decode_acceptance_rate"] / 100.0
        if isinstance(res.get("spec_decode_acceptance_rate"), (int, float))
        else None,
        "generated_texts": res.get("generated_texts"),
        "errors": [e for e in (res.get("errors") or []) if e][:5],
        "warnings": run["warnings"] + stats.warnings(),
        "load_generator": f"vllm bench serve (vllm {job.get('vllm_version', '?')})",
        "vllm_bench_args": run["argv"],
    }


def parity_pass(client, job: dict, prompts: list) -> dict:
    """Greedy outputs of the first `parity_prompts` prompts, one request at a time, as token ids."""
    outs = []
    for i, prompt in enumerate(prompts[: job["parity_prompts"]]):
        c = client.complete(
            job["model"], prompt, max_tokens=job["max_tokens"], seed=job["seed"], extra={"return_token_ids": True}
        )
        outs.append({"index": i, "token_ids": c.token_ids, "text": c.text, "completion_tokens": c.completion_tokens})
    return {"arm": job["arm"], "profile_digest": (job.get("identity") or {}).get("profile_digest"), "outputs": outs}


def _device() -> str:
    from ppspec_cli.running.engine.device import device_name

    return device_name()


def main() -> int:
    from ppspec_cli.errors import EXIT_OK, EXIT_REFUSED
    from ppspec_cli.io import spawn

    events = spawn.event_stream(1)
    os.dup2(2, 1)  # vLLM's client prints its tables and args: keep them off the event stream
    sys.stdout = sys.stderr
    t0 = time.monotonic()
    try:
        import vllm
        from vllm.benchmarks import serve as serve_mod
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        _emit(events, "error", message=f"cannot import vLLM's benchmark client: {type(e).__name__}: {e}"[:500])
        return EXIT_REFUSED

    def parser_factory():
        p = FlexibleArgumentParser()
        serve_mod.add_cli_args(p)
        return p

    _emit(events, "ready", import_s=round(time.monotonic() - t0, 1))
    print(f"==== load generator {os.getpid()}: vLLM's client imported in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    # One job per engine session, as many as the parent sends: vLLM is imported once per bench run,
    # not once per session (issue 43 item 8). A failed job ends the process; the parent starts another.
    while True:
        line = sys.stdin.buffer.readline(MAX_JOB_BYTES)
        if not line.strip():
            return EXIT_OK  # the parent is done (or gave up: interrupted, engine failed)
        code = _one_job(events, vllm, serve_mod, parser_factory, line)
        if code:
            return code


def _one_job(events, vllm, serve_mod, parser_factory, line: bytes) -> int:
    from ppspec_cli.errors import EXIT_OK, EXIT_REFUSED, PpspecError
    from ppspec_cli.io import safeio
    from ppspec_cli.verify.client import Client

    try:
        job = json.loads(line)
        print(f"==== job: arm {job.get('arm')}, runs {job.get('runs')}", file=sys.stderr, flush=True)
        job["vllm_version"] = getattr(vllm, "__version__", "?")
        client = Client(job["base_url"], api_key_env=job.get("api_key_env"), timeout=600.0)
        if job.get("api_key_env"):
            from ppspec_cli.io import env as env_io

            env_io.set_var("OPENAI_API_KEY", env_io.get(job["api_key_env"]))  # vLLM's client reads the key there
        out_dir = Path(job["out_dir"])
        job["device"] = _device() if job.get("served") else None
        if job.get("warmup", True):
            _emit(events, "warmup")
            run_level(serve_mod, parser_factory, client, job, max(c for c, _r in job["runs"]), warmup=True)
        for c, r in job["runs"]:
            _emit(events, "level", concurrency=c, repeat=r)
            t = time.monotonic()
            run = run_level(serve_mod, parser_factory, client, job, c, repeat=r)
            rec = level_record(job, c, run, repeat=r)
            safeio.write_text(out_dir / f"c{c}-r{r}.json", json.dumps(rec, indent=1), what="bench level result")
            _emit(
                events,
                "level_done",
                concurrency=c,
                repeat=r,
                seconds=round(time.monotonic() - t, 2),
                file=str(out_dir / f"c{c}-r{r}.json"),
            )
        if job.get("parity_prompts"):
            # the same prompts for every arm, whichever levels this arm measured now: the seeded
            # set of the lowest level, drawn as vLLM's client draws it
            args = parser_factory().parse_args(
                vllm_args(
                    job,
                    concurrency=1,
                    num_prompts=job["parity_source_prompts"],
                    output_len=job["max_tokens"],
                    result_file=None,
                )
            )
            from vllm.benchmarks.datasets import get_samples
            from vllm.tokenizers import get_tokenizer

            prompts = [r.prompt for r in get_samples(args, get_tokenizer(job["tokenizer"]))]
            _emit(events, "parity")
            par = parity_pass(client, job, prompts)
            safeio.write_text(out_dir / "parity.json", json.dumps(par, indent=1), what="bench parity outputs")
        _emit(events, "done")
        return EXIT_OK
    except PpspecError as e:
        _emit(events, "error", message=e.render()[:2000])
        return EXIT_REFUSED
    except Exception as e:  # noqa: BLE001 - vLLM's client raising: one line to the parent
        _emit(events, "error", message=f"vLLM's benchmark client failed: {type(e).__name__}: {e}"[:2000])
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
