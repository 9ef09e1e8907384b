"""Per-request server timings: what the engine says one request spent, joined to the client's
record, and the checks that hold the two against each other.

Engines that report them put them in the last chunk of a stream (or the body of a plain
answer):

- llama.cpp's ``timings`` object: ``prompt_n`` / ``prompt_ms`` (prefill of the tokens not
  cached, ``cache_n`` of them were), ``predicted_n`` / ``predicted_ms`` (decode);
- vLLM's ``metrics`` (``--enable-per-request-metrics``, vLLM 0.32's ``PerRequestMetrics``, on the
  final usage chunk): ``queue_time_ms``, ``time_to_first_token_ms`` (scheduled to first token:
  prefill), ``generation_time_ms`` (first to last token).

:func:`server_timings` turns either into one flat dict (ms and token counts), written into the
record as ``server_timings``; the stream reader calls it once a request, on the one chunk it
parses fully anyway (the last), so the per-token path pays nothing. The checks, per request
that carried them (:data:`CHECKS`): the engine's TTFT is not longer than the client's, queue +
prefill is not longer than the client's TTFT (the client's interval holds the server's), and
the engine's token counts equal the ``usage`` it sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servecheck.analysis.sections import ServerTimings
    from servecheck.analysis.verdict import RunVerdict

# Client and server clocks round differently; a millisecond is no finding.
SLACK_MS = 1.0
# (id, description): tallied in summary.json's timings.server (analysis/timings.py).
CHECKS: tuple[tuple[str, str], ...] = (
    ("SRV-TTFT", "the engine's TTFT for a request is not longer than the client's"),
    ("SRV-QUEUE-PREFILL", "the engine's queue + prefill time is not longer than the client's TTFT"),
    ("SRV-TOKENS", "the engine's token counts in its timings equal its usage"),
)
# (phase key in summary.json's timings.phases_ms, server_timings key, what it spans).
SERVER_PHASES: tuple[tuple[str, str, str], ...] = (
    ("server_queue", "queue_ms", "the engine's queue time, as it reported it per request"),
    ("server_prefill", "prefill_ms", "the engine's prefill time, as it reported it per request"),
    ("server_decode", "decode_ms", "the engine's decode time, as it reported it per request"),
)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _put(out: dict[str, float], key: str, value: Any) -> None:
    number = _num(value)
    if number is not None:
        out[key] = number


def server_timings(obj: Mapping[str, Any]) -> dict[str, float] | None:
    """The per-request timings a final chunk or body carries, flat (ms, token counts), or None.

    Keys: ``queue_ms``, ``prefill_ms``, ``decode_ms``, ``ttft_ms`` (what the engine calls its
    TTFT), ``prompt_n`` (prompt tokens, cached ones included), ``cached_n`` (of them, those its
    prefix cache served: llama.cpp's ``cache_n``), ``predicted_n``; each only
    where the engine gave it."""
    out: dict[str, float] = {}
    llama = obj.get("timings")
    if isinstance(llama, Mapping):
        _put(out, "prefill_ms", llama.get("prompt_ms"))
        _put(out, "ttft_ms", llama.get("prompt_ms"))
        _put(out, "decode_ms", llama.get("predicted_ms"))
        _put(out, "predicted_n", llama.get("predicted_n"))
        _put(out, "cached_n", llama.get("cache_n"))  # the prompt tokens its cache served
        prompt_n = _num(llama.get("prompt_n"))
        if prompt_n is not None:
            out["prompt_n"] = prompt_n + (_num(llama.get("cache_n")) or 0.0)
    vllm = obj.get("metrics")
    if isinstance(vllm, Mapping):
        _put(out, "queue_ms", vllm.get("queue_time_ms"))
        _put(out, "prefill_ms", vllm.get("time_to_first_token_ms"))
        _put(out, "ttft_ms", vllm.get("time_to_first_token_ms"))
        _put(out, "decode_ms", vllm.get("generation_time_ms"))
    return out or None


def violations(r: Mapping[str, Any]) -> dict[str, bool]:
    """Check id -> violated, for each check one record's ``server_timings`` allows (a record
    without them, or a failed one, has none)."""
    st = r.get("server_timings")
    if not isinstance(st, Mapping) or r.get("error") is not None:
        return {}
    out: dict[str, bool] = {}
    ttft = r.get("ttft")
    client = None if ttft is None else float(ttft) * 1000.0
    if client is not None and "ttft_ms" in st:
        out["SRV-TTFT"] = st["ttft_ms"] > client + SLACK_MS
    if client is not None and "prefill_ms" in st:
        out["SRV-QUEUE-PREFILL"] = st.get("queue_ms", 0.0) + st["prefill_ms"] > client + SLACK_MS
    pairs = [
        (st.get("predicted_n"), r.get("output_tokens")),
        (st.get("prompt_n"), r.get("prompt_tokens")),
    ]
    compared = [(a, b) for a, b in pairs if a is not None and b is not None]
    if compared:
        out["SRV-TOKENS"] = any(int(a) != int(b) for a, b in compared)
    return out


def verdict_of(section: ServerTimings | None) -> RunVerdict:
    """FAIL naming each check the engine's own timings broke (its numbers contradict the
    client's record or its own usage, so they cannot be trusted); PASS otherwise, saying how
    many requests carried them."""
    from servecheck.analysis.verdict import PASS, RunVerdict

    if section is None:
        return RunVerdict(PASS, [])
    broken = [
        f"server timings: {c.id}: {c.violated} of {c.checked} request(s) break it ({c.description})"
        for c in section.checks
        if c.violated
    ]
    if broken:
        return RunVerdict.of(False, *broken)
    return RunVerdict(
        PASS, [f"server timings: {section.requests} request(s) carried them, every check held"]
    )


__all__ = ["CHECKS", "SERVER_PHASES", "SLACK_MS", "server_timings", "verdict_of", "violations"]
