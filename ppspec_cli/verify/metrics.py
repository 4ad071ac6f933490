"""Read vLLM's Prometheus `/metrics` page and turn two scrapes into acceptance figures.

Broken aux-state plumbing under pipeline parallelism does not crash, it only lowers acceptance.
The spec-decode counters are the one place that shows it, so this module parses the exposition
text exactly (escaped label values, `_total` suffixes, `_created` samples, several engines) and
refuses to compute anything from a pair of scrapes that straddles an engine restart.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Mapping

from prometheus_client.parser import text_string_to_metric_families

from ppspec_cli.errors import EXIT_REFUSED, PpspecError

#: Speculative positions beyond this are not a real drafter's (and would size a list absurdly).
MAX_POSITIONS = 1024

# Counter family names as vLLM registers them; prometheus_client appends `_total` on the wire.
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
GENERATION_TOKENS = "vllm:generation_tokens"
PROMPT_TOKENS = "vllm:prompt_tokens"
REQUEST_SUCCESS = "vllm:request_success"
SPEC_PREFIX = "vllm:spec_decode_"
#: Histograms whose sum/count give the engine's own per-token latency (name differs by version).
TPOT_HISTOGRAMS = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")

# Sample-name suffixes that belong to a typed family (OpenMetrics / prometheus_client).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created", "_gcount", "_gsum"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("_sum", "_count", "_created"),
    "info": ("_info",),
}
_MONOTONIC_SUFFIXES = {
    "counter": ("_total", ""),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    """One line of exposition: a sample name, its labels (sorted), its value."""

    name: str
    labels: Labels
    value: float

    def label(self, key: str) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return None

    def matches(self, match: Mapping[str, str] | None) -> bool:
        if not match:
            return True
        return all(self.label(k) == v for k, v in match.items())


@dataclass
class Scrape:
    """A parsed `/metrics` page (or the difference of two pages, see `delta`)."""

    samples: list[Sample]
    types: dict[str, str] = field(default_factory=dict)
    is_delta: bool = False

    # -- lookups -------------------------------------------------------------------------------

    def family_of(self, sample_name: str) -> tuple[str, str]:
        """(family name, type) a sample belongs to; untyped samples are their own family."""
        if sample_name in self.types:
            return sample_name, self.types[sample_name]
        for suffix in ("_total", "_created", "_bucket", "_sum", "_count", "_gcount", "_gsum", "_info"):
            if sample_name.endswith(suffix):
                base = sample_name[: -len(suffix)]
                t = self.types.get(base)
                if t is not None and suffix in _SUFFIXES.get(t, ()):
                    return base, t
        return sample_name, "untyped"

    def series(self, sample_name: str, match: Mapping[str, str] | None = None) -> list[Sample]:
        return [s for s in self.samples if s.name == sample_name and s.matches(match)]

    def counter_series(self, name: str, match: Mapping[str, str] | None = None) -> list[Sample]:
        """The value samples of counter `name`, given with or without its `_total` suffix.

        `_created` samples (creation timestamps) are never counter values.
        """
        base = name[: -len("_total")] if name.endswith("_total") else name
        for candidate in (base + "_total", base):
            found = self.series(candidate, match)
            if found:
                return found
        return []

    def counter_total(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        """Sum of a counter over all its series (engines, model names); None when absent."""
        found = self.counter_series(name, match)
        if not found:
            return None
        return math.fsum(s.value for s in found)

    def counter_by(self, name: str, label: str, match: Mapping[str, str] | None = None) -> dict[str, float]:
        """A counter summed per value of one label (e.g. per `engine` or `position`)."""
        out: dict[str, float] = {}
        for s in self.counter_series(name, match):
            key = s.label(label)
            if key is None:
                continue
            out[key] = out.get(key, 0.0) + s.value
        return out

    def label_values(self, name: str, label: str) -> list[str]:
        return sorted({v for s in self.counter_series(name) if (v := s.label(label)) is not None})

    def has_prefix(self, prefix: str) -> bool:
        return any(s.name.startswith(prefix) for s in self.samples) or any(t.startswith(prefix) for t in self.types)

    def gauge(self, name: str, match: Mapping[str, str] | None = None) -> float | None:
        found = self.series(name, match)
        return math.fsum(s.value for s in found) if found else None


# ---------------------------------------------------------------------------------------------
# Parsing


def _bad(why: str, shown: str = "") -> PpspecError:
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return PpspecError(
        f"the /metrics page is not usable Prometheus text exposition ({why})" + (f": {shown!r}" if shown else ""),
        where="/metrics",
        fix="point --endpoint at the vLLM server itself (not a proxy or another service) and check that /metrics "
        "serves vLLM's counters",
        exit_code=EXIT_REFUSED,
    )


#: Lines of the families ppspec reads: vLLM's samples, TYPE/HELP lines for them, the process start time.
_KEPT = re.compile(
    r"^(?:vllm:|process_start_time_seconds|# (?:TYPE|HELP|UNIT) (?:vllm:|process_start_time_seconds))[^\n]*", re.M
)
#: The most lines (samples and their comments) of one /metrics page that are parsed.
MAX_SERIES = 50_000
#: Pages up to this many characters are parsed whole; larger ones only for the families ppspec reads.
WHOLE_PAGE_CHARS = 2 << 20


def parse_prometheus(text: str) -> Scrape:
    """Parse the exposition text with prometheus_client's parser; then refuse what no counter can be:
    a series given twice, and a counter value that is negative, NaN or infinite."""
    samples: list[Sample] = []
    types: dict[str, str] = {}
    seen: set[tuple[str, Labels]] = set()
    text = re.split(r"^# EOF[ \t\r]*$", text, maxsplit=1, flags=re.M)[0]  # OpenMetrics' end marker
    # A page up to WHOLE_PAGE_CHARS is parsed whole (every line checked). A larger one is not a
    # plain vLLM page: only the families ppspec reads (vLLM's, and the process start time) are
    # kept, in one regex pass, before the (slow) parser sees them, and they are bounded.
    if len(text) > WHOLE_PAGE_CHARS:
        lines = _KEPT.findall(text)
        text = "\n".join(lines) + "\n"
    if text.count("\n") > MAX_SERIES:
        raise _bad(
            f"more than {MAX_SERIES} series and comment lines of the families ppspec reads; no vLLM server exposes "
            "that many"
        )
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # noqa: BLE001 - the parser raises ValueError, IndexError, TypeError... on bad text
        raise _bad(f"{type(e).__name__}: {str(e)[:120]}") from None
    for fam in families:
        if fam.type not in ("unknown", "untyped"):
            types[fam.name] = fam.type
        for smp in fam.samples:
            labels: Labels = tuple(sorted((str(k), str(v)) for k, v in smp.labels.items()))
            key = (smp.name, labels)
            if key in seen:
                raise _bad("the same series appears twice", _fmt_series(Sample(smp.name, labels, 0.0)))
            seen.add(key)
            try:
                value = float(smp.value)
            except OverflowError:  # an integer beyond any float: refused below like +Inf
                value = math.inf if smp.value > 0 else -math.inf
            samples.append(Sample(smp.name, labels, value))
    scrape = Scrape(samples=samples, types=types)
    for smp in samples:
        if (
            smp.name.startswith("vllm:")
            and _is_monotonic(scrape, smp.name)
            and not (math.isfinite(smp.value) and smp.value >= 0)
        ):
            raise _bad(f"counter value {smp.value!r} is not a finite non-negative number", _fmt_series(smp))
    return scrape


# ---------------------------------------------------------------------------------------------
# Two scrapes -> differences


def _is_monotonic(scrape: Scrape, sample_name: str) -> bool:
    family, kind = scrape.family_of(sample_name)
    if sample_name.endswith("_created"):
        return False
    if kind in _MONOTONIC_SUFFIXES:
        suffix = sample_name[len(family) :]
        return suffix in _MONOTONIC_SUFFIXES[kind]
    return kind == "untyped" and sample_name.endswith("_total")


def _fmt_series(s: Sample) -> str:
    if not s.labels:
        return s.name
    inner = ",".join(f'{k}="{v}"' for k, v in s.labels)
    return f"{s.name}{{{inner}}}"


def _restart_error(what: str) -> PpspecError:
    return PpspecError(
        f"{what}: the engine restarted (or another server answered) between the two /metrics scrapes, "
        "so the counters cannot be compared",
        where="/metrics",
        fix="make sure the server stays up for the whole run (check its log for a crash or restart) and run `ppspec "
        "verify` again",
        exit_code=EXIT_REFUSED,
    )


def delta(before: Scrape, after: Scrape) -> Scrape:
    """Per-series differences of every counter (and histogram sum/count/bucket) between two scrapes.

    A counter that went down, or a vLLM counter series that vanished, means the engine restarted
    in between: that raises PpspecError rather than report nonsense. Series that appear only in
    `after` (first request with a new label value) count from zero.
    """
    start_b = before.gauge("process_start_time_seconds")
    start_a = after.gauge("process_start_time_seconds")
    if start_b is not None and start_a is not None and abs(start_a - start_b) > 1e-6:
        raise _restart_error("process_start_time_seconds changed")
    old: dict[tuple[str, Labels], float] = {
        (s.name, s.labels): s.value for s in before.samples if _is_monotonic(before, s.name)
    }
    out: list[Sample] = []
    present: set[tuple[str, Labels]] = set()
    for s in after.samples:
        if not _is_monotonic(after, s.name):
            continue
        key = (s.name, s.labels)
        present.add(key)
        prev = old.get(key, 0.0)
        if math.isnan(s.value) or math.isnan(prev):
            continue
        d = s.value - prev
        if d < -1e-9 * max(1.0, abs(prev)):
            raise _restart_error(f"counter {_fmt_series(s)} went down from {prev:g} to {s.value:g}")
        out.append(Sample(s.name, s.labels, max(d, 0.0)))
    for key, prev in old.items():
        if key not in present and key[0].startswith("vllm:") and prev > 0:
            raise _restart_error(f"counter {_fmt_series(Sample(key[0], key[1], prev))} disappeared")
    return Scrape(samples=out, types=dict(after.types), is_delta=True)


# ---------------------------------------------------------------------------------------------
# Derived figures


def spec_decode_configured(scrape: Scrape) -> bool:
    """vLLM registers the spec-decode counters only when a speculative config is set."""
    return scrape.has_prefix(SPEC_PREFIX)


def _count(x: float | None) -> int:
    return int(round(x)) if x is not None else 0


@dataclass
class SpecDecodeStats:
    """Acceptance figures from a counters delta. `configured=False`: the server does no speculation."""

    configured: bool
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    @property
    def status(self) -> str:
        if not self.configured:
            return "not configured"
        if self.drafts == 0:
            return "no drafts"
        return "ok"

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts: tokens emitted per target forward pass (the bonus token counts)."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def acceptance_rate(self) -> float | None:
        """accepted / draft tokens: the share of proposed tokens the target kept."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def per_position_acceptance(self) -> list[float] | None:
        """accepted at position i / drafts: how often the i-th draft token survived."""
        if not self.drafts:
            return None
        return [a / self.drafts for a in self.accepted_per_position]

    @property
    def draft_tokens_per_draft(self) -> float | None:
        return self.draft_tokens / self.drafts if self.drafts else None

    def warnings(self) -> list[str]:
        out = []
        if self.configured and self.accepted_tokens > self.draft_tokens:
            out.append(
                f"accepted tokens ({self.accepted_tokens}) exceed draft tokens ({self.draft_tokens}): counters are "
                "inconsistent"
            )
        if self.accepted_per_position and sum(self.accepted_per_position) != self.accepted_tokens:
            out.append(
                f"per-position accepted tokens sum to {sum(self.accepted_per_position)}, "
                f"not the accepted total {self.accepted_tokens}"
            )
        return out

    def to_dict(self) -> dict:
        return {
            "configured": self.configured,
            "status": self.status,
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "accepted_per_position": list(self.accepted_per_position),
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_rate": self.acceptance_rate,
            "per_position_acceptance": self.per_position_acceptance,
            "draft_tokens_per_draft": self.draft_tokens_per_draft,
        }


