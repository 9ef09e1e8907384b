"""Soak with shared prefixes on a server whose KV-usage metric counts its prefix cache: the
retained cache is a plateau (``retention``, exit 0), a real leak beside it is still a ``leak``.
With the cache flushed before each drain measurement (the default where the engine offers a
flush, load/cache_flush.py) the plateau is gone and no guess is needed; where no flush answers,
the verdict says retention and a leak could read alike."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.load.cache_flush import CONFUSED
from servecheck.reference.http import STATE
from servecheck.reference.inprocess import RunningServer
from tests.soak.support import PROBE, TINY, run_soak

pytestmark = pytest.mark.slow
CACHE = {"kv_blocks": 64, "prefix_cache_blocks": 16, "prefix_cache_counted": True}


def _soak(
    server: RunningServer, tmp_path: Path, run_id: str, *extra: str, more: str = ""
) -> tuple[int, dict]:
    code, run_dir = run_soak(
        server, tmp_path, run_id, *TINY, "--shared-prefix", "40", "--no-rss", *extra, more=more
    )
    return code, json.loads((run_dir / "soak.json").read_text())


def test_a_retained_prefix_cache_is_retention_not_a_leak(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference(ttft_ms=5, itl_ms=5, **CACHE)
    code, data = _soak(server, tmp_path, "retained", "--no-cache-flush")
    out = capsys.readouterr().out
    kv = data["leak"]["kv_usage"]
    assert code == 0, out
    assert kv["status"] == "retention", kv["message"]
    assert data["failures"] == [f"{CONFUSED} (the flush was turned off)"], data["failures"]
    # Retention because the cache was seen on /metrics, and the message says so.
    assert "retention: the target's prefix cache was used (" in kv["message"], kv["message"]
    # The plateau is the cache's size (16 of 64 blocks), flat from cycle to cycle.
    assert all(abs(level - 0.25) < 0.02 for level in kv["post_drain"]), kv["post_drain"]
    assert data["plan"]["shared_prefix_words"] == 40


def test_a_leak_beside_a_retained_prefix_cache_is_still_a_leak(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference("kv-leak", ttft_ms=5, itl_ms=5, **CACHE)
    code, data = _soak(server, tmp_path, "leak", "--abandon", *PROBE)
    out = capsys.readouterr().out
    assert code == 1, out
    assert data["leak"]["kv_usage"]["status"] == "leak", data["leak"]["kv_usage"]["message"]
    levels = data["leak"]["kv_usage"]["post_drain"]
    assert min(levels) > 0.25 + 0.02  # above the cache's plateau (here: the leak filled it)


def test_a_plateau_on_a_target_that_declares_no_prefix_cache_is_a_leak(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same retained plateau (16 of 64 blocks), but targets.yaml says the target has no
    prefix cache: then nothing should keep those blocks, and the plateau is a leak."""
    server = make_reference(ttft_ms=5, itl_ms=5, **CACHE)
    code, data = _soak(
        server,
        tmp_path,
        "declared-none",
        "--no-cache-flush",
        more="    capabilities: {prefix_cache: false}\n",
    )
    out = capsys.readouterr().out
    kv = data["leak"]["kv_usage"]
    assert code == 1, out
    assert kv["status"] == "leak", kv["message"]
    assert "the target declares no prefix cache (capabilities.prefix_cache: false)" in kv["message"]
    assert "kv_usage: leak" in data["failures"]


def test_a_flushed_cache_leaves_no_plateau_to_guess_about(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same server as the retention test, flushed before each drain: kv_usage drains to
    its baseline (no plateau, no retention to guess), and the flush is on record."""
    server = make_reference(ttft_ms=5, itl_ms=5, **CACHE)
    code, data = _soak(server, tmp_path, "flushed")
    out = capsys.readouterr().out
    kv = data["leak"]["kv_usage"]
    assert code == 0, out
    assert kv["status"] == "ok", kv["message"]
    assert all(level < 0.02 for level in kv["post_drain"]), kv["post_drain"]
    flush = data["cache_flush"]
    # the baseline's flush and one before each of the 5 drains
    assert (flush["endpoint"], flush["flushed"], flush["note"]) == ("/reset_prefix_cache", 6, None)
    assert server.app is not None and server.app[STATE].prefix_cache_resets == 6
    assert not any(CONFUSED in f for f in data["failures"]), data["failures"]


def test_without_a_flush_endpoint_the_verdict_says_retention_and_leak_could_read_alike(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server with no prefix cache serves no flush (404): the soak still judges, and says
    that its drains were measured unflushed, naming what each route answered."""
    server = make_reference(ttft_ms=5, itl_ms=5, kv_blocks=64, prefix_cache_blocks=0)
    code, data = _soak(server, tmp_path, "no-flush")
    out = capsys.readouterr().out
    assert code == 0, out
    note = data["cache_flush"]["note"]
    assert note.startswith(CONFUSED), note
    assert (
        "POST /reset_prefix_cache answered 404 (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)"
        in note
    )
    assert "POST /flush_cache answered 404" in note
    assert note in data["failures"], data["failures"]
    assert note in (tmp_path / "reports" / "no-flush" / "report.html").read_text()
