"""Rate-limited answers in ``servecheck load``: their own error class, counted apart from failures.

End to end against a reference server that sheds load above 2 requests in flight (429 with an
error object and ``Retry-After: 1``), plus the pieces: classification, stats, Retry-After parsing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.analysis.stats import compute_stats
from servecheck.errors import UsageError
from servecheck.load.generator.stream import (
    StreamState,
    classify,
    parse_retry_after_cap,
    retry_after_seconds,
)
from servecheck.load.generator.wire import WireResult
from servecheck.records.parquet import read_run_records
from servecheck.records.record import RATE_LIMITED
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import _cmd, _run, _summary, _targets


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        pytest.param(429, {}, RATE_LIMITED, id="429"),
        pytest.param(503, {"retry-after": "2"}, RATE_LIMITED, id="503-retry-after"),
        pytest.param(503, {}, "http-503", id="503-bare"),
        pytest.param(500, {"retry-after": "2"}, "http-500", id="500"),
    ],
)
def test_classify_rate_limited(status: int, headers: dict[str, str], expected: str) -> None:
    res = WireResult(status=status, headers=headers, body_prefix=b'{"error": {"message": "busy"}}')
    assert classify(res, StreamState())[0] == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("3", 3.0, id="seconds"),
        pytest.param(" 1.5 ", 1.5, id="fraction"),
        pytest.param("Thu, 01 Jan 1970 00:00:10 GMT", 5.0, id="http-date"),
        pytest.param("soon", None, id="junk"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert retry_after_seconds(value, now=5.0) == expected


def test_retry_after_cap_is_bounded() -> None:
    assert parse_retry_after_cap(None) == 0.0
    assert parse_retry_after_cap("10s") == 10.0
    with pytest.raises(UsageError, match="at most 600s"):
        parse_retry_after_cap("1h")


def test_stats_count_rate_limited_apart() -> None:
    base = {"t_sent": 1.0, "t_done": 2.0, "ttft": 0.1, "e2e": 1.0, "output_tokens": 4}
    records = [
        {**base, "error": None},
        {**base, "error": None},
        {**base, "error": RATE_LIMITED, "output_tokens": None},
        {**base, "error": "http-500", "output_tokens": None},
    ]
    st = compute_stats(records)
    d = st.as_dict()["requests"]
    assert (d["ok"], d["failed"], d["rate_limited"]) == (2, 1, 1)
    assert d["errors"] == {"http-500": 1}
    assert d["error_rate"] == 0.25 and d["rate_limited_rate"] == 0.25
    assert st.goodput == 0.5  # a shed request got no answer: it is not good


@pytest.mark.slow
def test_load_run_reports_rate_limited(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=30, itl_ms=2, max_inflight=2)
    targets = _targets(tmp_path, server)
    out = tmp_path / "reports"
    proc = _run(
        _cmd(
            targets,
            out,
            "--users",
            "6",
            "--max-requests",
            "36",
            "--no-tokenize",
            "--honour-retry-after",
            "50ms",
            "--slo",
            "error_rate<=0%",
        )
    )
    s = _summary(out)
    req = s["requests"]
    assert req["rate_limited"] > 0, req
    assert req["failed"] == 0 and req["errors"] == {}, req
    assert req["ok"] + req["rate_limited"] == req["total"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"rate-limited {req['rate_limited']}" in proc.stdout
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    lines = list(read_run_records(run_dir))
    shed = [r for r in lines if r["error"] == RATE_LIMITED]
    assert shed and all(r["status"] == 429 and r["retry_after_s"] == 1.0 for r in shed)
