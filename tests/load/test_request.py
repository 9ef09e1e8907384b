"""The probes' one request function (servecheck/load/generator/request.py): a stream read by the
generator's StreamState into a RequestRecord, classified as a load run classifies it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from servecheck.load.generator.request import Until, read_stream, read_stream_sync
from servecheck.load.generator.stream import StreamState
from servecheck.records.record import RequestRecord

URL = "http://probe.invalid/v1/chat/completions"
SSE = {"content-type": "text/event-stream"}


def _token(text: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n'
DONE = b"data: [DONE]\n\n"


def _record() -> RequestRecord:
    return RequestRecord("ref", "probe", "w0", 0, t_intended=0.0, t_sent=0.0)


def _read(
    body: list[bytes],
    status: int = 200,
    headers: dict[str, str] | None = None,
    until: Until | None = None,
    state: StreamState | None = None,
) -> tuple[RequestRecord, httpx.Request]:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            status,
            headers=SSE if headers is None else headers,
            stream=httpx.ByteStream(b"".join(body)),
        )

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        rec = read_stream_sync(
            client,
            URL,
            {"stream": True},
            {"content-type": "x"},
            _record(),
            until=until,
            state=state,
        )
    return rec, seen[0]


def test_a_stream_read_to_its_end_is_a_load_record() -> None:
    rec, request = _read([_token("a"), _token("b"), _token("c"), USAGE, DONE])
    assert (rec.error, rec.status, rec.abandoned) == (None, 200, False), rec
    assert (rec.output_tokens, rec.output_tokens_client, rec.prompt_tokens) == (3, 3, 7), rec
    assert rec.ttft is not None and rec.e2e is not None and len(rec.itls) == 2, rec
    assert rec.t_done is not None and rec.t_done >= rec.t_sent, rec
    # one Content-Type whatever case the caller's headers used
    assert request.headers.get_list("content-type") == ["application/json"], request.headers


@pytest.mark.parametrize(
    ("body", "headers", "status", "error"),
    [
        pytest.param([_token("a")], SSE, 200, "stream-error", id="no-done"),
        pytest.param([b"data: nope\n\n", DONE], SSE, 200, "invalid-sse", id="not-json"),
        pytest.param([_token("a"), DONE], {}, 200, "invalid-sse", id="not-event-stream"),
        pytest.param([b"busy"], {}, 503, "http-503", id="http-503"),
        pytest.param([b"slow down"], {}, 429, "rate-limited", id="shed"),
    ],
)
def test_what_went_wrong_is_the_load_records_class(
    body: list[bytes], headers: dict[str, str], status: int, error: str
) -> None:
    rec, _ = _read(body, status, headers)
    assert (rec.status, rec.error) == (status, error), rec


def test_until_hangs_up_and_the_record_says_abandoned() -> None:
    state = StreamState()
    rec, _ = _read(
        [_token("a"), _token("b"), _token("c"), DONE],
        until=lambda st: len(st.token_times) >= 1,
        state=state,
    )
    assert rec.abandoned and rec.error is None, rec
    assert rec.output_tokens_client == len(state.token_times) >= 1, rec


def test_the_async_reader_bounds_the_whole_exchange() -> None:
    async def go() -> RequestRecord:
        async def answer(request: httpx.Request) -> httpx.Response:
            await asyncio.sleep(60)  # cancelled by the bound long before
            return httpx.Response(200, headers=SSE, content=DONE)

        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            return await read_stream(client, URL, {}, {}, _record(), timeout_s=0.05)

    rec = asyncio.run(go())
    assert rec.error == "timeout" and "within 0.05 s" in rec.error_message, rec


class _Endless(httpx.SyncByteStream):
    """A token every millisecond and never ``[DONE]`` (the hostile catalogue's endless-sse), for
    at most ``cap_s`` so that a reader without a whole-body deadline ends too, wrongly classed."""

    def __init__(self, cap_s: float = 5.0) -> None:
        self.cap_s = cap_s

    def __iter__(self) -> Iterator[bytes]:
        end = time.monotonic() + self.cap_s
        while time.monotonic() < end:
            yield _token("la")
            time.sleep(0.001)


def _endless_client(timeout_s: float = 60.0) -> httpx.Client:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=SSE, stream=_Endless())

    return httpx.Client(transport=httpx.MockTransport(answer), timeout=timeout_s)


@pytest.mark.parametrize(
    ("client_timeout", "given", "bound"),
    [
        pytest.param(60.0, 0.2, "0.2", id="given-bound"),
        pytest.param(0.3, None, "0.3", id="the-clients-read-timeout"),
    ],
)
def test_the_blocking_reader_bounds_the_whole_stream(
    client_timeout: float, given: float | None, bound: str
) -> None:
    """A stream whose tokens keep coming never trips httpx's per-read timeout: the blocking
    reader ends it at its whole-exchange deadline, a ``timeout`` like the async reader's."""
    with _endless_client(client_timeout) as client:
        bounded = {} if given is None else {"timeout_s": given}
        rec = read_stream_sync(client, URL, {}, {}, _record(), **bounded)
    assert rec.error == "timeout", rec
    assert f"did not finish within {bound} s" in rec.error_message, rec
    assert rec.ttft is not None and rec.output_tokens_client > 0, rec  # tokens came, no end
