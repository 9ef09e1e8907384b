"""The engine maps (telemetry/prometheus.py) against real /metrics pages.

``tests/data/metrics/<engine>-<version>.prom`` are pages fetched once from the real engines
(``reference.prom`` from the reference server), each after a few chat requests so that every
counter and histogram has moved. Each canonical metric the engine is expected to expose must be
found under the map's names: a renamed family in a new engine release fails here, by name,
rather than as a silently empty server section.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.telemetry.prometheus import (
    HISTOGRAMS,
    MetricMap,
    extract,
    find_counter,
    find_histogram,
    parse_samples,
    wanted_lines,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "metrics"
TRUTH = ("requests_success_total", "prompt_tokens_total", "generation_tokens_total")
PHASES = ("ttft_seconds", "queue_seconds", "prefill_seconds", "decode_seconds", "e2e_seconds")
# page file stem -> (engine map, canonical names the page must carry)
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "reference": (
        "reference",
        ("kv_usage", "requests_running", "requests_waiting", "preemptions_total", *TRUTH, *PHASES),
    ),
    "vllm-0.32.0": (
        "vllm",
        (
            "kv_usage",
            "requests_running",
            "requests_waiting",
            "preemptions_total",
            "prefix_cache_queries_total",
            "prefix_cache_hits_total",
            "cached_tokens_total",
            *TRUTH,
            *PHASES,
        ),
    ),
    # llama.cpp --metrics: counters and gauges; no histogram, no request counter, and this
    # build has no KV gauge.
    "llamacpp-0.3.36": (
        "llamacpp",
        (
            "requests_running",
            "requests_waiting",
            "busy_slots",
            "prompt_tokens_total",
            "generation_tokens_total",
            "cached_tokens_total",
        ),
    ),
    # Xinference 4.1's supervisor page: HTTP counters by path and model info only, no engine
    # counter, histogram or KV gauge (docs/telemetry.md); kept so a release that adds them shows.
    "xinference-4.1.0": ("xinference", ()),
}
# The LiteLLM proxy 1.108.7 answers /metrics with 404 (its prometheus callback is not on):
# no page; a LiteLLM target reads its upstream engine's (metrics_engine, docs/metrics.md).
CASES = [
    pytest.param(stem, engine, canonical, id=f"{stem}:{canonical}")
    for stem, (engine, names) in EXPECTED.items()
    if (DATA / f"{stem}.prom").exists()
    for canonical in names
]


def _page(stem: str) -> str:
    return (DATA / f"{stem}.prom").read_text(encoding="utf-8")


def _finds(text: str, engine: str, canonical: str) -> bool:
    samples = parse_samples(text)
    mapping = MetricMap.for_engine(engine)
    if canonical in HISTOGRAMS:
        return find_histogram(samples, mapping, canonical) is not None
    return find_counter(samples, mapping, canonical) is not None


def test_every_expected_page_is_present() -> None:
    missing = [stem for stem in EXPECTED if not (DATA / f"{stem}.prom").exists()]
    assert not missing, f"golden /metrics pages missing from {DATA}: {missing}"


def test_xinference_page_has_no_engine_counters() -> None:
    """What the docs say of Xinference 4.1: none of any engine's truth names on its page."""
    samples = parse_samples(_page("xinference-4.1.0"))
    names = {
        n
        for m in ("vllm", "sglang", "tgi", "llamacpp")
        for n in MetricMap.for_engine(m).all_names()
    }
    assert not names & set(samples), names & set(samples)


def test_aborted_and_failed_requests_do_not_count_as_completed() -> None:
    text = "\n".join(
        [
            "# TYPE vllm:request_success counter",
            'vllm:request_success_total{finished_reason="stop"} 3',
            'vllm:request_success_total{finished_reason="length"} 2',
            'vllm:request_success_total{finished_reason="abort"} 7',
            'vllm:request_success_total{finished_reason="error"} 1',
        ]
    )
    found = find_counter(
        parse_samples(text), MetricMap.for_engine("vllm"), "requests_success_total"
    )
    assert found is not None and found.value == 5.0


