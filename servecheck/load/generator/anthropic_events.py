"""The load generator's reader for the Anthropic Messages stream (``POST /v1/messages``).

The stream is SSE whose events are named (``event: content_block_delta`` then ``data: {...}``);
the JSON's own ``type`` repeats the name, so the data alone is read and the framing, bounds and
CR/CRLF handling stay :class:`~servecheck.load.generator.stream.StreamState`'s (one SSE splitter for the
project). What each event means for a record (docs/metrics.md, the messages stream):

* ``content_block_delta`` with a non-empty ``text_delta`` or ``input_json_delta`` (a tool call's
  arguments): an answer token; with a non-empty ``thinking_delta``: a reasoning token, exactly
  as chat's ``reasoning_content`` (so TTFT, TTFR, TTFA and the ITLs of each phase are chat's
  definitions); ``signature_delta`` and an empty delta carry no token;
* ``message_start``'s ``message.usage.input_tokens`` and ``message_delta``'s
  ``usage.output_tokens`` (and ``input_tokens`` where a server repeats it there) become the
  chat-shaped usage the record builder reads: ``prompt_tokens`` (input plus the cache's read and
  write counts), ``completion_tokens``, ``prompt_tokens_details.cached_tokens``
  (``cache_read_input_tokens``);
* ``message_stop`` ends the stream (a ``data: [DONE]`` some proxies add is taken as the end too);
  a stream cut before it is a ``stream-error``, as chat's without ``[DONE]``;
* an ``error`` event is a ``stream-error`` with its ``error.type`` and message;
* ``ping``, ``content_block_start`` / ``_stop`` and event types this reader does not know are
  ignored (Anthropic's versioning policy lets new event types appear).

The reactor's token shortcut (a chat ``delta.content`` recognised from its bytes) never fires on
this stream: its states are made with ``fast=False`` and every read goes through the parser.
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.client.sse import DONE
from servecheck.load.generator.stream import StreamState

_DONE_B = DONE.encode()
# delta type -> (the key holding its generated text, the phase it belongs to)
_DELTAS = {
    "text_delta": ("text", "answer"),
    "input_json_delta": ("partial_json", "answer"),
    "thinking_delta": ("thinking", "reasoning"),
}


def _int(d: Any, key: str) -> int | None:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def delta_phase(delta: Any) -> str | None:
    """``"answer"``, ``"reasoning"`` or None (no generated output) for one event's ``delta``."""
    if not isinstance(delta, dict):
        return None
    kind = _DELTAS.get(str(delta.get("type")))
    if kind is None:
        return None
    key, phase = kind
    return phase if delta.get(key) else None


class MessagesStreamState(StreamState):
    """What one streamed ``/v1/messages`` response produced (the chat reader's fields, filled
    from Anthropic's events); ``text`` keeps the reply's text when ``capture`` is set."""

    __slots__ = ("_input", "_output", "_cached", "_created", "capture", "text")
    END_MARK = "event: message_stop"

    def __init__(self, capture: bool = False) -> None:
        super().__init__(fast=False)
        self._input: int | None = None
        self._output: int | None = None
        self._cached: int | None = None
        self._created: int | None = None
        self.capture = capture
        self.text: list[str] = []

    def _data(self, data: bytes, t: float) -> None:
        if self.done:
            return
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            if data.strip() == _DONE_B:
                self.done = True
            elif not self.problem:
                self.problem_kind = "invalid-sse"
                self.problem = f"data is not a JSON object: {data[:80]!r}"
            return
        kind = obj.get("type")
        if kind == "content_block_delta":
            self._delta(obj.get("delta"), t)
        elif kind == "message_start":
            message = obj.get("message")
            self._usage(message.get("usage") if isinstance(message, dict) else None, False)
        elif kind == "message_delta":
            self._usage(obj.get("usage"), True)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error" and not self.problem:
            err = obj.get("error")
            what = f"{err.get('type')}: {err.get('message')}" if isinstance(err, dict) else str(err)
            self.problem_kind, self.problem = "stream-error", f"error event: {what[:200]}"

    def _delta(self, delta: Any, t: float) -> None:
        phase = delta_phase(delta)
        if phase == "answer":
            self._answer(t)  # counts the chunk too
            if self.capture and isinstance(delta, dict) and delta.get("type") == "text_delta":
                self.text.append(str(delta.get("text")))
            return
        self.chunks += 1
        if phase == "reasoning":
            if self.t_first is None:
                self.t_first = t
            self.reasoning_at.append(len(self.token_times))
            self.token_times.append(t)

    def _usage(self, usage: Any, final: bool) -> None:
        """``message_start``'s usage (``final`` False: its ``output_tokens`` is a placeholder,
        not taken) or ``message_delta``'s (the output count)."""
        if not isinstance(usage, dict):
            return
        for attr, key in (
            ("_input", "input_tokens"),
            ("_output", "output_tokens" if final else ""),
            ("_cached", "cache_read_input_tokens"),
            ("_created", "cache_creation_input_tokens"),
        ):
            value = _int(usage, key)
            if value is not None:
                setattr(self, attr, value)
        if self._output is None:
            return
        out: dict[str, Any] = {"completion_tokens": self._output}
        if self._input is not None:
            out["prompt_tokens"] = self._input + (self._cached or 0) + (self._created or 0)
        if self._cached is not None:
            out["prompt_tokens_details"] = {"cached_tokens": self._cached}
        self.usage = out

    @property
    def reply(self) -> str:
        return "".join(self.text)


def parse_messages_bytes(pieces: list[tuple[bytes, float]]) -> MessagesStreamState:
    """Feed ``(bytes, arrival time)`` pieces through the messages reader (used by the tests)."""
    st = MessagesStreamState(capture=True)
    t = 0.0
    for data, t in pieces:
        st.feed(data, t)
    st.close(t)
    return st
