"""Trace replay: send the requests of a recorded trace on its own schedule.

A trace is a list of arrivals with input and output lengths in tokens, optionally a session id
and block hash ids (requests with equal leading hash ids share that prefix, so a prefix cache
sees the reuse the trace recorded). :func:`load_trace` reads the user's file; nothing is
downloaded. Formats (``--trace-format``, ``auto`` detects by extension and header/keys):

============  ============================================================================
``servecheck``  JSONL ``{"t": seconds, "input_tokens", "output_tokens", "session_id"?, "hash_ids"?}``
``mooncake``    JSONL ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}`` (blocks of 512 tokens)
``burstgpt``    CSV ``Timestamp`` (s), ``Request tokens``, ``Response tokens`` (other columns ignored)
``azure``       CSV ``TIMESTAMP`` (date-time), ``ContextTokens``, ``GeneratedTokens`` (Azure LLM inference traces 2023/2024)
============  ============================================================================

Schedule: request ``i`` is due at ``(t_i - t_0) / speed`` seconds after the start (absolute
offsets, as the open loop does; lag is recorded per request and a late generator flags the run).
Distributed: worker ``k`` of ``W`` takes entries ``k, k+W, ...``.

Prompts are cut from one seeded word corpus per process (a string slice per block: cheap at
send time) and sized with a tokens-per-word ratio measured once with the target's /tokenize
where it has one. A block hash id always maps to the same text, and a session's requests are
prefixes of one session text, so reuse in the trace is reuse on the wire. Requests longer than
the target's context are clipped to fit (counted in ``kind``: ``trace-clipped``).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.errors import SpecError, UsageError
from servecheck.load.workload.planned import CHAT_TEMPLATE_TOKENS, PlannedRequest
from servecheck.load.workload.prompts import CHARS_PER_TOKEN, Counter, words_text

FORMATS = ("auto", "servecheck", "mooncake", "burstgpt", "azure")
MOONCAKE_BLOCK = 512
CORPUS_WORDS = 1 << 17
MAX_ENTRIES = 5_000_000


@dataclass(slots=True)
class TraceEntry:
    """One recorded arrival: offset from the trace's first (seconds) and its lengths."""

    t: float
    input_tokens: int
    output_tokens: int
    session: str | None = None
    hash_ids: list[int] | None = None


@dataclass(slots=True)
class Trace:
    """A parsed trace, sorted by time, offsets from its first arrival."""

    entries: list[TraceEntry]
    fmt: str
    block_tokens: int = MOONCAKE_BLOCK
    source: str = ""

    @property
    def span_s(self) -> float:
        return self.entries[-1].t if self.entries else 0.0


def _int(value: Any, what: str, where: str) -> int:
    try:
        n = int(float(value))
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {what} {value!r} is not a number") from None
    if n < 0:
        raise UsageError(f"{where}: {what} {value!r} is negative")
    return n


