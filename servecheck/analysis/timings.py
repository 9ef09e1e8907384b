"""Where a request's time went, from the client: connect, write, headers, first body byte, first
token, first answer token, last token; the run's percentiles of each phase; the slowest requests
with the ids that find them in the engine's log (docs/metrics.md, "TTFT decomposition").

Per request (:func:`record_stamps`, called once when a request ends) the readers' stamps
(``WireResult``: the reactor's kernel receive stamps, the blocking reader's clock after each read,
both on ``perf_counter``) become the record's ``stamps``: milliseconds from the request's start
(t0, just before its first byte went to the socket), plus the durations of a new connection's
TCP connect and TLS handshake, which come before t0. It costs a handful of subtractions and one
regular-expression search over at most 512 bytes, per request; nothing per token.

Per run (:class:`TimingsTally`, fed each record by the statistics pass, so the merged file is not
read again) the summary's ``timings`` section: HDR percentiles of each phase, new vs reused
connections, how many answers echoed the request id, and the N slowest requests by TTFT and E2E.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servecheck.analysis.sections import (
    Connections,
    PhaseMs,
    ServerCheck,
    ServerTimings,
    Slowest,
    SlowRequest,
    TimingsSection,
)
from servecheck.analysis.server_timings import CHECKS, SERVER_PHASES, violations
from servecheck.analysis.stats import Histogram, add_fields, pack_fields, unpack_fields
from servecheck.analysis.typed_json import from_json, to_json
from servecheck.errors import SpecError
from servecheck.records.record import REQUEST_ID

if TYPE_CHECKING:
    # Types only: the generator fills records with this module's stamps, not the other way.
    from servecheck.load.generator.stream import StreamState
    from servecheck.load.generator.wire import WireResult
    from servecheck.records.record import RequestRecord

SLOWEST_N = 10
OFF = ("off", "none", "no", "")
# RFC 9110 field-name (a token): anything else could split the request head.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_BODY_ID = re.compile(rb'"id"\s*:\s*"([^"\\]{1,200})"')

# (key in summary.json, what it spans) in the order they happen; docs/metrics.md defines each.
PHASES: tuple[tuple[str, str], ...] = (
    ("connect", "TCP connect of a new connection (before t0)"),
    ("tls", "TLS handshake of a new https connection (before t0)"),
    ("send", "t0 to request written"),
    ("wait_headers", "request written to response headers"),
    ("headers_to_body", "response headers to first body byte"),
    ("body_to_token", "first body byte to first token"),
    ("token_to_answer", "first token to first answer token (reasoning streams)"),
    ("decode", "first token to last token"),
    # The engine's own, per request, where it sent them (analysis/server_timings.py).
    *((key, what) for key, _field, what in SERVER_PHASES),
)
# The parts that add up to TTFT: send + wait_headers + headers_to_body + body_to_token.
TTFT_PARTS = ("send", "wait_headers", "headers_to_body", "body_to_token")


def request_id_header(value: str | None) -> str | None:
    """The request id header to send: a header name, or None for ``off`` (never sent).

    Raises :class:`SpecError` for a name that is not an HTTP token (it would break the request
    head)."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() in OFF:
        return None
    if not _TOKEN.fullmatch(text):
        raise SpecError(
            "{request_id_header} {value!r}: a header name (letters, digits, '-'), or 'off'",
            value=value,
        )
    return text


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def record_stamps(
    rec: RequestRecord,
    res: WireResult,
    st: StreamState,
    t0: float,
    header: str | None = REQUEST_ID,
) -> None:
    """Fill ``rec.stamps``, ``new_conn``, ``request_id_echo`` and ``response_id`` from one
    exchange sent at ``t0`` (the reader's clock). A request that never went out has none."""
    if not res.t_sent:
        return
    rec.new_conn = res.new_conn
    stamps: dict[str, float] = {}
    if res.new_conn:
        stamps["connect"] = _ms(res.connect_s)
        if res.tls_s:
            stamps["tls"] = _ms(res.tls_s)
    written = res.t_written
    if written and res.t_headers and res.t_headers < written:
        # The kernel stamped the answer's arrival before the writer read its clock after the
        # send returned (a fast server on loopback): the request was written by then.
        written = res.t_headers
    if written:
        stamps["written"] = _ms(written - t0)
    if res.t_headers:
        stamps["headers"] = _ms(res.t_headers - t0)
    # Reads counted without parsing are token chunks; a body whose first read was one begins at
    # its first token (the one-shot stamp in ``ResponseParser`` saw only a later read).
    body, first = res.t_body, st.t_first
    if first is not None and (not body or first < body):
        body = first
    if body:
        stamps["body"] = _ms(body - t0)
    if st.token_times:
        stamps["last_token"] = _ms(st.token_times[-1] - t0)
    rec.stamps = stamps
    if header is not None:
        echo = res.headers.get(header.lower())
        if echo:
            rec.request_id_echo = echo[:200]
    if res.first_body:
        m = _BODY_ID.search(res.first_body)
        if m:
            rec.response_id = m.group(1).decode("utf-8", "replace")


