"""The load generator's stream reader: cheap per token, same TTFT as the timing client.

Fed raw bytes as they arrive. SSE is split with a small LF-only fast path (what every engine
sends); the first CR seen switches the stream to the project's strict
:class:`~servecheck.client.sse.SSEParser`, so legal CRLF/CR framing is still read correctly.
Whether a chunk carries a token (content, tool-call delta, reasoning, or ``text``) is decided by
the very function :mod:`servecheck.client.http` uses for :class:`~servecheck.client.timing.Timing`
(``carries_token``; the Locust user reads through this class, and so do soak and the probes,
through :mod:`servecheck.load.generator.request`),
so TTFT here and in conformance checks is one definition (``tests/load/test_stream.py`` pins it).
The same function says the token's phase: reasoning (``reasoning_content`` / ``reasoning``) or
answer (everything else); ``token_times`` holds every token, ``reasoning_at`` the positions of
the reasoning ones in it, ``t_first_answer`` the first answer token (docs/metrics.md: TTFT, TTFR, TTFA).

No locust or gevent here: this module is pure and unit-tested in the pytest process.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any

from servecheck.client.http import (
    token_phase,  # one token predicate for the project (the TTFT rule), with its phase
)
from servecheck.client.sse import DONE, MAX_EVENT_BYTES, SSEParser
from servecheck.errors import SpecError
from servecheck.load.generator.wire import WireResult
from servecheck.load.workload.schedule import parse_duration
from servecheck.records.record import ErrorClass, RecordError, status_error

if TYPE_CHECKING:
    from servecheck.records.record import RequestRecord

_DONE_B = DONE.encode()
# MAX_EVENT_BYTES also bounds a non-SSE body here: without it one endless line is copied on every
# read (quadratic) and blocks the generator's loop for tens of seconds.


class StreamState:
    """What one streamed response produced, fed with raw bytes as they arrive."""

    __slots__ = (
        "_buf",
        "_slow",
        "t_first",
        "t_first_answer",
        "token_times",
        "reasoning_at",
        "usage",
        "timed",
        "done",
        "problem",
        "problem_kind",
        "chunks",
        "fast",
        "finish_reason",
    )
    END_MARK = "data: [DONE]"  # what ends a complete stream (the messages reader's differs)

    def __init__(self, fast: bool = True) -> None:
        self.fast = fast
        self._buf = b""
        self._slow: SSEParser | None = None
        self.t_first: float | None = None
        self.t_first_answer: float | None = None
        self.token_times: list[float] = []
        self.reasoning_at: list[int] = []  # indices into token_times of reasoning tokens
        self.usage: dict[str, Any] | None = None
        # The last parsed chunk that carried per-request server timings (llama.cpp's
        # ``timings``, vLLM's ``metrics``): kept as it is, turned into numbers once at the end.
        self.timed: dict[str, Any] | None = None
        self.done = False
        self.problem = ""
        self.problem_kind: ErrorClass = "stream-error"  # what ``problem`` is, once set
        self.chunks = 0
        # The last finish_reason of a parsed chunk. Complete only with ``fast=False``: the fast
        # path counts a token chunk without parsing it, and vLLM's last token chunk carries it.
        self.finish_reason: str | None = None

    def feed(self, data: bytes, t: float) -> str | None:
        """Take one read. Returns why the exchange must stop (an event past
        :data:`MAX_EVENT_BYTES`; also recorded as ``problem_kind`` ``too-large``), else None."""
        self._feed(data, t)
        pending = len(self._buf) if self._slow is None else self._slow.pending_bytes
        if pending > MAX_EVENT_BYTES:
            self.problem_kind = "too-large"
            self.problem = (
                f"the server sent more than {MAX_EVENT_BYTES} bytes without ending an SSE event "
                "(one giant line or a huge non-event-stream body)"
            )
            self._buf = b""
            return self.problem
        return None

    def _feed(self, data: bytes, t: float) -> None:
        if self._slow is not None:
            for ev in self._slow.feed(data, t):
                self._data(ev.data.encode(), t)
            return
        if (
            not self._buf
            and data[:6] == b"data: "
            and data[-2:] == b"\n\n"
            and data.find(b"\n", 6) == len(data) - 2
            and b"\r" not in data
        ):
            self._data(data[6:-2], t)  # the common read: exactly one single-line event
            return
        if b"\r" in data:
            # CR / CRLF framing: hand everything to the strict parser from here on.
            self._slow = SSEParser()
            buf, self._buf = self._buf + data, b""
            for ev in self._slow.feed(buf, t):
                self._data(ev.data.encode(), t)
            return
        buf = self._buf + data if self._buf else data
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            self._event(buf[start:end], t)
            start = end + 2
        self._buf = buf[start:]

    def token(self, t: float) -> bool:
        """One token event already recognised from its bytes (the reader thread's ``token_chunk``:
        what :meth:`feed`'s one-event path and :func:`token_kind` would conclude). Counted only
        between events on the fast path; False means: ``feed`` the bytes instead."""
        if self._buf or self._slow is not None or self.done or not self.fast:
            return False
        self._answer(t)  # the shortcut's shape is a non-empty delta.content: an answer token
        return True

    def between_events(self) -> bool:
        """Whether :meth:`token` would count a token chunk arriving now."""
        return not self._buf and self._slow is None and not self.done and self.fast

    def tokens(self, times: list[float]) -> None:
        """Token chunks counted by the reader thread while :meth:`between_events` held (which
        they do not change): the same as :meth:`token` for each time, in order."""
        if not times:
            return
        self.chunks += len(times)
        if self.t_first is None:
            self.t_first = times[0]
        if self.t_first_answer is None:
            self.t_first_answer = times[0]
        self.token_times.extend(times)

    def event(self, data: bytes, t: float) -> None:
        """One SSE event's data, already split from the stream (the native lane's plain answers,
        ``lane.py``): what :meth:`feed` does with each event it completes."""
        self._data(data, t)

    def _answer(self, t: float) -> None:
        """Count one chunk carrying an answer token (content, tool call or text) at ``t``."""
        self.chunks += 1
        if self.t_first is None:
            self.t_first = t
        if self.t_first_answer is None:
            self.t_first_answer = t
        self.token_times.append(t)

    def phase_itls(self) -> tuple[list[float], list[float]]:
        """(reasoning ITLs, answer ITLs): gaps between consecutive tokens of the same phase.
        The gap from the last reasoning token to the first answer token is in neither (it is
        in the overall ITLs): it is the end of thinking, not a decode step of either phase."""
        times = self.token_times
        if not self.reasoning_at:
            return [], [b - a for a, b in zip(times, times[1:], strict=False)]
        reasoning = set(self.reasoning_at)
        r_gaps: list[float] = []
        a_gaps: list[float] = []
        for k in range(1, len(times)):
            is_r = k in reasoning
            if is_r == ((k - 1) in reasoning):
                (r_gaps if is_r else a_gaps).append(times[k] - times[k - 1])
        return r_gaps, a_gaps

    @property
    def t_first_reasoning(self) -> float | None:
        return self.token_times[self.reasoning_at[0]] if self.reasoning_at else None

    def close(self, t: float) -> None:
        if self._slow is not None:
            for ev in self._slow.close(t):
                self._data(ev.data.encode(), t)
        elif self._buf.strip():
            self._event(self._buf.strip(b"\n"), t)
            self._buf = b""

    def _event(self, block: bytes, t: float) -> None:
        if block.startswith(b"data:") and b"\n" not in block:
            value = block[5:]
            self._data(value[1:] if value[:1] == b" " else value, t)
            return
        parts = []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                value = line[5:]
                parts.append(value[1:] if value[:1] == b" " else value)
        if parts:
            self._data(b"\n".join(parts), t)

    def _data(self, data: bytes, t: float) -> None:
        if self.done:
            return  # data after [DONE] is a conformance matter, not a load one
        if data[:1] == b"{":
            fast = token_kind(data) if self.fast else None
        elif data == _DONE_B or data.strip() == _DONE_B:
            self.done = True
            return
        else:
            fast = None
        if fast is not None:
            if fast:
                self._answer(t)  # token_kind's True is a non-empty delta.content
            else:
                self.chunks += 1
            return
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            if not self.problem:
                self.problem_kind, self.problem = (
                    "invalid-sse",
                    f"data is not a JSON object: {data[:80]!r}",
                )
            return
        if obj.get("error") and "choices" not in obj:
            if not self.problem:
                self.problem_kind, self.problem = (
                    "stream-error",
                    f"error object in stream: {str(obj.get('error'))[:200]}",
                )
            return
        choices = obj.get("choices")
        if choices and isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict) and choice.get("finish_reason"):
                    self.finish_reason = str(choice["finish_reason"])
        phase = token_phase(obj)
        if phase == "answer":
            self._answer(t)
        else:
            self.chunks += 1
            if phase == "reasoning":
                if self.t_first is None:
                    self.t_first = t
                self.reasoning_at.append(len(self.token_times))
                self.token_times.append(t)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        if "timings" in obj or "metrics" in obj:
            self.timed = obj


_WS = b" \t\r\n"
_SLOW_KEYS = (b'"tool_calls"', b'"reasoning', b'"error"', b'"text"', b'"message"')
_USAGE_NULL = (b'"usage":null', b'"usage": null')


def token_kind(data: bytes) -> bool | None:
    """Does this chunk carry a token, decided from its bytes without parsing JSON?

    ``True``/``False`` only for the common shape (an object whose only token-bearing key is
    ``"content"``, with no usage or a ``"usage": null``); ``None`` means "parse it and ask
    :func:`carries_token`": tool calls, reasoning, ``text``, a usage object, errors, a chunk
    without ``"content"`` (the finish chunk) and anything unexpected. ``json.loads`` costs ~20 us per chunk on a small VM core, most of the
    per-token budget; this check costs about a tenth of that. An escaped ``\"content\"``
    inside a string cannot match because the quote after the key would be preceded by a
    backslash. Equivalence with the parsing path is pinned by tests/load/test_stream.py.
    """
    if data[:1] != b"{" or data[-1:] != b"}":
        return None
    i = data.find(b'"delta":{"content":"')
    if i >= 0 and data[i + 20] != 0x22:
        # The shape vLLM, llama.cpp and OpenAI send for a token: a non-empty content string in a
        # delta carries a token whatever else the chunk holds; only a usage object needs the parse.
        u = data.find(b'"usage"')
        if u < 0 or (
            data.startswith((b":null", b": null"), u + 7) and data.find(b'"usage"', u + 7) < 0
        ):
            return True
        return None
    i = data.find(b'"content"')
    if i < 0:
        return None  # the finish chunk, a usage chunk: parse it (checked first: it is the cheapest)
    for key in _SLOW_KEYS:
        if key in data:
            return None
    if b'"usage"' in data and data.count(b'"usage"') != data.count(_USAGE_NULL[0]) + data.count(
        _USAGE_NULL[1]
    ):
        return None  # a usage object (the last chunk): parse it; "usage": null (OpenAI, vLLM) is not one
    n = len(data)
    while i >= 0:
        j = i + 9
        while j < n and data[j] in _WS:
            j += 1
        if j >= n or data[j] != 0x3A:  # ':'
            return None
        j += 1
        while j < n and data[j] in _WS:
            j += 1
        c = data[j : j + 1]
        if c == b'"':
            if data[j + 1 : j + 2] != b'"':
                return True  # a non-empty string
        elif c not in (b"n", b"["):  # null, or logprobs' "content": [...]
            return None
        i = data.find(b'"content"', j)
    return False


def record_phases(rec: RequestRecord, st: StreamState, t0: float) -> None:
    """Fill a record's reasoning-phase fields from a finished stream sent at ``t0``."""
    if st.t_first_answer is not None:
        rec.ttfa = st.t_first_answer - t0
    usage = st.usage
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    value = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if isinstance(value, int) and not isinstance(value, bool):
        rec.reasoning_tokens = value
    if st.reasoning_at:
        first = st.t_first_reasoning
        rec.ttfr = None if first is None else first - t0
        rec.reasoning_tokens_client = len(st.reasoning_at)
        rec.itls_reasoning, rec.itls_answer = st.phase_itls()


