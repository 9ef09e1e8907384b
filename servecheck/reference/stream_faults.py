"""The stream faults of the reference server as one table of hooks (``STREAM_FAULTS``).

Each hook point of a chat / completions stream is a field of :class:`StreamHooks`, whose
defaults are the clean server. Each stream fault names the fields it changes, so ``_stream`` in
``server.py`` looks the request's faults up once (:func:`stream_hooks`) and then only reads the
hooks. A new stream fault is one table line (and its entry in ``faults.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

METRICS_AFTER_DONE = b'data: {"metrics": {"tokens_per_second": 42.0}}\n\n'


def _same(step: int, piece: str) -> str:
    return piece


def _second_differs(step: int, piece: str) -> str:
    return piece.upper() + "!" if step == 1 else piece


def _whole(piece: str) -> list[str]:
    return [piece]


def utf8_mangle(piece: str) -> list[str]:
    """Split a piece's UTF-8 bytes in two and decode each half alone (the utf8-split defect)."""
    raw = piece.encode()
    if len(raw) == len(piece):
        return [piece]
    half = len(raw) // 2
    return [raw[:half].decode("utf-8", "replace"), raw[half:].decode("utf-8", "replace")]


@dataclass(slots=True)
class StreamHooks:
    """Where a stream can go wrong; the defaults are the clean server."""

    content_type: str = "text/event-stream"
    chunk_object: str | None = None  # None: chat.completion.chunk / text_completion
    fresh_id_per_chunk: bool = False
    created_step: int = 0  # seconds added to created before each chunk
    hold: str = "none"  # none | blocks (2 KiB, as a proxy's buffers) | all (until the end)
    error_in_200: bool = False  # an error event in a 200 stream, instead of any token
    role_chunk: bool = True
    role_in_deltas: bool = False
    stall_s: float = 0.0  # halfway through, stop sending for this long
    keepalive_pings: int = 0  # halfway through, only SSE comments, every 0.5 s, this many
    piece: Callable[[int, str], str] = _same  # (answer step, piece) -> streamed piece
    split: Callable[[str], list[str]] = _whole  # a piece -> the texts of its deltas
    non_json_step: int | None = None  # this step's chunks are Python reprs, not JSON
    logprobs: bool = True
    logprobs_lag: bool = False  # each chunk carries the previous piece's logprobs
    n_index_shared: bool = False  # every content delta says index 0
    usage_in_finish: bool = False
    length_as_stop: bool = False
    tool_finish_stop: bool = False  # a forced call's finish chunk says 'stop'
    null_final_delta: bool = False
    finish_twice: bool = False
    content_after_finish: bool = False
    usage_extra_tokens: int = 0
    usage_in_choices: bool = False
    usage_no_choices: bool = False
    usage_placeholder: bool = False  # "usage": [] on every chunk but the usage chunk
    usage_always: bool = False  # the usage chunk ends every stream, include_usage or not
    done: bool = True
    after_done: bytes = b""
    created_as_string: bool = False


# fault -> the hooks it sets. Applied in this order, so where two faults set one hook the later
# wins (stream-buffered holds everything even with stream-block-buffered).
STREAM_FAULTS: dict[str, dict[str, Any]] = {
    "stream-wrong-content-type": {"content_type": "application/json"},
    "stream-wrong-object": {"chunk_object": "chat.completion"},
    "schema-chunk-created-string": {"created_as_string": True},
    "stream-id-changes": {"fresh_id_per_chunk": True},
    "stream-created-varies": {"created_step": 1},
    "stream-block-buffered": {"hold": "blocks"},
    "stream-buffered": {"hold": "all"},
    "stream-error-in-200": {"error_in_200": True},
    "stream-no-role": {"role_chunk": False},
    "stream-role-twice": {"role_in_deltas": True},
    "stream-stall": {"stall_s": 3600.0},
    "stream-stall-keepalive": {"keepalive_pings": 7200},
    "stream-differs": {"piece": _second_differs},
    "utf8-split": {"split": utf8_mangle},
    "stream-non-json": {"non_json_step": 1},
    "logprobs-missing": {"logprobs": False},
    "stream-logprobs-mismatch": {"logprobs_lag": True},
    "stream-n-index-shared": {"n_index_shared": True},
    "stream-usage-repeated": {"usage_in_finish": True},
    "stream-length-as-stop": {"length_as_stop": True},
    "tools-stream-finish-stop": {"tool_finish_stop": True},
    "sdk-stream-null-delta": {"null_final_delta": True},
    "stream-finish-twice": {"finish_twice": True},
    "stream-content-after-finish": {"content_after_finish": True},
    "stream-usage-wrong": {"usage_extra_tokens": 3},
    "stream-usage-in-choices": {"usage_in_choices": True},
    "stream-usage-no-choices": {"usage_no_choices": True},
    "stream-usage-placeholder": {"usage_placeholder": True},
    "stream-usage-unasked": {"usage_always": True},
    "stream-no-done": {"done": False},
    "stream-data-after-done": {"after_done": METRICS_AFTER_DONE},
}


def stream_hooks(faults: frozenset[str]) -> StreamHooks:
    """The hooks of one stream: the clean defaults, changed by each of its stream faults."""
    hooks = StreamHooks()
    for name, changes in STREAM_FAULTS.items():
        if name in faults:
            for hook, value in changes.items():
                setattr(hooks, hook, value)
    return hooks


__all__ = ["STREAM_FAULTS", "StreamHooks", "stream_hooks", "utf8_mangle"]
