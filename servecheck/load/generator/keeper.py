"""Where a finished request goes in a Locust process (no locust import: testable alone).

Every record feeds the process's :class:`~servecheck.analysis.aggregate.Aggregate`, which is what
the summary is made of. Its line then goes where ``--records`` says:

* ``all``: appended to ``records-<worker>.jsonl``, flushed per line (it survives ``kill -9``);
* ``sample:N``: into a uniform sample of N lines (a reservoir), written when the process ends;
* ``none``: nowhere.

A distributed worker (``sender`` given) sends what it keeps to the master (``load/generator/transport.py``):
``all``, every line as it finishes (and its own append-only copy in ``local/``); ``sample:N``, its
sample when it ends; ``none``, nothing but its count of finished requests, so the master can still
tell requests lost with a worker from requests whose records were not kept. The master's ledger
checks the lines it received against the worker's totals of the lines it sent, and the master
samples the workers' samples down to N (``records/parquet.py`` ``keep_records``). The aggregate's
state is written every :data:`CHECKPOINT_S` seconds (``final: false``) and at the end, so a
process killed mid-run leaves what it had measured up to its last checkpoint, and says so.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from servecheck.analysis.aggregate import Aggregate, Rule, aggregate_path, is_plain, sample_size
from servecheck.load.generator.apis import API_PATHS
from servecheck.load.generator.transport import BatchSender
from servecheck.records.record import RATE_LIMITED, RecordWriter, RequestRecord

__all__ = ["CHECKPOINT_S", "RecordKeeper", "request_event"]

CHECKPOINT_S = 10.0


class RecordKeeper:
    """One process's records: the aggregate, the file or sample, the master's batches."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        worker: str,
        mode: str,
        rule: Rule,
        *,
        seed: int = 0,
        sender: BatchSender | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self.worker = worker
        self.sender = sender
        self.mode = mode
        self.agg = Aggregate(rule, seed=seed)
        self.path = self.out_dir / f"records-{worker}.jsonl"
        self.writer = RecordWriter(self.path) if self.mode == "all" else None
        self._sample_n = sample_size(self.mode)
        self._sample: list[str] = []
        self._rng = random.Random(seed)
        self.count = 0
        self.ok = 0  # over the lines the master gets, as its ledger counts them
        self.tokens = 0

    def begin(self, t_first_send: float) -> None:
        self.agg.begin(t_first_send)

    def keep(self, rec: RequestRecord) -> bool:
        """Record one finished request; True when the master's batch is full (flush it)."""
        self.count += 1
        if self.sender is not None:
            self.sender.finished += 1
        # A plain record (the common answer) takes the aggregate's short path (issue 46).
        add = self.agg.add_plain if is_plain(rec) else self.agg.add
        if self.writer is not None:
            d, line = rec.dict_and_line()
            add(d)
            self.writer.write_line(line)
            self._counted(d)
            return self.sender is not None and self.sender.add(line)
        n = self._sample_n
        if n is not None and len(self._sample) < n:
            d, line = rec.dict_and_line()
            add(d)
            self._sample.append(line)
            return False
        add(rec.as_dict())
        if n is not None:
            j = self._rng.randrange(self.count)
            if j < n:
                self._sample[j] = rec.to_json()
        return False

    def _counted(self, d: dict[str, Any]) -> None:
        self.ok += d.get("error") is None
        self.tokens += int(d.get("output_tokens") or d.get("output_tokens_client") or 0)

    def totals(self) -> dict[str, Any]:
        """The done message's ok count and tokens (every record, as the master's ledger counts
        them) and the measured requests' HDR histograms, from the aggregate."""
        hists = {m: self.agg.whole.hist[m] for m in ("ttft", "itl", "e2e")}
        return {
            "ok": self.ok,
            "tokens": self.tokens,
            "histograms": {m: h.encode() for m, h in hists.items()},
            "counts": {m: h.count for m, h in hists.items()},
        }

    def checkpoint(self, final: bool = False) -> Path:
        """Write the aggregate's state (atomically)."""
        return self.agg.write(aggregate_path(self.out_dir, self.worker), final=final)

    def close(self) -> Path:
        """The sample's file (``sample:N``; a distributed worker also queues it for the master,
        who gets it before the done message), the final aggregate; the records file closed."""
        if self.writer is not None:
            self.writer.close()
        elif self._sample_n is not None:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(line + "\n" for line in self._sample), encoding="utf-8")
            os.replace(tmp, self.path)
            if self.sender is not None:
                for line in self._sample:
                    self._counted(json.loads(line))
                    self.sender.add(line)
        return self.checkpoint(final=True)


def _own_row(rec: RequestRecord) -> str | None:
    """What a request that did not end as an ordinary answer or failure is called in Locust's
    table: a row of its own, so that its time (until the shed answer, the hang-up) stays out of
    the answers' row; None for the rest."""
    if rec.error is not None:
        return "rate-limited" if rec.error == RATE_LIMITED else None
    if rec.cancelled:
        return "cancelled"
    return "abandoned" if rec.abandoned else None


def request_event(rec: RequestRecord, api: str, scenario: str) -> dict[str, Any]:
    """Locust's request event for one finished request: ONE per request, so that Locust's own
    header and Statistics tab (RPS, failures) count requests as the records do (issue 41: two
    events a request, "TTFT chat" and "E2E chat", doubled its RPS and cut its failure share).

    Typed by the scenario and named after the API's path; ``response_time`` is the E2E in ms (a
    failure's, until it failed); ``response_length`` 0, since Locust's size column is bytes and
    the reader counts tokens, not bytes. TTFT, ITL and tokens are in the LLM tab and in
    ``servecheck_stats.csv``. A rate-limited request is a failure in Locust's share (the server
    did not serve it) under its own name; servecheck's summary counts it apart from the failed."""
    own = _own_row(rec)
    path = API_PATHS.get(api, api)
    if rec.error is None and rec.e2e is not None:
        took = rec.e2e
    else:
        took = max(0.0, (rec.t_done or rec.t_sent) - rec.t_sent)
    return {
        "request_type": scenario,
        "name": path if own is None else f"{path} ({own})",
        "response_time": took * 1000.0,
        "response_length": 0,
        "exception": (
            None if rec.error is None else RuntimeError(f"{rec.error}: {rec.error_message[:120]}")
        ),
        "context": {},
    }
