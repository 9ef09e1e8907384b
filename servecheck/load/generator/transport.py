"""Records over Locust's own channel: workers send batches, the master alone writes the run folder.

Why: a distributed run used to meet only through files, so workers on other machines needed a
shared directory, and without one the master silently reported only what it could see. Now each
worker hands its finished-request records to the master through Locust's worker messaging (the
same ZeroMQ connection Locust uses for its stats), and the master appends them to
``records-<worker>.jsonl`` in its own run folder. Nothing here imports locust: the worker side
gets a ``send(msg_type, data)`` callable and the master side is fed the messages' data by
``locust_user.py``, so the accounting is testable without a Locust process.

Worker side (:class:`BatchSender`): every record line also goes to the worker's own append-only
copy (``local/records-<worker>.jsonl`` in the worker's run folder, flushed per line: it survives
``kill -9``); the sender buffers the same lines and sends a batch every
:data:`BATCH_INTERVAL_S` or :data:`BATCH_RECORDS` records, zlib-compressed when it is larger than
:data:`COMPRESS_OVER` bytes. Each batch carries its number, its record count and how many
requests the worker had sent so far. At the end the worker sends a done message with its totals
(records, ok, tokens, batches), a SHA-256 over every line it sent, in order, its HDR
histograms (TTFT, ITL, E2E) and its streaming summary (``analysis/aggregate.py``), which the master
writes as ``aggregate-<worker>.json``.

Master side (:class:`Collector`): writes each batch as it arrives and keeps a ledger per worker
(keyed by Locust's node id, so two workers with the same name on different hosts stay apart).
A worker is counted from its first batch, so one that joins late is simply counted from its
first request. A worker that disconnects or is killed is ``lost`` once Locust has had it missing
(no heartbeat) for :data:`LOST_AFTER_S`, or :data:`QUIT_GRACE_S` after it left without a done
message: what it sent up to its last batch is kept, the requests it had sent by then without a record are counted as lost, and
:func:`transport_reasons` makes the run inconclusive. For a worker that finished, the master's
count, ok count, tokens and digest must equal the worker's own, or the run is not trusted.
``transport.json`` in the run folder holds the ledgers; ``summary.json`` carries them under
``records.transport``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from servecheck.records.record import LOCAL_DIR

__all__ = [
    "BATCH_INTERVAL_S",
    "BATCH_RECORDS",
    "BatchSender",
    "Collector",
    "DONE_MESSAGE",
    "LOCAL_DIR",
    "LOST_AFTER_S",
    "QUIT_GRACE_S",
    "RECORDS_MESSAGE",
    "TRANSPORT_NAME",
    "decode_batch",
    "encode_batch",
    "read_transport",
    "transport_reasons",
]

RECORDS_MESSAGE = "servecheck_records"
DONE_MESSAGE = "servecheck_done"
TRANSPORT_NAME = "transport.json"
BATCH_RECORDS = 256
BATCH_INTERVAL_S = 0.25
COMPRESS_OVER = 1024  # below this zlib saves little and costs a call per batch
# The master takes a worker for lost when Locust has had it missing (no heartbeat) this long, or
# this long after it left without a done message; a starved machine can miss a few heartbeats.
LOST_AFTER_S = 10.0
QUIT_GRACE_S = 2.0


def encode_batch(payload: bytes) -> tuple[bytes, str]:
    """The bytes to send and their encoding name (``zlib`` or ``raw``)."""
    if len(payload) > COMPRESS_OVER:
        return zlib.compress(payload, 1), "zlib"
    return payload, "raw"


def decode_batch(data: bytes, enc: str) -> bytes:
    """Inverse of :func:`encode_batch`; an unknown encoding is an error, never a guess."""
    if enc == "zlib":
        return zlib.decompress(data)
    if enc == "raw":
        return bytes(data)
    raise ValueError(f"unknown batch encoding {enc!r}")


# ------------------------------------------------------------------ worker side


@dataclass(slots=True)
class BatchSender:
    """Buffers a worker's record lines and sends them to the master in numbered batches.

    ``send`` is ``runner.send_message`` bound to :data:`RECORDS_MESSAGE` by the caller; it is
    only called from :meth:`flush`, so the cost per record is one list append.
    """

    worker: str
    send: Callable[[dict[str, Any]], None]
    max_records: int = BATCH_RECORDS
    lines: list[str] = field(default_factory=list)
    batches: int = 0
    records: int = 0
    bytes_raw: int = 0
    bytes_sent: int = 0
    finished: int = 0  # requests this worker finished (records kept or not: --records)
    _told: int = 0  # ... as of the last batch
    _digest: Any = field(default_factory=hashlib.sha256)

    def add(self, line: str) -> bool:
        """Queue one record line (no newline); True when a batch is full and should be flushed."""
        self.lines.append(line)
        return len(self.lines) >= self.max_records

    def flush(self, sent: int) -> None:
        """Send what is queued, :attr:`max_records` lines a batch (nothing when nothing is queued
        and no request finished since the last batch). ``sent``: requests this worker started."""
        if not self.lines and self.finished == self._told:
            return
        queued, self.lines = self.lines, []
        for i in range(0, max(1, len(queued)), self.max_records):
            self._send(queued[i : i + self.max_records], sent)

    def _send(self, lines: list[str], sent: int) -> None:
        self._told = self.finished
        payload = ("\n".join(lines) + "\n").encode() if lines else b""
        n = len(lines)
        self._digest.update(payload)
        data, enc = encode_batch(payload)
        self.batches += 1
        self.records += n
        self.bytes_raw += len(payload)
        self.bytes_sent += len(data)
        self.send(
            {
                "worker": self.worker,
                "batch": self.batches,
                "count": n,
                "enc": enc,
                "data": data,
                "sent": sent,
                "finished": self.finished,
            }
        )

    def totals(self) -> dict[str, Any]:
        """What the done message says this worker sent (compared by the master)."""
        return {
            "records": self.records,
            "batches": self.batches,
            "sha256": self._digest.hexdigest(),
            "bytes_raw": self.bytes_raw,
            "bytes_sent": self.bytes_sent,
        }


# ------------------------------------------------------------------ master side


@dataclass(slots=True)
class WorkerLedger:
    """What the master received from one worker, and what that worker said it sent."""

    worker: str  # the worker's own name (w<index>-<pid>)
    node: str  # Locust's node id (host + uuid): unique across hosts
    file: str  # records file in the master's run folder
    state: str = "running"  # running | done | lost
    batches: int = 0
    records: int = 0
    ok: int = 0
    tokens: int = 0
    bad_lines: int = 0
    missing_batches: int = 0  # batch numbers skipped (should never happen on one connection)
    last_sent: int = 0  # requests the worker had started at its last batch
    finished: int = 0  # ... and had finished (a record kept or not: --records)
    first_request_at: float | None = None  # t_sent of its first record (a late joiner's start)
    first_batch_at: float | None = None
    last_batch_at: float | None = None
    lost_at: float | None = None
    lost_requests: int = 0  # sent by its last batch, no record received
    reported: dict[str, Any] = field(default_factory=dict)  # the worker's done totals
    verified: bool | None = None  # the master's count/ok/tokens/digest equal the worker's
    mismatch: list[str] = field(default_factory=list)
    dataset: str | None = None  # the worker's dataset_fingerprint, from its done message
    digest: Any = field(default_factory=hashlib.sha256, repr=False)

    def as_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "digest"}
        d["sha256"] = self.digest.hexdigest()
        return d


class Collector:
    """The master's side: appends each worker's batches to its records file, keeps the ledgers.

    Not thread-safe: Locust calls message handlers on its one gevent loop, one at a time.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        expect_workers: int = 1,
        dataset: str | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.expect_workers = max(1, expect_workers)
        self.dataset = dataset  # the master's dataset_fingerprint: every worker must have read it
        self.ledgers: dict[str, WorkerLedger] = {}
        self._files: dict[str, IO[bytes]] = {}

    # -- messages ---------------------------------------------------------------

    def _ledger(self, node: str, worker: str) -> WorkerLedger:
        led = self.ledgers.get(node)
        if led is None:
            name = worker
            if any(x.worker == worker for x in self.ledgers.values()):
                name = f"{worker}-{hashlib.sha1(node.encode()).hexdigest()[:6]}"
            led = WorkerLedger(worker=name, node=node, file=f"records-{name}.jsonl")
            self.ledgers[node] = led
        return led

    def on_batch(self, node: str, data: dict[str, Any]) -> WorkerLedger:
        """One batch from a worker: append its lines to the worker's file and account for them."""
        led = self._ledger(node, str(data.get("worker") or node))
        payload = decode_batch(data["data"], str(data.get("enc", "raw")))
        batch = int(data.get("batch") or 0)
        if batch != led.batches + 1:
            led.missing_batches += max(0, batch - led.batches - 1)
        led.batches = max(led.batches, batch)
        led.digest.update(payload)
        now = time.time()
        if led.first_batch_at is None:
            led.first_batch_at = now
        led.last_batch_at = now
        led.last_sent = max(led.last_sent, int(data.get("sent") or 0))
        led.finished = max(led.finished, int(data.get("finished") or 0))
        for line in payload.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                led.bad_lines += 1
                continue
            led.records += 1
            if led.first_request_at is None:
                led.first_request_at = rec.get("t_sent")
            led.tokens += int(rec.get("output_tokens") or rec.get("output_tokens_client") or 0)
            if rec.get("error") is None:
                led.ok += 1
        if led.state == "lost":
            # A late batch from a worker taken for lost (a stalled network): it is back.
            led.state, led.lost_at = "running", None
        fh = self._files.get(node)
        if fh is None:
            fh = open(self.run_dir / led.file, "ab")  # noqa: SIM115 - closed in close()
            self._files[node] = fh
        fh.write(payload)
        fh.flush()
        return led

    def on_done(self, node: str, data: dict[str, Any]) -> WorkerLedger:
        """A worker's done message: check its totals against what arrived, keep its info."""
        led = self._ledger(node, str(data.get("worker") or node))
        led.state = "done"
        led.lost_at = None
        led.lost_requests = 0
        totals = dict(data.get("totals") or {})
        led.reported = {k: totals.get(k) for k in ("records", "batches", "sha256", "ok", "tokens")}
        led.reported["sent"] = data.get("sent")
        led.reported["complete"] = bool(data.get("complete", True))
        led.mismatch = []
        for key, mine in (
            ("records", led.records),
            ("batches", led.batches),
            ("ok", led.ok),
            ("tokens", led.tokens),
            ("sha256", led.digest.hexdigest()),
        ):
            theirs = totals.get(key)
            if theirs is not None and theirs != mine:
                led.mismatch.append(f"{key}: worker {theirs}, master {mine}")
        if led.bad_lines:
            led.mismatch.append(f"{led.bad_lines} lines the master could not parse")
        led.verified = not led.mismatch
        led.dataset = data.get("dataset")
        agg = data.get("aggregate")
        if isinstance(agg, dict):  # the worker's streaming summary (analysis/aggregate.py)
            path = self.run_dir / f"aggregate-{led.worker}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({**agg, "final": True}), encoding="utf-8")
            os.replace(tmp, path)
        info = data.get("info")
        if isinstance(info, dict):
            info = {**info, "worker": led.worker, "node": node}
            path = self.run_dir / f"worker-{led.worker}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(info), encoding="utf-8")
            os.replace(tmp, path)
        self.write()
        return led

    def on_lost(self, node: str) -> WorkerLedger | None:
        """A worker left without its done message (killed, disconnected, missing heartbeats)."""
        led = self.ledgers.get(node)
        if led is None or led.state != "running":
            return None
        led.state = "lost"
        led.lost_at = time.time()
        led.lost_requests = max(0, led.last_sent - max(led.records, led.finished))
        led.verified = False
        self.write()
        return led

    # -- state ------------------------------------------------------------------

    def running(self) -> list[WorkerLedger]:
        return [x for x in self.ledgers.values() if x.state == "running"]

    def finished(self, connected: int) -> bool:
        """True when every worker that sent anything is done or lost, and at least as many have
        finished as were expected (or are still connected, whichever is more)."""
        ended = [x for x in self.ledgers.values() if x.state != "running"]
        return not self.running() and len(ended) >= max(self.expect_workers, connected)

    def report(self) -> dict[str, Any]:
        workers = {x.worker: x.as_dict() for x in self.ledgers.values()}
        lost = [x for x in self.ledgers.values() if x.state == "lost"]
        return {
            "channel": "locust",
            "expect_workers": self.expect_workers,
            "dataset": self.dataset,
            "workers": workers,
            "received": sum(x.records for x in self.ledgers.values()),
            "lost_workers": sorted(x.worker for x in lost),
            "requests_lost": sum(x.lost_requests for x in lost),
            "verified": bool(self.ledgers)
            and all(x.verified for x in self.ledgers.values())
            and len(self.ledgers) >= self.expect_workers,
        }

    def write(self) -> Path:
        """``transport.json`` in the run folder (atomic replace: a reader never sees half)."""
        path = self.run_dir / TRANSPORT_NAME
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.report(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    def close(self) -> None:
        """Mark every worker still running as lost (the master is ending without its done
        message), write the report and close the files."""
        for node in [x.node for x in self.running()]:
            self.on_lost(node)
        self.write()
        for fh in self._files.values():
            fh.close()
        self._files.clear()


# ------------------------------------------------------------------ the verdict's side


def read_transport(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The master's ledgers of a run (None for a run without workers on the channel)."""
    path = Path(run_dir) / TRANSPORT_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _dataset_reason(worker: str, master: str | None, theirs: str | None) -> str:
    if theirs is None:
        return (
            f"worker {worker} ran without the master's dataset, so it sent synthetic prompts: "
            "start every worker with the master's dataset file"
        )
    if master is None:
        return (
            f"worker {worker} read a dataset the master was not given ({theirs[:19]}): give the "
            "master and every worker the same dataset file, or none"
        )
    return (
        f"worker {worker} read another dataset file than the master ({theirs[:19]}, master "
        f"{master[:19]}): give every worker the same file"
    )


def transport_reasons(report: dict[str, Any]) -> list[str]:
    """Why a run's records cannot be trusted as the whole run: lost workers, workers whose totals
    differ from what the master received, workers that read another dataset than the master (or
    none), fewer workers than expected. Empty when all is well."""
    reasons: list[str] = []
    workers = report.get("workers") or {}
    for name, w in sorted(workers.items()):
        if w.get("state") == "lost":
            reasons.append(
                f"worker {name} disconnected mid-run: its {w.get('records', 0)} records up to "
                f"batch {w.get('batches', 0)} are kept, at least {w.get('lost_requests', 0)} "
                "requests it had sent are lost"
            )
        elif w.get("mismatch"):
            reasons.append(
                f"worker {name}: what the master received differs from what it sent ("
                + "; ".join(w["mismatch"])
                + ")"
            )
        elif w.get("missing_batches"):
            reasons.append(f"worker {name}: {w['missing_batches']} record batches never arrived")
        elif (w.get("reported") or {}).get("complete") is False:
            reasons.append(f"worker {name} stopped before reaching its bounds")
        if w.get("state") == "done" and w.get("dataset") != report.get("dataset"):
            reasons.append(_dataset_reason(name, report.get("dataset"), w.get("dataset")))
    expected = int(report.get("expect_workers") or 0)
    if len(workers) < expected:
        reasons.append(f"{expected} workers expected, {len(workers)} sent records")
    return reasons
