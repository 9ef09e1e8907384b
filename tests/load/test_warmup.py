"""Warm-up requests are recorded but kept out of the statistics and SLOs, shown on their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.analysis.sections import WarmupSection
from servecheck.analysis.typed_json import from_json
from servecheck.analysis.warmup import Warmup, extend_bounds
from servecheck.errors import UsageError
from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from servecheck.report.load_text import format_warmup
from tests.load.test_load_cli import _cmd, _run, _summary, _targets


def _recs(n: int, gap: float = 1.0) -> list[dict]:
    return [
        {"t_sent": 100 + i * gap, "ttft": 0.5 if i < 3 else 0.01, "e2e": 1.0, "error": None}
        for i in range(n)
    ]


def test_first_requests_or_first_seconds_are_warm_up() -> None:
    w = Warmup(requests=3)
    kept = list(w.measured(_recs(10)))
    assert len(kept) == 7 and kept[0]["t_sent"] == 103
    assert w.count == 3 and w.as_dict()["ttft_ms"]["p50"] == pytest.approx(500, rel=0.01)
    w = Warmup(seconds=2.5)
    assert [r["t_sent"] for r in w.measured(_recs(5))] == [103, 104]
    both = Warmup(seconds=1.5, requests=1)  # either makes a request warm-up
    assert len(list(both.measured(_recs(5)))) == 3
    assert extend_bounds(60.0, 100, Warmup(10.0, 5)) == (70.0, 105)
    assert extend_bounds(None, None, Warmup(10.0, 5)) == (None, None)
    assert (
        "warm-up (not in the figures above): 3 requests"
        in format_warmup(from_json(WarmupSection, Warmup(requests=3).as_dict() | {"requests": 3}))[
            0
        ]
    )
    with pytest.raises(UsageError, match="^warmup_requests must be >= 0"):
        Warmup(requests=-1)


@pytest.mark.slow
def test_warm_up_is_sent_on_top_and_kept_out_of_slos(make_reference, tmp_path: Path) -> None:
    server: RunningServer = make_reference(ttft_ms=5, itl_ms=1)
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(
            targets,
            out,
            "--users",
            "1",
            "--max-requests",
            "12",
            "--warmup-requests",
            "4",
            "--no-tokenize",
        )
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    lines = list(read_run_records(run_dir))
    assert len(lines) == 16  # 12 asked for + 4 warm-up, all on disk
    assert s["requests"]["total"] == 12 and s["latency_ms"]["ttft"]["count"] == 12
    sent = sorted(x["t_sent"] for x in lines)
    assert s["warmup"]["span_s"] == pytest.approx(sent[3] - sent[0], abs=1e-5)  # the first four
    assert s["warmup"]["requests"] == 4 and s["warmup"]["ttft_ms"]["count"] == 4
    assert s["max_requests"] == 16
    assert "warm-up (not in the figures above): 4 requests" in proc.stdout
