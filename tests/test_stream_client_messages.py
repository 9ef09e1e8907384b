"""Pinned failure text for the STREAM-* and CLIENT-* checks: what a user reads when a fault is on.

The fault matrix proves each fault fails its check with the check's id; these pin the first
line (the summary) and the parts a user acts on (Expected/Received/Hint, a curl with the key masked).
"""

from __future__ import annotations

import fnmatch

import pytest

from servecheck.checks import CheckFailed, load_all, run_with_allowances
from tests.support import TEST_KEY, context_for

CHECKS = load_all()

CASES = [
    (
        "stream-no-role",
        "STREAM-ROLE",
        "the first chunk of choice 0 carries no role 'assistant'",
        "*Hint: clients that build*",
    ),
    (
        "stream-role-twice",
        "STREAM-ROLE",
        "choice 0 sends its role * times",
        "*Received: role in chunks*",
    ),
    (
        "stream-id-changes",
        "STREAM-ID",
        "the id changes within one stream (* different ids)",
        "*Expected: every chunk has id*",
    ),
    (
        "stream-wrong-object",
        "STREAM-OBJECT",
        "* chunks have the wrong object type",
        "*Received: object 'chat.completion' in chunk(s) [0, 1, 2*",
    ),
    (
        "stream-finish-twice",
        "STREAM-FINISH",
        "choice 0 says finish_reason 2 times (*",
        "*finish_reason in chunks*",
    ),
    (
        "stream-content-after-finish",
        "STREAM-FINISH",
        "choice 0 sends output after its finish_reason",
        "* extra*",
    ),
    ("n-ignored", "STREAM-N", "n=2 did not stream two indexed choices", "*choice indexes [0]*"),
    (
        "stream-usage-in-choices",
        "STREAM-USAGE",
        "the usage chunk has non-empty choices",
        '*"choices": [] in the usage chunk*',
    ),
    (
        "stream-usage-wrong",
        "STREAM-USAGE",
        "streamed completion_tokens differ from the non-streamed count for the same text",
        "*completion_tokens 19 in the usage chunk*",
    ),
    ("stream-usage-repeated", "STREAM-USAGE", "2 chunks carry a usage object", "*(same counts)*"),
    (
        "stream-no-done",
        "STREAM-DONE",
        "the stream ended without data: [DONE]",
        "*Expected: a final event data: [DONE]*",
    ),
    (
        "stream-error-in-200",
        "STREAM-ERROR-OBJECT",
        "the server answered a valid request with an error object inside a 200 stream",
        "*upstream model crashed*",
    ),
    (
        "stream-differs",
        "STREAM-EQUALS-NONSTREAM",
        "the streamed text differs from the non-streamed text at temperature 0",
        "*!*",
    ),
    (
        "nondeterministic",
        "STREAM-EQUALS-NONSTREAM",
        "temperature 0 is not deterministic here*",
        "*a second non-streamed answer*",
    ),
    (
        "stream-length-as-stop",
        "STREAM-EQUALS-NONSTREAM",
        "the stream's finish_reason differs from the non-streamed one*",
        "*streamed finish_reason 'stop'*",
    ),
    (
        "utf8-split",
        "STREAM-UTF8",
        "the stream has * more U+FFFD replacement character(s) than the non-streamed answer",
        "*\ufffd*",
    ),
    (
        "stream-non-json",
        "STREAM-SSE-VALID",
        "the event stream is malformed",
        "*non-json: data is not a JSON object*",
    ),
    (
        "stream-data-after-done",
        "STREAM-SSE-VALID",
        "the event stream is malformed",
        "*data-after-done*",
    ),
    (
        "stream-wrong-content-type",
        "STREAM-SSE-VALID",
        "the stream is not served as text/event-stream",
        "*application/json*",
    ),
    (
        "stream-buffered",
        "STREAM-INCREMENTAL",
        "the stream arrives in bursts, not token by token (buffered all at the end)",
        "*proxy_buffering off*",
    ),
    (
        "stream-block-buffered",
        "STREAM-INCREMENTAL",
        "the stream arrives in bursts, not token by token (buffered in * bursts*",
        "* per read) twice*",
    ),
    (
        "stream-stall",
        "STREAM-NO-STALL",
        "the stream stalled: no complete answer within 3.0 s",
        "*then no chunk until*",
    ),
    (
        "stream-stall-keepalive",
        "STREAM-NO-STALL",
        "the stream stalled: no complete answer within 3.0 s",
        "*then no chunk until*",
    ),
    (
        "sdk-stale-content-encoding",
        "CLIENT-SDK-SYNC",
        "the openai SDK failed on chat.completions.create: APIConnectionError",
        "*DecodingError*Hint: the response's Content-Encoding does not match its body*",
    ),
    (
        "sdk-stale-content-encoding",
        "CLIENT-SDK-ASYNC",
        "the openai SDK failed on AsyncOpenAI chat.completions.create: APIConnectionError",
        "*DecodingError*",
    ),
    (
        "stream-non-json",
        "CLIENT-SDK-STREAM",
        "the openai SDK failed on chat.completions.create(stream=True) iteration: JSONDecodeError",
        "*Hint: the SDK json-decodes every data: event*",
    ),
    (
        "sdk-stream-null-delta",
        "CLIENT-SDK-STREAM",
        "the SDK yielded a chunk whose choice has no delta object",
        "*delta=None*",
    ),
    (
        "sdk-json-fenced",
        "CLIENT-SDK-PARSE",
        "the openai SDK failed on chat.completions.parse(response_format=City): ValidationError",
        "*```json*Hint: message.content is not bare JSON*",
    ),
]


def _glob(pattern: str) -> str:
    """Only `*` is a wildcard here: brackets in ids and JSON are literal."""
    return pattern.replace("[", "[[]")


@pytest.mark.parametrize(
    "fault,check_id,summary,detail", [pytest.param(*c, id=f"{c[0]}->{c[1]}") for c in CASES]
)
def test_failure_text(make_reference, fault, check_id, summary, detail):
    server = make_reference(fault, api_key=TEST_KEY)
    ctx = context_for(server, check_id)
    try:
        with pytest.raises(CheckFailed) as excinfo:
            run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()
    text = str(excinfo.value)
    first, _, rest = text.partition("\n")
    assert fnmatch.fnmatchcase(first, _glob(f"{check_id}: {summary}")), first
    assert fnmatch.fnmatchcase(text, _glob(detail)), text
    assert "  Expected: " in rest and "  Received: " in rest
    assert "  Reproduce: curl " in rest, "a failure carries a curl reproduction"
    assert TEST_KEY not in text
