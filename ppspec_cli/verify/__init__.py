"""`ppspec verify`: measure speculative-decoding acceptance and parity on a live vLLM server.

Under pipeline parallelism a broken aux-state relay does not crash; it lowers acceptance. This
package turns two `/metrics` scrapes around a fixed greedy prompt run into acceptance figures,
and gates them against a baseline, a floor, and a spec-off reference.
"""

from .cli import verify_command
from .gates import GateResult, evaluate_gates, resolve_gates, speculative_config_from_engine, synthetic_acceptance_configured
from .metrics import Scrape, SpecDecodeStats, delta, parse_prometheus, spec_decode_configured, spec_decode_stats
from .report import Report, load_report, render_table, save_report
from .runner import apply_gates, run_verify

__all__ = [
    "GateResult",
    "Report",
    "Scrape",
    "SpecDecodeStats",
    "apply_gates",
    "delta",
    "evaluate_gates",
    "load_report",
    "parse_prometheus",
    "render_table",
    "resolve_gates",
    "run_verify",
    "save_report",
    "spec_decode_configured",
    "spec_decode_stats",
    "speculative_config_from_engine",
    "synthetic_acceptance_configured",
    "verify_command",
]
