"""``servecheck load`` over Anthropic's Messages API and with images, end to end against a stub
that streams Anthropic events (tests/load/anthropic_stub.py); capacity and compare on such runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servecheck.records.parquet import read_run_records
from tests.load.anthropic_stub import TEXT_TOKENS, THINK_TOKENS, StubServer

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
KEY = "stub-secret-key"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer(key=KEY).start()
    yield server
    server.stop()


def _targets(tmp_path: Path, server: StubServer) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(
        f"targets:\n  - name: stub\n    base_url: {server.base_url}\n    api_key: ${{STUB_KEY}}\n"
    )
    return path


def _servecheck(
    tmp_path: Path, server: StubServer, *args: str, command: str = "load"
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "servecheck", command, "--target", "stub"]
    cmd += ["--targets-file", str(_targets(tmp_path, server)), "--out", str(tmp_path / "reports")]
    env = {**os.environ, "STUB_KEY": KEY}
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=180, cwd=ROOT, env=env
    )


def _load(tmp_path: Path, server: StubServer, *args: str) -> tuple[int, Path, str]:
    base = ["--quiet", "--no-tokenize", "--users", "2", "--max-requests", "6", "--allow-lag"]
    proc = _servecheck(tmp_path, server, *base, *args)
    runs = sorted((tmp_path / "reports").iterdir()) if (tmp_path / "reports").exists() else []
    return proc.returncode, (runs[-1] if runs else tmp_path), proc.stdout + proc.stderr


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_run_records(run_dir))


def test_messages_scenario_with_thinking_and_images_end_to_end(
    stub: StubServer, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "scenario: messages\nimages: 64x64,2x32x32\n"
        "extra_body: {thinking: {type: enabled, budget_tokens: 64}}\n"
        "slo: ['ttfa_p95<=30s']\n"
    )
    rc, run_dir, out = _load(tmp_path, stub, "--plan", str(plan))
    assert rc == 0, out
    # the Anthropic request: headers, path, body
    assert len(stub.bodies) == 6
    for headers in stub.headers:
        assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    body = stub.bodies[0]
    assert body["stream"] is True and body["thinking"] == {"type": "enabled", "budget_tokens": 64}
    assert "stream_options" not in body and "temperature" not in body
    blocks = body["messages"][-1]["content"]
    assert blocks[0]["type"] == "text"
    assert {b["type"] for b in blocks[1:]} == {"image"}
    assert blocks[1]["source"]["type"] == "base64"
    assert blocks[1]["source"]["media_type"] == "image/png"
    # the records: chat's fields, from Anthropic's events
    for r in _records(run_dir):
        assert r["error"] is None and r["scenario"] == "messages"
        assert r["ttfr"] == r["ttft"] <= r["ttfa"], r
        assert r["output_tokens"] == TEXT_TOKENS + THINK_TOKENS == r["output_tokens_client"]
        assert r["reasoning_tokens_client"] == THINK_TOKENS
        assert len(r["itls_answer"]) == TEXT_TOKENS - 1
        assert r["images"] in (1, 2) and r["image_size"] in ("64x64", "32x32")
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["api"] == "messages" and s["requests"]["ok"] == 6
    assert s["latency_ms"]["ttfa"]["count"] == 6
    sizes = s["images"]["by_size"]
    # the stub counts ceil(w/32) * ceil(h/32) tokens an image, the text as the estimate
    assert {k: v["tokens_per_image_p50"] for k, v in sizes.items() if v["count"]} == {
        k: t for k, t in (("1x64x64", 4.0), ("2x32x32", 1.0)) if k in sizes
    }
    assert sum(v["count"] for v in sizes.values()) == 6
    text = (run_dir / "summary.txt").read_text()
    assert "api messages" in text.splitlines()[0] and "PASS ttfa_p95<=30s" in text
    assert "images (COUNTxWxH)" in text
    assert "images (COUNTxWxH)" in (run_dir / "report.html").read_text()
    for p in run_dir.iterdir():  # the key is in no file of the run folder
        assert KEY not in p.read_text(errors="replace"), p.name


def test_an_error_event_fails_the_run_as_stream_errors(tmp_path: Path) -> None:
    server = StubServer(key=KEY, mode="error-event").start()
    try:
        rc, run_dir, out = _load(tmp_path, server, "--api", "messages")
    finally:
        server.stop()
    assert rc == 1, out
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["verdict"] == "fail" and s["requests"]["errors"] == {"stream-error": 6}
    assert {r["error_message"] for r in _records(run_dir)} == {
        "error event: overloaded_error: Overloaded"
    }


def test_a_stream_cut_before_message_stop_is_a_stream_error(tmp_path: Path) -> None:
    server = StubServer(key=KEY, mode="no-stop").start()
    try:
        rc, run_dir, out = _load(tmp_path, server, "--api", "messages")
    finally:
        server.stop()
    assert rc == 1, out
    assert {r["error_message"] for r in _records(run_dir)} == {
        "the stream ended without event: message_stop"
    }


def test_chat_with_images_from_a_folder(stub: StubServer, tmp_path: Path) -> None:
    from PIL import Image

    pics = tmp_path / "pics"
    pics.mkdir()
    Image.new("RGB", (96, 64), (1, 2, 3)).save(pics / "a.png")
    Image.new("RGB", (33, 32), (1, 2, 3)).save(pics / "b.jpg", format="JPEG")
    rc, run_dir, out = _load(tmp_path, stub, "--images", str(pics))
    assert rc == 0, out
    assert {b.get("stream_options", {}).get("include_usage") for b in stub.bodies} == {True}
    parts = stub.bodies[0]["messages"][-1]["content"]
    assert parts[1]["type"] == "image_url"
    assert parts[1]["image_url"]["url"].startswith(
        ("data:image/png;base64,", "data:image/jpeg;base64,")
    )
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["api"] == "chat"
    got = {k: v["tokens_per_image_p50"] for k, v in s["images"]["by_size"].items()}
    assert got == {k: t for k, t in (("1x33x32", 2.0), ("1x96x64", 6.0)) if k in got} and got


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ("--images", "/nonexistent/pics"),
            "--images /nonexistent/pics: not a folder of images, nor sizes such as 512x512",
            id="missing-folder",
        ),
        pytest.param(
            ("--images", "9x8x8"), "--images 9x8x8: 1 to 8 images a request", id="bad-size"
        ),
        pytest.param(
            ("--scenario", "tools", "--api", "messages"),
            "--scenario tools sends OpenAI-only request keys",
            id="chat-only-scenario",
        ),
    ],
)
def test_bad_api_or_images_input_is_a_usage_error_before_any_request(
    stub: StubServer, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    rc, _, out = _load(tmp_path, stub, *args)
    assert rc == 2, out
    assert message in out and "Traceback" not in out
    assert stub.bodies == []


def test_capacity_and_compare_work_on_messages_runs(stub: StubServer, tmp_path: Path) -> None:
    cap = _servecheck(
        tmp_path,
        stub,
        "--scenario", "messages", "--users", "1,2", "--step-duration", "2s", "--allow-lag",
        "--images", "32x32",
        command="capacity",
    )  # fmt: skip
    assert cap.returncode in (0, 1), cap.stdout + cap.stderr
    (cap_dir,) = (tmp_path / "reports").iterdir()
    data = json.loads((cap_dir / "capacity.json").read_text())
    steps = sorted((cap_dir / "steps").iterdir())
    assert len(steps) == 2 and data["steps"], data
    summaries = [json.loads((p / "summary.json").read_text()) for p in steps]
    assert {s["api"] for s in summaries} == {"messages"}
    assert all(s["images"]["by_size"]["1x32x32"]["tokens_per_image_p50"] == 1.0 for s in summaries)
    assert all(s["requests"]["ok"] > 0 and s["latency_ms"]["ttft"]["count"] for s in summaries)
    # compare: a messages run against a chat run of the same target says they differ in API
    (tmp_path / "chat").mkdir()
    rc, chat_dir, out = _load(tmp_path / "chat", stub)
    assert rc == 0, out
    proc = subprocess.run(
        [sys.executable, "-m", "servecheck", "compare", str(chat_dir), str(steps[0]), "--json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert "load api differs: chat vs messages" in proc.stdout + proc.stderr


def test_multi_turn_over_messages_continues_from_the_streamed_reply(
    stub: StubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVECHECK_TURNS", "2")
    rc, run_dir, out = _load(tmp_path, stub, "--scenario", "multi_turn", "--api", "messages")
    assert rc == 0, out
    second = [b for b in stub.bodies if len(b["messages"]) == 3]
    assert second, [len(b["messages"]) for b in stub.bodies]
    roles = [m["role"] for m in second[0]["messages"]]
    assert roles == ["user", "assistant", "user"]
    assert second[0]["messages"][1]["content"] == "".join(f" w{i}" for i in range(TEXT_TOKENS))
    assert {r["turn"] for r in _records(run_dir)} == {0, 1}