def phases_of(r: Mapping[str, Any]) -> dict[str, float]:
    """One record's phases in ms (:data:`PHASES`), those its stamps allow."""
    s = r.get("stamps")
    if not isinstance(s, dict):
        return {}
    out: dict[str, float] = {}
    for key in ("connect", "tls"):
        if key in s:
            out[key] = s[key]
    written, headers, body = s.get("written"), s.get("headers"), s.get("body")
    ttft = r.get("ttft")
    ttft_ms = None if ttft is None else ttft * 1000.0
    if written is not None:
        out["send"] = written
        if headers is not None:
            out["wait_headers"] = headers - written
    if headers is not None and body is not None:
        out["headers_to_body"] = body - headers
    if body is not None and ttft_ms is not None:
        out["body_to_token"] = ttft_ms - body
    ttfa = r.get("ttfa")
    if r.get("ttfr") is not None and ttfa is not None and ttft_ms is not None:
        out["token_to_answer"] = ttfa * 1000.0 - ttft_ms
    last = s.get("last_token")
    if last is not None and ttft_ms is not None:
        out["decode"] = last - ttft_ms
    return out


def _row(r: Mapping[str, Any]) -> dict[str, Any]:
    """One slow request as the summary lists it: what finds it in the engine's log, and its stamps."""
    ttft, e2e = r.get("ttft"), r.get("e2e")
    return {
        "request_id": r.get("request_id"),
        "request_id_echo": r.get("request_id_echo"),
        "response_id": r.get("response_id"),
        "worker": r.get("worker"),
        "t_sent": r.get("t_sent"),
        "ttft_ms": None if ttft is None else round(ttft * 1000.0, 3),
        "e2e_ms": None if e2e is None else round(e2e * 1000.0, 3),
        "new_conn": r.get("new_conn"),
        "stamps": r.get("stamps"),
    }