def _float(value: Any, what: str, where: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {what} {value!r} is not a number") from None
    if x != x or x in (float("inf"), float("-inf")):
        raise UsageError(f"{where}: {what} {value!r} is not a finite number")
    return x


def _azure_time(text: str, where: str) -> float:
    """``2023-11-16 18:15:46.6805900`` (7 fraction digits, which ``fromisoformat`` may refuse)."""
    s = text.strip()
    frac = 0.0
    if "." in s:
        s, f = s.split(".", 1)
        digits = "".join(c for c in f if c.isdigit())
        frac = float("0." + digits) if digits else 0.0
    try:
        t = dt.datetime.fromisoformat(s.replace("T", " "))
    except ValueError:
        raise UsageError(f"{where}: TIMESTAMP {text!r} is not a date-time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp() + frac


def _detect(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        head = fh.readline().strip()
    if head.startswith("{"):
        try:
            keys = set(json.loads(head))
        except ValueError:
            raise UsageError(f"{path}: line 1 is not JSON") from None
        if {"timestamp", "input_length", "output_length"} <= keys:
            return "mooncake"
        if {"t", "input_tokens", "output_tokens"} <= keys:
            return "servecheck"
        raise UsageError(
            f"{path}: unknown JSONL trace keys {sorted(keys)}; expected Mooncake "
            "(timestamp, input_length, output_length) or servecheck (t, input_tokens, output_tokens)"
        )
    cols = {c.strip() for c in head.split(",")}
    if {"Timestamp", "Request tokens", "Response tokens"} <= cols:
        return "burstgpt"
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
        return "azure"
    raise SpecError(
        "{path}: cannot tell the trace format from its first line {head!r}; "
        "give {trace_format} ({choices})",
        path=path,
        head=head[:120],
        choices=", ".join(FORMATS[1:]),
    )


def load_trace(path: str | Path, fmt: str = "auto") -> Trace:
    """Read a trace file (``path``, or a shipped trace: ``synthetic``). Raises
    :class:`UsageError` naming the file, line and field at fault."""
    from servecheck.load.workload.shipped import trace_path

    if fmt not in FORMATS:
        raise UsageError(f"trace format {fmt!r}: one of {', '.join(FORMATS)}")
    p = trace_path(str(path))  # a file, or a shipped trace by name or checkout path
    if fmt == "auto":
        fmt = _detect(p)
    raw: list[TraceEntry] = []
    if fmt in ("servecheck", "mooncake"):
        with open(p, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{p}:{n}"
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise UsageError(f"{where}: not a JSON object") from None
                if not isinstance(obj, dict):
                    raise UsageError(f"{where}: not a JSON object")
                raw.append(_json_entry(obj, fmt, where))
                if len(raw) > MAX_ENTRIES:
                    raise UsageError(f"{p}: more than {MAX_ENTRIES} requests")
    else:
        with open(p, encoding="utf-8", errors="replace", newline="") as fh:
            reader = csv.DictReader(fh)
            for n, row in enumerate(reader, 2):
                where = f"{p}:{n}"
                row = {(k or "").strip(): v for k, v in row.items()}
                if fmt == "burstgpt":
                    t = _float(row.get("Timestamp"), "Timestamp", where)
                    i = _int(row.get("Request tokens"), "Request tokens", where)
                    o = _int(row.get("Response tokens"), "Response tokens", where)
                else:
                    t = _azure_time(row.get("TIMESTAMP") or "", where)
                    i = _int(row.get("ContextTokens"), "ContextTokens", where)
                    o = _int(row.get("GeneratedTokens"), "GeneratedTokens", where)
                raw.append(TraceEntry(t, i, o))
                if len(raw) > MAX_ENTRIES:
                    raise UsageError(f"{p}: more than {MAX_ENTRIES} requests")
    if not raw:
        raise UsageError(f"trace file {str(path)!r} has no requests")
    raw.sort(key=lambda e: e.t)
    t0 = raw[0].t
    for e in raw:
        e.t -= t0
        # A recorded failure can have no output; a request must ask for at least one token.
        e.output_tokens = max(1, e.output_tokens)
        e.input_tokens = max(1, e.input_tokens)
    return Trace(raw, fmt, source=str(p))


def trace_duration(path: str | Path, fmt: str = "auto", speed: float = 1.0) -> float:
    """How long a replay runs: the trace's span at ``speed``, plus a second so its last request
    is inside the bound. Reads (and so checks) the whole file: a bad trace stops the run here."""
    return load_trace(path, fmt).span_s / speed + 1.0


def _json_entry(obj: dict[str, Any], fmt: str, where: str) -> TraceEntry:
    if fmt == "mooncake":
        keys = ("timestamp", "input_length", "output_length")
        missing = [k for k in keys if k not in obj]
        if missing:
            raise UsageError(f"{where}: missing {', '.join(missing)}")
        t = _float(obj["timestamp"], "timestamp", where) / 1000.0
        i = _int(obj["input_length"], "input_length", where)
        o = _int(obj["output_length"], "output_length", where)
    else:
        keys = ("t", "input_tokens", "output_tokens")
        missing = [k for k in keys if k not in obj]
        if missing:
            raise UsageError(f"{where}: missing {', '.join(missing)}")
        t = _float(obj["t"], "t", where)
        i = _int(obj["input_tokens"], "input_tokens", where)
        o = _int(obj["output_tokens"], "output_tokens", where)
    hashes = obj.get("hash_ids")
    if hashes is not None and (
        not isinstance(hashes, list) or not all(isinstance(h, int) for h in hashes)
    ):
        raise UsageError(f"{where}: hash_ids must be a list of integers")
    session = obj.get("session_id")
    return TraceEntry(t, i, o, None if session is None else str(session), hashes)


def synthetic_trace(n: int = 240, seed: int = 7) -> list[dict[str, Any]]:
    """The small trace shipped in ``loadtests/traces/synthetic.jsonl`` (servecheck format):
    bursty arrivals (~20 req/s with 4x bursts), short and long prompts, a third of the requests
    in sessions and a third sharing block hash ids (prefix reuse)."""
    rng = random.Random(seed)
    t = 0.0
    out: list[dict[str, Any]] = []
    for i in range(n):
        burst = (i // 40) % 2 == 1
        t += rng.expovariate(80.0 if burst else 20.0)
        row: dict[str, Any] = {
            "t": round(t, 4),
            "input_tokens": rng.choice((32, 64, 96, 200)),
            "output_tokens": rng.choice((8, 16, 32, 48)),
        }
        kind = i % 3
        if kind == 1:
            row["session_id"] = f"s{rng.randrange(8)}"
        elif kind == 2:
            shared = rng.randrange(4)
            row["hash_ids"] = [1000 + shared, 2000 + shared, 3000 + i]
            row["input_tokens"] = 2 * 64 + rng.choice((16, 32))
        out.append(row)
    return out


# ------------------------------------------------------------------ schedule and prompts


@dataclass(slots=True)
class TraceSchedule:
    """This worker's share of a trace: offsets (``offsets()``) and the entries in the same order
    (``next_entry()``; the open-loop dispatcher spawns one request per offset, and gevent runs
    spawned greenlets in order, so the k-th request planned is the k-th offset's)."""

    trace: Trace
    speed: float = 1.0
    index: int = 0
    workers: int = 1
    pending: deque[TraceEntry] = field(default_factory=deque)

    def mine(self) -> Iterator[TraceEntry]:
        return iter(self.trace.entries[self.index :: self.workers])

    def offsets(self) -> Iterator[float]:
        for e in self.mine():
            self.pending.append(e)
            yield e.t / self.speed

    def planned(self, duration: float | None) -> int:
        if duration is None:
            return len(self.trace.entries[self.index :: self.workers])
        return sum(1 for e in self.mine() if e.t / self.speed < duration)

    def next_entry(self) -> TraceEntry | None:
        return self.pending.popleft() if self.pending else None


class Corpus:
    """Seeded prose cut by word offsets: the text of ``n`` tokens at a key is one slice."""

    def __init__(self, seed: int = 0, tokens_per_word: float | None = None) -> None:
        text = words_text(CORPUS_WORDS, 424_242 + seed)
        self.text = text + " "
        offs = [0]
        pos = text.find(" ")
        while pos >= 0:
            offs.append(pos + 1)
            pos = text.find(" ", pos + 1)
        offs.append(len(text) + 1)
        self.offs = offs
        self.words = len(offs) - 1
        avg_chars = len(text) / max(1, self.words)
        self.tokens_per_word = tokens_per_word or avg_chars / CHARS_PER_TOKEN

    def calibrate(self, count: Counter) -> bool:
        """Measure tokens per word with the target's tokenizer (one call)."""
        sample = self.text[: self.offs[2000]]
        got = count(sample)
        if got:
            self.tokens_per_word = got / 2000
            return True
        return False

    def piece(self, key: int, tokens: int) -> str:
        n = max(1, min(self.words // 2, round(tokens / self.tokens_per_word)))
        # The start depends on the key only: a shorter piece at a key is a prefix of a longer one.
        start = (key * 7919) % (self.words - self.words // 2)
        return self.text[self.offs[start] : self.offs[start + n]]


def trace_request(
    e: TraceEntry,
    seq: int,
    corpus: Corpus,
    block_tokens: int,
    context_length: int | None,
) -> PlannedRequest:
    """The request for one trace entry: hash-id blocks, else a session's text, else its own."""
    want_in, out = e.input_tokens, e.output_tokens
    kind = "trace"
    if context_length:
        room = context_length - CHAT_TEMPLATE_TOKENS
        out = min(out, max(1, room // 2))
        if want_in + out > room:
            want_in, kind = max(1, room - out), "trace-clipped"
    if e.hash_ids:
        parts: list[str] = []
        left = want_in
        for h in e.hash_ids:
            if left <= 0:
                break
            size = min(block_tokens, left)
            parts.append(corpus.piece(h, size))  # a partial last block: a prefix of the full one
            left -= size
        if left > 0:
            parts.append(corpus.piece(1_000_003 + seq, left))
        text = "".join(parts)
    elif e.session is not None:
        # Requests of a session are prefixes of one text: later, longer ones reuse earlier ones.
        text = corpus.piece(zlib.crc32(e.session.encode()), want_in)
    else:
        text = f"Request {seq}. " + corpus.piece(2_000_003 + seq, want_in)
    fields: dict[str, Any] = {}
    if e.session is not None:
        fields["conversation"] = e.session
    # The prefix a cache could reuse: the first block's hash (Mooncake), else the session. The
    # summary then splits TTFT of each group's first request from the later ones'.
    if e.hash_ids:
        fields["prefix_group"] = f"block-{e.hash_ids[0]}"
    elif e.session is not None:
        fields["prefix_group"] = f"session-{e.session}"
    return PlannedRequest([{"role": "user", "content": text}], out, kind, want_in, fields=fields)


# ------------------------------------------------------------------ the scenario mixin

_CORPUS: dict[int, Corpus] = {}


def open_schedule(cfg: Any, index: int) -> TraceSchedule:
    """This worker's share of the run's trace (``cfg.trace``), read in the Locust process."""
    trace = load_trace(cfg.trace, cfg.trace_format)
    return TraceSchedule(trace, cfg.trace_speed, index % cfg.workers, cfg.workers)


class TraceMixin:
    """Replays ``servecheck load --trace FILE``: each request has its entry's lengths."""

    rng: random.Random
    _seq: int = 0

    @classmethod
    def prepare_run(cls, ctrl: Any) -> None:
        """Build this process's corpus and measure tokens per word once (before the clock)."""
        seed = ctrl.cfg.seed
        if seed in _CORPUS:
            return
        corpus = Corpus(seed)
        if ctrl.cfg.use_tokenize:
            from servecheck.load.workload.prompts import tokenize_counter

            root = ctrl.cfg.base_url.rstrip("/").removesuffix("/v1")
            count, _ = tokenize_counter(root, ctrl.cfg.model, ctrl.auth_headers())
            if count is not None:
                corpus.calibrate(count)
        _CORPUS[seed] = corpus

    def plan_request(self, ctrl: Any) -> PlannedRequest:
        sched = getattr(ctrl, "sched", None)
        entry = sched.next_entry() if isinstance(sched, TraceSchedule) else None
        if entry is None or not isinstance(sched, TraceSchedule):
            raise UsageError("the trace scenario needs servecheck load --trace FILE")
        TraceMixin._seq += 1
        return trace_request(
            entry,
            TraceMixin._seq,
            _CORPUS[ctrl.cfg.seed],
            sched.trace.block_tokens,
            ctrl.cfg.context_length,
        )
