"""Per-request load records: one JSON line per finished request, written as the run goes.

Why a line per request and a flush per line: a load run can die at any time (``kill -9``, OOM,
a lost machine). Every request that finished before that must still be on disk, so the writer
never buffers more than the line it is writing. A half-written last line (the process died
inside ``write``) is skipped by the reader and counted, never fatal.

Times: ``t_intended``, ``t_sent`` and ``t_done`` are wall-clock epoch seconds (derived from one
``time.time()`` anchor plus ``perf_counter`` deltas, so they are monotonic inside a process and
comparable across processes on one host). Durations (``ttft``, ``itls``, ``tpot``, ``e2e``) are
seconds measured on ``perf_counter``. ``docs/metrics.md`` defines each one.

Distributed runs: every worker writes its own ``records-<worker>.jsonl``; :func:`merge_records`
merges them into one file sorted by send time at the end and reports the count per worker. It
keeps only a small index in memory (send time and file offset per line), never the records, so
an hour-long run merges in tens of MB (docs/benchmarks.md, merge section); statistics then stream over the merged file.
"""

from __future__ import annotations

import json
import operator
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any, Final, Literal, NewType

from servecheck.errors import SpecError

_line: Any
try:  # the optional C writer of the ITL array (servecheck/records/_line.c; built by `make venv`)
    from servecheck.records import _line
except ImportError:  # pragma: no cover - a pure-Python install
    _line = None

# The one vocabulary of a failed request's ``error``, for every producer of records and probe
# outcomes (the stream reader, the wire, the reactor, the abandoned-stream probe, cold start, the
# swap probe). A non-200 answer is ``http-<status>``, built only by :func:`status_error`.
ErrorClass = Literal[
    "connect", "timeout", "stream-error", "invalid-sse", "too-large", "rate-limited", "lost"
]
HttpError = NewType("HttpError", str)  # "http-<status>", e.g. "http-503"
RecordError = ErrorClass | HttpError
# The server shed the request (429, or 503 with Retry-After): counted apart from failures in
# stats and reports; the server answered as a loaded server should, but served nothing.
RATE_LIMITED: Final = "rate-limited"
# Due during an outage and never sent: the generator backs off instead of hammering a target
# that stopped answering (analysis/outage.py); the record keeps its intended time.
LOST: Final = "lost"


def status_error(status: int, headers: Mapping[str, str]) -> RecordError:
    """The error class of a non-200 answer: ``rate-limited`` for 429, and for 503 with a
    ``Retry-After`` header (shed, not failed); else ``http-<status>``. ``headers`` with
    lower-case names (httpx's headers match either case)."""
    if status == 429 or (status == 503 and "retry-after" in headers):
        return RATE_LIMITED
    return http_error(status)


def http_error(status: int) -> HttpError:
    """``http-<status>``: the class of an answer whose status alone is the failure."""
    return HttpError(f"http-{status}")


RECORD_GLOB = "records-*.jsonl"
MERGED_NAME = "records.jsonl"
RECORDS_PARQUET = "records.parquet"  # the compact form (records/parquet.py), once a run is over
REQUEST_ID = "X-Request-Id"  # the default request id header (analysis/timings.py, docs/metrics.md)
LOCAL_DIR = "local"  # a distributed worker's own copy: <run dir>/local/records-<worker>.jsonl