def spec_decode_stats(
    d: Scrape, match: Mapping[str, str] | None = None, *, configured: bool | None = None
) -> SpecDecodeStats:
    """Acceptance figures from a counters delta, summed over every series matching `match`.

    `match` selects labels, e.g. {"model_name": "m"} or {"engine": "0"}; None sums over engines.
    """
    if configured is None:
        configured = spec_decode_configured(d)
    if not configured:
        return SpecDecodeStats(configured=False)
    per_pos = d.counter_by(ACCEPTED_PER_POS, "position", match)
    positions: list[int] = []
    for p in per_pos:
        try:
            if not (p.isascii() and p.isdigit() and int(p) < MAX_POSITIONS):
                raise ValueError
            positions.append(int(p))
        except ValueError:
            raise PpspecError(
                f"per-position counter has a position label {p[:40]!r} that is not an integer in "
                f"0..{MAX_POSITIONS - 1}",
                where=f"/metrics {ACCEPTED_PER_POS}",
                fix="this vLLM exposes an unexpected metrics layout; report it with the /metrics text",
                exit_code=EXIT_REFUSED,
            ) from None
    n = max(positions) + 1 if positions else 0
    accepted_pos = [0] * n
    for p, v in per_pos.items():
        accepted_pos[int(p)] = _count(v)
    return SpecDecodeStats(
        configured=True,
        drafts=_count(d.counter_total(DRAFTS, match)),
        draft_tokens=_count(d.counter_total(DRAFT_TOKENS, match)),
        accepted_tokens=_count(d.counter_total(ACCEPTED, match)),
        accepted_per_position=accepted_pos,
    )


