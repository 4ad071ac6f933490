"""The typed shape of `ppspec bench`'s saved records (`arms/ARM/cN.json`, `arms/ARM/parity.json`),
checked when they are read back (`--resume`, and right after the load generator writes them).

Strict (io/records.Record): a string is not a number, a bool is not a count, no number is
infinite/NaN or too large for a float; a missing figure the report needs is refused. A record of
the wrong shape is one error naming the file (delete it and that level is measured again), never a
TypeError/KeyError/OverflowError deep in the report. Unknown keys are kept (a newer ppspec may add
some); text from a record is escaped wherever it is shown (io/markdown, io/terminal).
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field

from ppspec_cli.io.records import Record

#: The highest concurrency bench measures (commands/bench.py: --concurrency 1..4096).
MAX_CONCURRENCY = 4096
#: The most repeats of a level a record can be (commands/bench.py: --repeat 1..20), with margin.
MAX_REPEAT = 1000
#: Counts in a record (prompts, requests, tokens): over any run bench makes (2**17 prompts of at
#: most 65,536 tokens each is 2**33), under what a float holds exactly.
MAX_COUNT = 1 << 40


class Percentiles(Record):
    mean: Optional[float] = None
    p50: Optional[float] = None
    p99: Optional[float] = None


class LevelRecord(Record):
    """One measured concurrency level of one arm (loadgen.level_record)."""

    arm: str = Field(max_length=64)
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY)
    speculation: bool
    num_speculative_tokens: Optional[int] = Field(default=None, ge=1, le=64)
    schedule: Optional[list[list[int]]] = None
    repeat: int = Field(default=0, ge=0, le=MAX_REPEAT)
    seed: Optional[int] = Field(default=None, ge=0, le=MAX_COUNT)
    # the identity a record is valid for (results.identity_problem): --resume refuses another's
    profile_digest: Optional[str] = Field(default=None, max_length=64)
    run_id: Optional[str] = Field(default=None, max_length=64)
    host: Optional[str] = Field(default=None, max_length=255)
    ppspec_version: Optional[str] = Field(default=None, max_length=64)
    vllm_version: Optional[str] = Field(default=None, max_length=64)
    device: Optional[str] = Field(default=None, max_length=256)
    measured_at: Optional[str] = Field(default=None, max_length=64)
    file: Optional[str] = Field(default=None, max_length=64)
    num_prompts: int = Field(ge=1, le=MAX_COUNT)
    max_tokens: int = Field(ge=1, le=MAX_COUNT)
    input_len: int = Field(ge=1, le=MAX_COUNT)
    completed: Optional[int] = Field(default=None, ge=0, le=MAX_COUNT)
    failed: Optional[int] = Field(default=None, ge=0, le=MAX_COUNT)
    duration_s: Optional[float] = Field(default=None, ge=0)
    output_tokens: Optional[int] = Field(default=None, ge=0, le=MAX_COUNT)
    output_tokens_per_s: Optional[float] = Field(default=None, ge=0)
    request_throughput: Optional[float] = Field(default=None, ge=0)
    tpot_ms: Optional[Percentiles] = None
    itl_ms: Optional[Percentiles] = None
    ttft_ms: Optional[Percentiles] = None
    e2el_ms: Optional[Percentiles] = None
    acceptance_length: Optional[float] = None
    acceptance_rate: Optional[float] = None
    per_position_acceptance: Optional[list[float]] = None
    spec_decode: Optional[dict[str, Any]] = None
    vllm_acceptance_length: Optional[float] = None
    vllm_acceptance_rate: Optional[float] = None
    generated_texts: Optional[list[Optional[str]]] = None
    errors: list[str] = []
    warnings: list[str] = []
    load_generator: Optional[str] = None
    vllm_bench_args: Optional[list[str]] = None


class ParityOutput(Record):
    index: int = Field(ge=0, le=MAX_COUNT)
    token_ids: Optional[list[int]] = None
    text: Optional[str] = None
    completion_tokens: Optional[int] = Field(default=None, ge=0, le=MAX_COUNT)


class ParityRecord(Record):
    """One arm's greedy parity pass (loadgen.parity_pass)."""

    arm: Optional[str] = Field(default=None, max_length=64)
    profile_digest: Optional[str] = Field(default=None, max_length=64)
    outputs: list[ParityOutput]
    settings: Optional[dict[str, Any]] = (
        None  # the settings it was measured with (session.parity_key; a tuned arm's includes its schedule)
    )


def model_for(name: str) -> type[Record]:
    """The record model of a saved file by its name: parity.json, else a level's cN.json."""
    return ParityRecord if name == "parity.json" else LevelRecord