@dataclass(slots=True)
class RequestRecord:
    """One request as the generator saw it. ``error`` is None for a success.

    ``error`` is one of ``connect``, ``timeout``, ``http-<status>`` (e.g. ``http-503``),
    ``stream-error`` (the stream broke, carried an error object or ended without ``[DONE]``),
    ``too-large`` (an SSE event or body past the reader's bound) or ``invalid-sse`` (data that
    is not SSE / not JSON), or ``rate-limited`` (429, or 503 with ``Retry-After``: shed,
    not failed; ``retry_after_s`` holds the header's seconds), or ``lost`` (due during an
    outage and not sent: analysis/outage.py). ``cancelled`` (no error) names the point where the
    client cancelled it on purpose (``--cancel``, load/workload/cancel.py).
    """

    target: str
    scenario: str
    worker: str
    seq: int
    t_intended: float
    t_sent: float
    t_done: float | None = None
    ttft: float | None = None
    e2e: float | None = None
    tpot: float | None = None
    itls: list[float] = field(default_factory=list)
    output_tokens: int | None = None  # from the server's usage (trusted)
    output_tokens_client: int = 0  # token-bearing chunks the client counted (cross-check only)
    prompt_tokens: int | None = None
    status: int | None = None
    error: RecordError | None = None
    error_message: str = ""
    kind: str = "chat"  # request kind within the scenario (chat, long, json, tools ...)
    request_id: str = ""  # sent as X-Request-Id: finds this request in the server's logs
    abandoned: bool = False  # the client hung up mid-stream on purpose (hang_up_after_tokens)
    retry_after_s: float | None = None  # a rate-limited answer's Retry-After, in seconds
    cancelled: str | None = (
        None  # --cancel: where the client cancelled it (load/workload/cancel.py)
    )
    # Reasoning phases (docs/metrics.md). ttfa is the first answer token (== ttft without
    # reasoning); the rest is written only when the stream carried reasoning.
    ttfa: float | None = None
    ttfr: float | None = None
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    reasoning_tokens_client: int = 0  # reasoning chunks the client counted
    itls_reasoning: list[float] = field(default_factory=list)
    itls_answer: list[float] = field(default_factory=list)
    # Production-like scenarios (load/workload/conversation.py); written only when set.
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    conversation: str | None = None
    turn: int | None = None  # 0-based turn of its conversation
    history_tokens: int | None = None  # tokens resent before this turn's new user message
    prefix_group: str | None = None  # which shared system prompt it opened with
    # Agent sessions (load/workload/agent.py); written only when set.
    session: str | None = None
    branch: int | None = None  # a subagent branch's index within its fork
    parent: str | None = None  # the fork a branch belongs to: "<parent session>@<turn>"
    context_tokens: int | None = None  # tokens this request carries (history + new content)
    tool_wait_s: float | None = None  # the tool's think time before this turn (or a fan-out)
    session_end: str | None = None  # on a session's last turn: done | context
    # --images (load/workload/images.py): how many, their WxH, the text's planned prompt tokens
    images: int | None = None
    image_size: str | None = None
    text_tokens: int | None = None
    # Where the time went (analysis/timings.py; written only when set): ms from t0 of each stamp,
    # whether the connection was new, what the server echoed and its own id for the request.
    stamps: dict[str, float] | None = None
    new_conn: bool | None = None
    request_id_echo: str | None = None  # the echoed request id header
    response_id: str | None = None  # the body's "id" (chatcmpl-...)
    model: str | None = (
        None  # the model it named, in a run split across models (load/workload/mix.py)
    )
    # What a probe reads off a request (probes/swap_probe.py, probes/drain.py); written only when
    # set. Probe records are the same type as a load run's, so they need no type of their own.
    served_model: str | None = None  # the model the answer named (an alias's swap)
    finish_reason: str | None = None  # the stream's last finish_reason (stop, length, abort ...)
    outcome: str | None = None  # the probe's own class of it (drain: finished / cut / hung ...)
    # What the engine said this request spent (analysis/server_timings.py): queue_ms,
    # prefill_ms, decode_ms, ttft_ms, prompt_n, predicted_n, those it reported.
    server_timings: dict[str, float] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def lag(self) -> float:
        """Schedule lag: actual minus intended send time (seconds, >= 0 in practice)."""
        return self.t_sent - self.t_intended

    @property
    def token_discrepancy(self) -> int | None:
        """Server usage minus client chunk count; None when the server sent no usage."""
        if self.output_tokens is None:
            return None
        return self.output_tokens - self.output_tokens_client

    @property
    def tokens(self) -> int:
        """Output tokens: the server's usage, else the client's chunk count (fallback)."""
        return self.output_tokens if self.output_tokens is not None else self.output_tokens_client

    def to_json(self) -> str:
        """One compact JSON line (no newline). Floats are rounded to microseconds.

        The ITL list is written by :func:`_floats6` and spliced in: this line is the generator's
        largest cost per request, and a ``round`` plus a float repr per token was most of it."""
        got = self._native(True)
        return self._reference_encoded()[1] if got is None else got[1]

    def as_dict(self) -> dict[str, Any]:
        """The record as its JSON line reads back (what the run's aggregate is fed)."""
        got = self._native(False)
        if got is None:
            head, tail = self._parts()
            return {**head, "itls": self.itls, **tail}
        return got[0]

    def dict_and_line(self) -> tuple[dict[str, Any], str]:
        """:meth:`as_dict` and :meth:`to_json` from one pass over the fields."""
        got = self._native(True)
        return self._reference_encoded() if got is None else got

    def _reference_encoded(self) -> tuple[dict[str, Any], str]:
        """The dict and line of any record through the JSON encoder: the reference, which
        ``_line.record`` (:meth:`_native`) is held to (tests/load/test_record_line.py)."""
        head, tail = self._parts()
        line = _encode(head)[:-1] + ',"itls":' + _floats6(self.itls) + "," + _encode(tail)[1:]
        return {**head, "itls": self.itls, **tail}, line

    def _native(self, line: bool) -> Any:
        """The dict and (``line``) the line from the C writer in one call, or None: not built, a
        record with reasoning phases (their lists are rounded value by value), or a value it
        leaves to the encoder. Its keys and values are ``_parts``', in order: rounding the
        timestamps and writing the floats' reprs were most of the line's cost (issue 46)."""
        if _line is None or self.ttfr is not None or self.reasoning_tokens_client:
            return None
        sent, out, client = self.t_sent, self.output_tokens, self.output_tokens_client
        values = (
            self.target,
            self.scenario,
            self.kind,
            self.worker,
            self.seq,
            self.request_id,
            self.t_intended,
            sent,
            self.t_done,
            sent - self.t_intended,
            self.ttft,
            self.e2e,
            self.tpot,
            self.itls,
            out,
            client,
            None if out is None else out - client,
            self.prompt_tokens,
            self.status,
            self.error,
            self.error_message[:300],
            self.abandoned,
            self.retry_after_s,
            self.ttfa,
            *_optional_values(self),
            self.reasoning_tokens,
        )
        return _line.record(_NATIVE_KEYS, values, _REQUIRED, _ROUNDED, _ITLS_AT, line)

    def _parts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        head: dict[str, Any] = {
            "target": self.target,
            "scenario": self.scenario,
            "kind": self.kind,
            "worker": self.worker,
            "seq": self.seq,
            "request_id": self.request_id,
            "t_intended": round(self.t_intended, 6),
            "t_sent": round(self.t_sent, 6),
            "t_done": None if self.t_done is None else round(self.t_done, 6),
            "lag": round(self.t_sent - self.t_intended, 6),
            "ttft": _r6(self.ttft),
            "e2e": _r6(self.e2e),
            "tpot": _r6(self.tpot),
        }
        tail: dict[str, Any] = {
            "output_tokens": self.output_tokens,
            "output_tokens_client": self.output_tokens_client,
            "token_discrepancy": self.token_discrepancy,
            "prompt_tokens": self.prompt_tokens,
            "status": self.status,
            "error": self.error,
            "error_message": self.error_message[:300],
            "abandoned": self.abandoned,
            "retry_after_s": self.retry_after_s,
            "ttfa": _r6(self.ttfa),
        }
        for key in _OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                tail[key] = value
        if self.reasoning_tokens is not None:
            tail["reasoning_tokens"] = self.reasoning_tokens
        if self.reasoning_tokens_client or self.ttfr is not None:
            tail["ttfr"] = _r6(self.ttfr)
            tail["reasoning_tokens_client"] = self.reasoning_tokens_client
            tail["itls_reasoning"] = [round(x, 6) for x in self.itls_reasoning]
            tail["itls_answer"] = [round(x, 6) for x in self.itls_answer]
        return head, tail

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