def parse_stream_bytes(pieces: list[tuple[bytes, float]], fast: bool = True) -> StreamState:
    """Feed ``(bytes, arrival time)`` pieces through the load parser (used by the tests)."""
    st = StreamState(fast)
    t = 0.0
    for data, t in pieces:
        st.feed(data, t)
    st.close(t)
    return st


RETRY_AFTER_CAP_S = 600.0  # the most --honour-retry-after may wait


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header in seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def parse_retry_after_cap(text: str | float | None) -> float:
    """``--honour-retry-after MAX``: 0 (off) when not given, else seconds in (0, 600]."""
    if text is None or text == 0:
        return 0.0
    cap = parse_duration(text)
    if cap > RETRY_AFTER_CAP_S:
        raise SpecError(
            f"{{retry_after_max_s}} {{text}}: at most {RETRY_AFTER_CAP_S:.0f}s (a bound on each wait)",
            text=text,
        )
    return cap


def classify(res: WireResult, st: StreamState) -> tuple[RecordError | None, str]:
    """The record's error class and message for one exchange, or ``(None, "")`` for a success.

    Transport errors first (``connect``, ``timeout``, ``stream-error`` from the wire), then
    ``http-<status>`` (``rate-limited`` for 429, and for 503 with ``Retry-After``), then what the stream said: a 200 that is not ``text/event-stream`` or
    carries non-JSON data is ``invalid-sse``; an error object inside it or a missing
    ``data: [DONE]`` is ``stream-error``.
    """
    if res.error is not None:
        return res.error, res.error_message
    if res.status != 200:
        message = res.body_prefix.decode("utf-8", "replace")[:300]
        return status_error(res.status or 0, res.headers), message
    ctype = res.headers.get("content-type", "")
    if "text/event-stream" not in ctype:
        return "invalid-sse", f"content-type is {ctype or 'missing'!r}, not text/event-stream"
    if st.problem:
        return st.problem_kind, st.problem
    if res.hung_up:
        return None, ""  # abandoned on purpose: no [DONE] to expect
    if not st.done:
        return "stream-error", f"the stream ended without {st.END_MARK}"
    return None, ""


def record_from_stream(
    rec: RequestRecord,
    *,
    ttft: float | None,
    e2e: float | None,
    token_times: Sequence[float],
    usage: dict[str, Any] | None,
) -> RequestRecord:
    """Fill a record's measurements from one read stream (the one place they are derived):
    TTFT, E2E, the gaps between token-bearing chunks (ITLs), the client's chunk count, the
    server's usage counts where it sent them, and TPOT over the output tokens after the first.
    Times in seconds; ``token_times`` on the same clock as each other. Returns ``rec``."""
    rec.e2e = e2e
    rec.output_tokens_client = len(token_times)
    if usage is not None and isinstance(usage.get("completion_tokens"), int):
        rec.output_tokens = usage["completion_tokens"]
        if isinstance(usage.get("prompt_tokens"), int):
            rec.prompt_tokens = usage["prompt_tokens"]
    if ttft is not None:
        rec.ttft = ttft
        rec.itls = [b - a for a, b in zip(token_times, token_times[1:], strict=False)]
    n_out = rec.tokens
    if rec.ttft is not None and rec.e2e is not None and n_out >= 2:
        rec.tpot = (rec.e2e - rec.ttft) / (n_out - 1)
    return rec
