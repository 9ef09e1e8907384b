"""STREAM-ERROR-EVENT's verdict on each way an engine can deliver (or lose) a late error.

The fault matrix proves a dropped stream and a bare ``error:`` line fail and the in-stream
error event of the ``stream-late-error`` quirk passes; these pin the other shapes real servers
send, each as raw bytes through the real client."""

from __future__ import annotations

import json

import httpx
import pytest

from servecheck.checks.surfaces.stream import _late_error_verdict
from servecheck.client.factory import ClientSettings
from servecheck.client.http import Exchange, ServeClient

ERROR = {"error": {"message": "prompt too long", "type": "invalid_request_error", "code": 400}}
ROLE = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n'
FINISH = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
EVENT = b"data: " + json.dumps(ERROR).encode() + b"\n\n"
DONE = b"data: [DONE]\n\n"
SSE = "text/event-stream"


def _answer(status: int, body: bytes, ctype: str = SSE) -> Exchange:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            status, stream=httpx.ByteStream(body), headers={"content-type": ctype}
        )

    settings = ClientSettings(base_url="http://servecheck.invalid/v1", headers={}, timeout_s=5)
    with ServeClient(settings, transport=httpx.MockTransport(handler)) as client:
        return client.post("/chat/completions", {"stream": True}, stream=True)


@pytest.mark.parametrize(
    "status,body,ctype,verdict",
    [
        pytest.param(400, json.dumps(ERROR).encode(), "application/json", "ok", id="4xx-before"),
        pytest.param(200, ROLE + EVENT + DONE, SSE, "ok", id="event-then-done"),
        pytest.param(200, ROLE + EVENT, SSE, "ok", id="event-then-clean-close"),
        pytest.param(
            200,
            b"event: error\r\n" + EVENT.replace(b"\n", b"\r\n") + DONE,
            SSE,
            "ok",
            id="crlf-event-field",
        ),
        pytest.param(200, ROLE + FINISH + DONE, SSE, "served", id="served"),
        pytest.param(200, ROLE + FINISH, SSE, "served", id="served-no-done"),
    ],
)
def test_legal_deliveries_pass(status, body, ctype, verdict):
    assert _late_error_verdict(_answer(status, body, ctype))[0] == verdict


@pytest.mark.parametrize(
    "status,body,ctype,needle",
    [
        pytest.param(500, json.dumps(ERROR).encode(), "application/json", "server error", id="5xx"),
        pytest.param(
            400, b"prompt too long", "text/plain", "without an OpenAI error object", id="4xx-plain"
        ),
        pytest.param(
            200,
            json.dumps(ERROR).encode(),
            "application/json",
            "not an event stream",
            id="200-json",
        ),
        pytest.param(
            200,
            ROLE + json.dumps(ERROR).encode() + b"\n\n",
            SSE,
            "not an SSE field",
            id="bare-json",
        ),
        pytest.param(200, ROLE, SSE, "no error event", id="ended-silently"),
        pytest.param(200, ROLE + DONE, SSE, "no error event and no answer", id="done-only"),
        pytest.param(
            200,
            ROLE + b'data: {"error": "prompt too long"}\n\n',
            SSE,
            "not an OpenAI error object",
            id="string-error",
        ),
        pytest.param(
            200, ROLE + EVENT + FINISH + DONE, SSE, "after the error event", id="chunks-after-error"
        ),
        pytest.param(200, ROLE + EVENT[:-2], SSE, "did not end cleanly", id="cut-inside-event"),
    ],
)
def test_lost_or_garbled_errors_fail(status, body, ctype, needle):
    verdict, line, _ = _late_error_verdict(_answer(status, body, ctype))
    assert verdict == "bad", line
    assert needle in line, line