_OPTIONAL = (
    "cancelled",
    "cached_tokens",
    "conversation",
    "turn",
    "history_tokens",
    "prefix_group",
    "session",
    "branch",
    "parent",
    "context_tokens",
    "tool_wait_s",
    "session_end",
    "images",
    "image_size",
    "text_tokens",
    "stamps",
    "new_conn",
    "request_id_echo",
    "response_id",
    "model",
    "served_model",
    "finish_reason",
    "outcome",
    "server_timings",
)


_optional_values = operator.attrgetter(*_OPTIONAL)  # the optional fields in one call
# The C writer's keys (servecheck/records/_line.c record()): _parts' head, the ITLs, its fixed
# tail (always written), then the optional ones and reasoning_tokens (written when not None);
# the values at the _ROUNDED bits are written and kept as round(v, 6).
_FIXED = (
    "target",
    "scenario",
    "kind",
    "worker",
    "seq",
    "request_id",
    "t_intended",
    "t_sent",
    "t_done",
    "lag",
    "ttft",
    "e2e",
    "tpot",
    "itls",
    "output_tokens",
    "output_tokens_client",
    "token_discrepancy",
    "prompt_tokens",
    "status",
    "error",
    "error_message",
    "abandoned",
    "retry_after_s",
    "ttfa",
)
_NATIVE_KEYS = (*_FIXED, *_OPTIONAL, "reasoning_tokens")
_REQUIRED = len(_FIXED)
_ITLS_AT = _FIXED.index("itls")
_ROUNDED = sum(
    1 << _FIXED.index(k)
    for k in ("t_intended", "t_sent", "t_done", "lag", "ttft", "e2e", "tpot", "ttfa")
)