@dataclass(slots=True)
class TimingsTally:
    """The run's ``timings`` section, built one record at a time (:meth:`tap` wraps a pass)."""

    header: str | None = REQUEST_ID
    slowest_n: int = SLOWEST_N
    hist: dict[str, Histogram] = field(default_factory=lambda: {k: Histogram() for k, _ in PHASES})
    stamped: int = 0
    new_conns: int = 0
    reused_conns: int = 0
    echoed: int = 0
    echo_differs: int = 0
    response_ids: int = 0
    id_in_body: int = 0  # body ids that contain the request id (the engine took it as its own)
    # Per-request server timings: "timed", and "<check id>:checked" / ":violated" counts.
    server: dict[str, int] = field(default_factory=dict)
    # Per ranking: a min-heap of (value, record number) and those records' rows, at most N each.
    _slow: dict[str, list[tuple[float, int]]] = field(
        default_factory=lambda: {"ttft": [], "e2e": []}
    )
    _rows: dict[str, dict[int, dict[str, Any]]] = field(
        default_factory=lambda: {"ttft": {}, "e2e": {}}
    )
    _n: int = 0

    def tap(self, records: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """Yield ``records`` unchanged, tallying each on the way."""
        for r in records:
            self.add(r)
            yield r

    def add(self, r: Mapping[str, Any]) -> None:
        if r.get("new_conn") is not None:
            if r["new_conn"]:
                self.new_conns += 1
            else:
                self.reused_conns += 1
        echo = r.get("request_id_echo")
        if echo:
            self.echoed += 1
            self.echo_differs += echo != r.get("request_id")
        body_id = r.get("response_id")
        if body_id:
            self.response_ids += 1
            rid = r.get("request_id")
            # vLLM names the request after the header: chatcmpl-<X-Request-Id>.
            self.id_in_body += bool(rid) and str(rid) in str(body_id)
        if r.get("server_timings") is not None:
            self._server(r)
        if r.get("error") is not None or not isinstance(r.get("stamps"), dict):
            return
        self.stamped += 1
        hist = self.hist
        for key, ms in phases_of(r).items():
            hist[key].record(ms / 1000.0)
        self._n += 1
        for key in ("ttft", "e2e"):
            v = r.get(key)
            if v is None or (key == "e2e" and r.get("abandoned")):
                continue
            heap, rows = self._slow[key], self._rows[key]
            if len(heap) < self.slowest_n:
                heapq.heappush(heap, (float(v), self._n))
            elif float(v) > heap[0][0]:
                rows.pop(heapq.heapreplace(heap, (float(v), self._n))[1], None)
            else:
                continue
            rows[self._n] = _row(r)

    def _server(self, r: Mapping[str, Any]) -> None:
        """Tally one record's server timings: its phases and the checks it allows."""
        found = violations(r)
        st = r["server_timings"]
        if r.get("error") is not None or not isinstance(st, dict):
            return
        counts = self.server
        counts["timed"] = counts.get("timed", 0) + 1
        for check, bad in found.items():
            counts[f"{check}:checked"] = counts.get(f"{check}:checked", 0) + 1
            counts[f"{check}:violated"] = counts.get(f"{check}:violated", 0) + bad
        for key, name, _what in SERVER_PHASES:
            if isinstance(st.get(name), int | float):
                self.hist[key].record(max(0.0, float(st[name])) / 1000.0)

    def server_section(self) -> ServerTimings | None:
        """The section's ``server`` part, or None when no request carried server timings."""
        counts = self.server
        if not counts.get("timed"):
            return None
        checks = [
            ServerCheck(
                id=check,
                description=what,
                checked=counts.get(f"{check}:checked", 0),
                violated=counts.get(f"{check}:violated", 0),
            )
            for check, what in CHECKS
        ]
        return ServerTimings(requests=counts["timed"], checks=checks)

    def merge(self, other: TimingsTally) -> None:
        """Add another worker's tally: counts and phases add, the slowest N of both are kept."""
        add_fields(self, other, _TALLY_FIELDS)
        for key in ("ttft", "e2e"):
            rows = {n: r for n, r in self._rows[key].items()}
            rows.update({n + self._n: r for n, r in other._rows[key].items()})
            both = [*self._slow[key], *((v, n + self._n) for v, n in other._slow[key])]
            kept = heapq.nlargest(self.slowest_n, both)
            heapq.heapify(kept)
            self._slow[key] = kept
            self._rows[key] = {n: rows[n] for _v, n in kept}
        self._n += other._n

    def state(self) -> dict[str, Any]:
        return {
            **pack_fields(self, _TALLY_FIELDS),
            "n": self._n,
            "slow": {
                k: [[v, n, self._rows[k][n]] for v, n in heap] for k, heap in self._slow.items()
            },
        }

    @classmethod
    def from_state(cls, d: Mapping[str, Any], header: str | None) -> TimingsTally:
        t = cls(header=header)
        unpack_fields(t, d, _TALLY_FIELDS)
        t._n = int(d["n"])
        for key, items in d["slow"].items():
            t._slow[key] = [(float(v), int(n)) for v, n, _row in items]
            heapq.heapify(t._slow[key])
            t._rows[key] = {int(n): row for _v, n, row in items}
        return t

    def as_dict(self) -> dict[str, Any]:
        """``{"timings": ...}``, or ``{}`` when no record carried stamps (older records)."""
        section = self.section()
        return {} if section is None else {"timings": to_json(section)}

    def section(self) -> TimingsSection | None:
        """summary.json's ``timings``, or None when no record carried stamps (older records)."""
        if not self.stamped and not (self.new_conns + self.reused_conns):
            return None
        phases: dict[str, PhaseMs] = {}
        for key, _what in PHASES:
            d = self.hist[key].summary()
            if d.count:
                phases[key] = PhaseMs(
                    count=d.count,
                    p50=d.get("p50"),
                    p90=d.get("p90"),
                    p99=d.get("p99"),
                    max=d.max,
                    mean=d.mean,
                )
        return TimingsSection(
            request_id_header=self.header,
            requests_stamped=self.stamped,
            connections=Connections(new=self.new_conns, reused=self.reused_conns),
            request_id_echoed=self.echoed,
            request_id_echo_differs=self.echo_differs,
            response_ids=self.response_ids,
            request_id_in_body=self.id_in_body,
            phases_ms=phases,
            slowest=Slowest(by_ttft=self._slowest("ttft"), by_e2e=self._slowest("e2e")),
            server=self.server_section(),
        )

    def _slowest(self, key: str) -> list[SlowRequest]:
        # The rows stay dicts inside the tally: they travel in the workers' aggregate state.
        rows = self._rows[key]
        return [from_json(SlowRequest, rows[n]) for _v, n in sorted(self._slow[key], reverse=True)]


_TALLY_FIELDS = (
    "hist",
    "stamped",
    "new_conns",
    "reused_conns",
    "echoed",
    "echo_differs",
    "response_ids",
    "id_in_body",
    "server",
)


__all__ = [
    "PHASES",
    "SLOWEST_N",
    "TTFT_PARTS",
    "TimingsTally",
    "phases_of",
    "record_stamps",
    "request_id_header",
]
