"""A strict, incremental Server-Sent Events parser for OpenAI-style streams.

Follows the WHATWG event-stream rules that real servers rely on: lines end in LF, CRLF or CR;
``data:`` with or without one space; ``:`` lines are comments; several ``data:`` lines join with
``\\n``; an empty line dispatches the event; bytes may arrive split anywhere, even inside a
multi-byte UTF-8 character or between CR and LF.

On top of the transport rules, :class:`ChatStreamValidator`-style checks need to know what an
OpenAI stream should look like: :func:`classify_data` tells ``[DONE]``, a JSON chunk, an error
object and non-JSON data apart. Problems are returned as data (:class:`StreamProblem`), never
raised, so a load test can count them and a conformance check can explain them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DONE = "[DONE]"


# The longest SSE event any reader here holds while waiting for its end (its unfinished line and
# its data lines). A token chunk is a few hundred bytes; without a bound one endless line grows
# until memory runs out and is re-scanned on every read.
MAX_EVENT_BYTES = 1024 * 1024


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. ``data`` is the joined data lines; ``t`` the arrival time (monotonic)."""

    data: str
    event: str = ""
    id: str | None = None
    retry: int | None = None
    t: float = 0.0


@dataclass(slots=True)
class StreamProblem:
    """Something wrong with a stream, with a stable code and a human message."""

    code: (
        str  # missing-done | non-json | error-object | data-after-done | bad-utf8 | truncated-event
    )
    message: str
    event_index: int | None = None


@dataclass(slots=True)
class SSEParser:
    """Feed bytes as they arrive; get complete events back.

    >>> p = SSEParser()
    >>> [e.data for e in p.feed(b'data: {"a":1}\\r\\n\\r\\ndata:[DO')]
    ['{"a":1}']
    >>> [e.data for e in p.feed(b'NE]\\n\\n')]
    ['[DONE]']
    """

    _buffer: bytearray = field(default_factory=bytearray)
    _data: list[str] = field(default_factory=list)
    _event: str = ""
    _id: str | None = None
    _retry: int | None = None
    _pending_cr: bool = False
    _has_fields: bool = False
    problems: list[StreamProblem] = field(default_factory=list)
    bytes_seen: int = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes held for the event in progress (its unfinished line and its data lines)."""
        return len(self._buffer) + sum(len(d) for d in self._data)

    def feed(self, chunk: bytes, t: float = 0.0) -> list[SSEEvent]:
        """Parse ``chunk`` and return the events it completed (possibly none)."""
        self.bytes_seen += len(chunk)
        buf = self._buffer
        if self._pending_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]  # the LF of a CRLF split across reads
        self._pending_cr = False
        buf += chunk
        events: list[SSEEvent] = []
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf != -1 else n)
            if cr != -1:
                end, nxt = cr, cr + 1
                if nxt < n and buf[nxt] == 0x0A:
                    nxt += 1
                elif nxt == n:
                    self._pending_cr = True  # a following LF may be in the next read
            elif lf != -1:
                end, nxt = lf, lf + 1
            else:
                break
            line = bytes(buf[start:end])
            start = nxt
            event = self._line(line, t)
            if event is not None:
                events.append(event)
        del buf[:start]
        return events

    def _line(self, raw: bytes, t: float) -> SSEEvent | None:
        if not raw:
            if not self._has_fields:
                return None
            event = SSEEvent(
                data="\n".join(self._data), event=self._event, id=self._id, retry=self._retry, t=t
            )
            self._data.clear()
            self._event = ""
            self._retry = None
            self._has_fields = False
            return event
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.problems.append(
                StreamProblem(
                    "bad-utf8",
                    f"line is not valid UTF-8 ({exc.reason} at byte {exc.start}): {raw[:80]!r}",
                )
            )
            line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            return None  # comment / keep-alive
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_fields = True
        elif name == "event":
            self._event = value
            self._has_fields = True
        elif name == "id" and "\0" not in value:
            self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        # other field names are ignored, as the spec says
        return None

    def close(self, t: float = 0.0) -> list[SSEEvent]:
        """End of body: a final line without a newline still counts; an unterminated event is reported."""
        events: list[SSEEvent] = []
        if self._buffer:
            event = self._line(bytes(self._buffer), t)
            self._buffer.clear()
            if event is not None:
                events.append(event)
        if self._has_fields:
            self.problems.append(
                StreamProblem(
                    "truncated-event",
                    "the stream ended inside an event (no blank line after the last data: line)",
                )
            )
            events.append(SSEEvent(data="\n".join(self._data), event=self._event, id=self._id, t=t))
            self._data.clear()
            self._has_fields = False
        return events


@dataclass(slots=True)
class ParsedData:
    """What one event's data is: the [DONE] sentinel, a JSON object, an error object, or junk."""

    kind: str  # done | chunk | error | non-json
    obj: dict[str, Any] | None = None


def classify_data(data: str) -> ParsedData:
    if data.strip() == DONE:
        return ParsedData("done")
    try:
        obj = json.loads(data)
    except ValueError:
        return ParsedData("non-json")
    if not isinstance(obj, dict):
        return ParsedData("non-json")
    if "error" in obj and obj.get("error") and "choices" not in obj:
        return ParsedData("error", obj)
    return ParsedData("chunk", obj)