@pytest.mark.parametrize("stem,engine,canonical", CASES)
def test_map_finds_canonical_metric_on_golden_page(stem: str, engine: str, canonical: str) -> None:
    names = MetricMap.for_engine(engine).candidates.get(canonical, ())
    assert _finds(_page(stem), engine, canonical), (
        f"{stem}.prom: none of {names} for {canonical}: the engine renamed the family "
        "(update ENGINE_METRICS in servecheck/telemetry/prometheus.py)"
    )


@pytest.mark.parametrize("stem", [s for s in EXPECTED if (DATA / f"{s}.prom").exists()])
def test_a_renamed_family_is_not_found(stem: str) -> None:
    """The finders match names exactly: renaming each mapped family on the page loses it."""
    engine, names = EXPECTED[stem]
    text = _page(stem)
    mapping = MetricMap.for_engine(engine)
    for canonical in names:
        renamed = text
        for name in mapping.candidates[canonical]:
            base = name.removesuffix("_total").removesuffix("_sum")
            renamed = renamed.replace(base, base + "_renamed")
        assert not _finds(renamed, engine, canonical), f"{stem}: {canonical} survived a rename"


def test_histogram_sums_its_label_sets_and_buckets() -> None:
    text = "\n".join(
        [
            "# TYPE x_seconds histogram",
            'x_seconds_bucket{m="a",le="0.1"} 1',
            'x_seconds_bucket{m="a",le="+Inf"} 2',
            'x_seconds_sum{m="a"} 0.5',
            'x_seconds_count{m="a"} 2',
            'x_seconds_bucket{m="b",le="0.1"} 3',
            'x_seconds_bucket{m="b",le="+Inf"} 3',
            'x_seconds_sum{m="b"} 0.2',
            'x_seconds_count{m="b"} 3',
        ]
    )
    h = find_histogram(
        parse_samples(text), MetricMap({"ttft_seconds": ("x_seconds",)}), "ttft_seconds"
    )
    assert h is not None
    assert (h.count, round(h.sum, 6)) == (5.0, 0.7)
    assert h.buckets == [(0.1, 4.0), (float("inf"), 5.0)]


PAGES = sorted([*DATA.glob("*.prom"), *(DATA.parents[1] / "telemetry" / "fixtures").glob("*.prom")])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi", "llamacpp"])
def test_parsing_only_the_wanted_families_reads_what_the_whole_page_says(
    page: Path, engine: str
) -> None:
    """``extract`` parses only the lines of the families the map names (wanted_lines): every
    sample of those families, counters' aliases included, must read as in the whole page."""
    text = page.read_text(encoding="utf-8")
    names = MetricMap.for_engine(engine).all_names()
    whole, cut = parse_samples(text), parse_samples(wanted_lines(text, names))
    read = {n + s for n in names for s in ("", "_total", "_sum", "_count", "_bucket", "_created")}
    assert {k: v for k, v in whole.items() if k in read} == {
        k: v for k, v in cut.items() if k in read
    }
    assert extract(text, MetricMap.for_engine(engine)) == _extract_whole(text, engine)


def _extract_whole(text: str, engine: str) -> dict[str, object]:
    """``extract`` as it was, over the whole page's parse."""
    from servecheck.telemetry import prometheus

    real = prometheus.wanted_lines
    try:
        prometheus.wanted_lines = lambda t, _names: t  # type: ignore[assignment]
        return dict(prometheus.extract(text, MetricMap.for_engine(engine)))
    finally:
        prometheus.wanted_lines = real


def test_a_defect_in_a_family_nobody_reads_does_not_fail_the_scrape() -> None:
    page = (
        '# TYPE other_thing counter\nother_thing{a="unterminated} 1\n'
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
    )
    with pytest.raises(ValueError):
        parse_samples(page)
    got = extract(page, MetricMap.for_engine("vllm").only("requests_running"))
    assert got["requests_running"].value == 3.0
