"""The abandoned-stream probe against in-process reference servers.

The clean server frees a dropped stream's slot and KV blocks at its next token write (aiohttp
raises on a closed transport: the ``_Slot.aborted`` path); ``abort-leak`` keeps dropped
requests in ``num_requests_running``, so the probe must report them as not drained.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from servecheck.errors import UsageError
from servecheck.probes.abandon import (
    ProbeSettings,
    chat_body,
    probe_with_telemetry,
    stream_chat,
)
from servecheck.records.record import RequestRecord
from servecheck.reference.inprocess import RunningServer
from servecheck.reference.server import STATE
from tests.support import target_for

PROBE = ProbeSettings(streams=4, rounds=2, chunks=3, max_tokens=200, pause_s=0.1, timeout_s=20)


@pytest.mark.parametrize(
    ("faults", "status"),
    [
        pytest.param((), "ok", id="clean-drains"),
        pytest.param(("abort-leak",), "not_drained", id="abort-leak-not-drained"),
    ],
)
def test_probe_drain_verdict(
    make_reference: Callable[..., RunningServer],
    tmp_path: Path,
    faults: tuple[str, ...],
    status: str,
) -> None:
    server = make_reference(*faults, kv_blocks=64, ttft_ms=5, itl_ms=5)
    report = probe_with_telemetry(
        target_for(server), tmp_path, settings=PROBE, bound_s=2.0, baseline_s=0.5, interval_s=0.1
    )
    assert report.probe.abandoned == 8, report.probe.line()
    assert report.drain.status == status, report.drain.message
    running = server.app[STATE].running if server.app is not None else None
    if status == "ok":
        assert report.passed
        assert running == 0, f"server still counts {running} running request(s) after the probe"
        assert report.drain.drained_after_s is not None and report.drain.drained_after_s <= 2.0
    else:
        assert not report.passed
        assert running == 8, (
            f"abort-leak should keep the 8 dropped requests running, server says {running}"
        )
        assert report.drain.message.startswith("NOT DRAINED within 2 s"), report.drain.message
    assert (tmp_path / "telemetry" / "prometheus.jsonl").exists()


def test_stream_read_to_the_end_is_not_abandoned(
    make_reference: Callable[..., RunningServer],
) -> None:
    server = make_reference(ttft_ms=1, itl_ms=1)

    async def go() -> tuple[RequestRecord, RequestRecord]:
        async with httpx.AsyncClient(trust_env=False) as client:
            body = chat_body("ref-tiny", max_tokens=8)
            full = await stream_chat(client, server.base_url + "/chat/completions", body, {})
            dropped = await stream_chat(
                client,
                server.base_url + "/chat/completions",
                {**body, "max_tokens": 50},
                {},
                abandon_after=2,
            )
            return full, dropped

    full, dropped = asyncio.run(go())
    assert full.error is None and not full.abandoned, full
    assert full.output_tokens and full.output_tokens_client >= 1, full
    assert dropped.abandoned and dropped.output_tokens_client == 2, dropped


def test_stream_errors_are_data() -> None:
    async def go() -> RequestRecord:
        async with httpx.AsyncClient(trust_env=False) as client:
            return await stream_chat(
                client,
                "http://127.0.0.1:9/v1/chat/completions",
                chat_body("m", max_tokens=4),
                {},
                timeout_s=5,
            )

    out = asyncio.run(go())
    assert out.error == "connect", out


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param(ProbeSettings(streams=0), "streams 0: between 1 and 256", id="no-streams"),
        pytest.param(
            ProbeSettings(rounds=101), "rounds 101: between 1 and 100", id="too-many-rounds"
        ),
        pytest.param(
            ProbeSettings(chunks=300, max_tokens=256),
            "chunks 300: at least 1 and below max_tokens 256",
            id="chunks-past-max-tokens",
        ),
    ],
)
def test_probe_settings_are_bounded(settings: ProbeSettings, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        settings.validate()


@pytest.mark.parametrize(
    ("status", "headers", "error"),
    [
        pytest.param(429, {}, "rate-limited", id="429"),
        pytest.param(503, {"Retry-After": "1"}, "rate-limited", id="503-retry-after"),
        pytest.param(503, {}, "http-503", id="503"),
    ],
)
def test_probe_classifies_a_shed_request_like_the_load_records(
    status: int, headers: dict[str, str], error: str
) -> None:
    def shed(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(b"slow down"))

    async def go() -> RequestRecord:
        async with httpx.AsyncClient(transport=httpx.MockTransport(shed)) as client:
            return await stream_chat(
                client, "http://probe.invalid/v1/chat/completions", chat_body("m", max_tokens=4), {}
            )

    out = asyncio.run(go())
    assert (out.status, out.error, out.error_message) == (status, error, "slow down"), out