def cached_tokens(usage: dict[str, Any]) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` (prompt tokens the engine's prefix cache
    served), or None when the server does not report it (vLLM needs
    ``--enable-prompt-tokens-details``)."""
    details = usage.get("prompt_tokens_details")
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _r6(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


_encode = json.JSONEncoder(separators=(",", ":")).encode  # built once, not per dumps() call
_HEAD_FIELDS = re.compile(rb'"t_sent":([^,]+),.*?"ttft":([^,]+),')
_TOKEN_FIELDS = re.compile(rb'\],"output_tokens":([^,]+),"output_tokens_client":([^,]+),')


def progress_fields(line: bytes) -> dict[str, Any] | None:
    """What a run's progress line and its down watch take from an answered request's records
    line (``t_sent``, ``ttft``, the token counts; no error, not abandoned, not cancelled), read
    without decoding the rest; None for any other line (decode it whole).

    The command tails every line its Locust children write, once a second; decoding them whole
    (mostly the ITL list) cost it about 30 us a request, in one burst a second on the generator's
    core, long enough for the reader thread to miss a token's own read (issue 46). The layout is
    :meth:`RequestRecord.to_json`'s: the head's keys, the ITLs, then the fixed tail's, so the
    first ``"name":`` of each is the top level's (a quote inside a string is escaped; nested
    objects come after). tests/records/test_progress_fields.py holds it to ``json.loads``."""
    head = _HEAD_FIELDS.search(line)
    tail = _TOKEN_FIELDS.search(line, head.end()) if head else None
    if head is None or tail is None:
        return None
    at = line.find(b'"error":', tail.end())
    at_abandoned = line.find(b'"abandoned":', at)
    if (
        at < 0
        or not line.startswith(b"null,", at + 8)
        or at_abandoned < 0
        or not line.startswith(b"false", at_abandoned + 12)
        or b'"cancelled":' in line
    ):
        return None
    try:
        ttft = head.group(2)
        out = tail.group(1)
        return {
            "t_sent": float(head.group(1)),
            "ttft": None if ttft == b"null" else float(ttft),
            "output_tokens": None if out == b"null" else int(out),
            "output_tokens_client": int(tail.group(2)),
            "error": None,
            "abandoned": False,
        }
    except ValueError:
        return None


# progress_batch's fields, each found by its key alone (a regex with a literal prefix is a fast
# search; one pattern over the whole line crawled the ITL list at 20 us a line)
_SENT_ALL = re.compile(rb'"t_sent":([^,\n]+),')
_TTFT_ALL = re.compile(rb'"ttft":([^,\n]+),')
_TOKENS_ALL = re.compile(rb'\],"output_tokens":([^,\n]+),"output_tokens_client":([^,\n]+),')
_ONCE_A_LINE = (b'"t_sent":', b'"ttft":', b'],"output_tokens":', b'"error":', b'"abandoned":')
_PLAIN_MARKS = (b'"error":null,', b'"abandoned":false')


def progress_batch(
    data: bytes,
) -> tuple[list[bytes], list[bytes], list[tuple[bytes, bytes]]] | None:
    """:func:`progress_fields` of every line of ``data`` (whole lines, each ending in a newline)
    at once, as bytes: ``(t_sent per line, ttft per line, (output_tokens,
    output_tokens_client) per line)``, when every line is a plain answer; None when any is not
    (read those a line at a time).

    A key cannot appear inside a JSON string unescaped, so when each key read occurs exactly
    once a line, the i-th match of each is line i's top level, as progress_fields reads it; and
    when ``"error":null`` and ``"abandoned":false`` occur once a line too, every line is an
    answer. The command's tail reads a second of lines in a few calls, not one call a line
    (issue 46)."""
    n = data.count(b"\n")
    if n == 0 or b'"cancelled":' in data:
        return None
    if any(data.count(key) != n for key in (*_ONCE_A_LINE, *_PLAIN_MARKS)):
        return None
    sent, ttft, tokens = _SENT_ALL.findall(data), _TTFT_ALL.findall(data), _TOKENS_ALL.findall(data)
    if not len(sent) == len(ttft) == len(tokens) == n:
        return None
    return sent, ttft, tokens


_ARRAY_FORMATS: dict[int, str] = {}


def _floats6_py(xs: list[float]) -> str:
    """A JSON array of finite floats rounded to 6 decimals (the same values ``round(x, 6)`` gives),
    made by one ``%`` call with a format cached per length instead of a round and a repr each.
    (The reference for ``_line.floats6``, which :func:`_floats6` uses where it is built.)"""
    n = len(xs)
    if n == 0:
        return "[]"
    fmt = _ARRAY_FORMATS.get(n)
    if fmt is None:
        fmt = "[" + ",".join(["%.6f"] * n) + "]"
        if len(_ARRAY_FORMATS) < 4096:
            _ARRAY_FORMATS[n] = fmt
    return fmt % tuple(xs)


def rounded6_py(values: Iterable[float]) -> list[float]:
    """``round(v, 6)`` of each value (the reference for ``_line.rounded6``)."""
    return [round(v, 6) for v in values]


def rounded6(values: Iterable[float]) -> list[float]:
    """``round(v, 6)`` of each value, in C where it is built (a checkpoint's reservoirs: issue
    46); the same floats as :func:`rounded6_py`."""
    return rounded6_py(values) if _line is None else _line.rounded6(values)


def rounded6_json(values: list[float]) -> str:
    """The JSON text of :func:`rounded6` (as ``json.dumps`` with the records' separators writes
    it), in C where it is built and the values are floats: the floats' reprs were most of a
    checkpoint's encoding (issue 46)."""
    text = None if _line is None else _line.rounded6_json(values)
    return _encode(rounded6_py(values)) if text is None else text


def _floats6(xs: list[float]) -> str:
    """:func:`_floats6_py`'s text, from the C writer where it is built and takes the values (a
    list or tuple of floats; it leaves anything else to Python)."""
    if _line is not None:
        text: str | None = _line.floats6(xs)
        if text is not None:
            return text
    return _floats6_py(xs)


class RecordWriter:
    """Append-only JSONL writer; every line reaches the kernel before :meth:`write` returns.

    The file is opened in append mode, so two writers never clobber each other's lines and a
    restarted worker keeps what its predecessor wrote. ``fsync`` is not called: the goal is to
    survive the death of *this* process (page cache survives it), not a power cut.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        self.count = 0

    def write(self, record: RequestRecord) -> str:
        """Write one record as one line and flush it; returns the line (without its newline)."""
        line = record.to_json()
        self.write_line(line)
        return line

    def write_line(self, line: str) -> None:
        """Write a record's line (:meth:`RequestRecord.to_json`) and flush it."""
        fh = self._fh
        if fh is None:
            raise ValueError(f"record writer for {self.path} is closed")
        fh.write(line + "\n")  # line buffered: one write(2) per line
        self.count += 1

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(slots=True)
class ReadResult:
    """Records read from one or more files, plus the lines that could not be parsed."""

    records: list[dict[str, Any]]
    bad_lines: int = 0
    per_file: dict[str, int] = field(default_factory=dict)


def iter_lines(path: str | os.PathLike[str]) -> Iterator[dict[str, Any] | None]:
    """Yield each line of a JSONL file parsed, or None for a line that is not valid JSON
    (typically a last line cut short by a killed process)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                yield None
                continue
            yield obj if isinstance(obj, dict) else None


def read_files(paths: Iterable[str | os.PathLike[str]]) -> ReadResult:
    """Read and parse record files, tolerating a broken last line in each."""
    result = ReadResult(records=[])
    for p in paths:
        n = 0
        for obj in iter_lines(p):
            if obj is None:
                result.bad_lines += 1
            else:
                result.records.append(obj)
                n += 1
        result.per_file[str(p)] = n
    return result


def worker_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The per-worker record files of a run directory, in a stable order."""
    return sorted(Path(run_dir).glob(RECORD_GLOB))


def refuse_used_run_dir(run_dir: str | os.PathLike[str]) -> None:
    """Raise :class:`UsageError` when ``run_dir`` already holds a run's records or summary.

    Workers append to ``records-<worker>.jsonl``; a second run with the same ``--run-id`` would
    add to the first one's records and summarise both (totals doubled), so it is refused before
    anything starts."""
    path = Path(run_dir)
    used = worker_files(path) or [
        p for p in (path / MERGED_NAME, path / RECORDS_PARQUET, path / "summary.json") if p.exists()
    ]
    if used:
        raise SpecError(
            "run folder {path} already holds a run ({name}); give a new {run_id} "
            "or remove the folder",
            path=path,
            name=used[0].name,
        )


@dataclass(slots=True)
class MergeResult:
    """What :func:`merge_records` wrote: the merged file, its count and the count per worker file."""

    path: Path
    count: int = 0
    bad_lines: int = 0
    per_file: dict[str, int] = field(default_factory=dict)

    def iter_records(self) -> Iterator[dict[str, Any]]:
        """The merged records one at a time, in send-time order (nothing is held)."""
        for obj in iter_lines(self.path):
            if obj is not None:
                yield obj


def merge_records(
    run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None
) -> MergeResult:
    """Merge every worker's file into ``records.jsonl``, sorted by send time.

    Two passes: index each valid line by (send time, worker, seq) and its byte range, sort the
    index, then copy the lines in that order. Memory is the index (~300 bytes a record), not the
    records. The result carries the count per worker file, so a caller can check that the merged
    total equals the sum of the workers.
    """
    run_dir = Path(run_dir)
    target = Path(out) if out is not None else run_dir / MERGED_NAME
    files = worker_files(run_dir)
    result = MergeResult(path=target)
    index: list[tuple[float, str, int, int, int, int]] = []
    for fi, p in enumerate(files):
        n = 0
        offset = 0
        with open(p, "rb") as fh:
            for line in fh:
                size = len(line)
                if line.strip():
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        obj = None
                    if isinstance(obj, dict):
                        index.append(
                            (
                                float(obj.get("t_sent") or 0.0),
                                str(obj.get("worker")),
                                int(obj.get("seq") or 0),
                                fi,
                                offset,
                                size,
                            )
                        )
                        n += 1
                    else:
                        result.bad_lines += 1
                offset += size
        result.per_file[str(p)] = n
    index.sort()
    tmp = target.with_suffix(".jsonl.tmp")
    handles = [open(p, "rb") for p in files]  # noqa: SIM115 - closed in the finally below
    try:
        with open(tmp, "wb") as out_fh:
            for *_, fi, offset, size in index:
                fh = handles[fi]
                fh.seek(offset)
                line = fh.read(size)
                out_fh.write(line if line.endswith(b"\n") else line + b"\n")
    finally:
        for fh in handles:
            fh.close()
    os.replace(tmp, target)
    result.count = len(index)
    return result


def to_dataframe(records: Iterable[dict[str, Any]] | str | os.PathLike[str]) -> Any:
    """Records (dicts, a JSONL path, or a ``records.parquet`` path) as a pandas DataFrame, one
    row per request; a Parquet file is read by pyarrow into the same columns (seconds).

    Adds ``ok`` (bool: no error, and not a stream the client dropped on purpose, whose E2E is
    only when it hung up), ``lag`` (if absent) and ``tokens`` (usage, else the client count).
    pandas is imported here, not at module import, to keep the writer path light.
    """
    import pandas as pd

    if isinstance(records, str | os.PathLike) and str(records).endswith(".parquet"):
        from servecheck.records.columns import parquet_frame

        df = parquet_frame(records)
    else:
        if isinstance(records, str | os.PathLike):
            rows = read_files([records]).records
        else:
            rows = list(records)
        df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["ok"] = df["error"].isna()
    if "abandoned" in df:
        df["ok"] &= ~df["abandoned"].fillna(False).astype(bool)
    if "lag" not in df:
        df["lag"] = df["t_sent"] - df["t_intended"]
    df["tokens"] = df["output_tokens"].fillna(df["output_tokens_client"])
    return df