def spec_decode_stats_by(
    d: Scrape, label: str = "engine", match: Mapping[str, str] | None = None
) -> dict[str, SpecDecodeStats]:
    """Acceptance figures kept apart per value of `label` (per engine, per model_name)."""
    configured = spec_decode_configured(d)
    values = sorted(set(d.label_values(DRAFTS, label)) | set(d.label_values(ACCEPTED, label)))
    return {v: spec_decode_stats(d, {**(match or {}), label: v}, configured=configured) for v in values}


def request_counts(d: Scrape, match: Mapping[str, str] | None = None) -> dict[str, int]:
    """Finished requests per finish reason (stop, length, abort, ...) in a delta."""
    return {k: _count(v) for k, v in sorted(d.counter_by(REQUEST_SUCCESS, "finished_reason", match).items())}


def engine_tpot_s(d: Scrape, match: Mapping[str, str] | None = None) -> float | None:
    """Mean inter-token latency the engine itself measured over the delta (histogram sum / count)."""
    for name in TPOT_HISTOGRAMS:
        total = d.series(name + "_sum", match)
        count = d.series(name + "_count", match)
        if total and count:
            c = math.fsum(s.value for s in count)
            if c > 0:
                return math.fsum(s.value for s in total) / c
    return None


def summarize(d: Scrape, match: Mapping[str, str] | None = None) -> dict:
    """The counters verify reports, as plain numbers (totals over engines)."""
    out: dict[str, object] = {}
    for key, name in (
        ("drafts", DRAFTS),
        ("draft_tokens", DRAFT_TOKENS),
        ("accepted_tokens", ACCEPTED),
        ("generation_tokens", GENERATION_TOKENS),
        ("prompt_tokens", PROMPT_TOKENS),
    ):
        v = d.counter_total(name, match)
        out[key] = _count(v) if v is not None else None
    per_pos = d.counter_by(ACCEPTED_PER_POS, "position", match)
    out["accepted_per_position"] = {k: _count(v) for k, v in sorted(per_pos.items(), key=lambda kv: _pos_key(kv[0]))}
    out["requests_finished"] = request_counts(d, match)
    return out


def _pos_key(p: str) -> tuple[int, str]:
    try:
        return (int(p), p)
    except ValueError:
        return (1 << 30, p)


def model_names(scrape: Scrape) -> list[str]:
    """Served model names the vLLM counters carry (label `model_name`)."""
    names: set[str] = set()
    for s in scrape.samples:
        if s.name.startswith("vllm:"):
            v = s.label("model_name")
            if v is not None:
                names.add(v)
    return sorted(names)
