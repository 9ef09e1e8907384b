"""The run's memory of responses that never complete (issue 41).

Every request a check sends has a deadline for its whole response (``timeout_s``, see
``client/http.py``). A server whose streams never end (no ``data: [DONE]``) or that stalls after
its headers makes each request wait out that deadline, and a catalogue of a hundred checks would
wait it a hundred times. So the clients of one check run share one :class:`StallGuard`:

- the checks' ordinary requests (:class:`~servecheck.client.http.ServeClient`) note each
  response that did not complete within its deadline;
- a route is judged to never complete after :data:`THRESHOLD` such responses, or after the first
  one to a precondition probe (a minimal, one-token request a healthy server answers at once);
- once a POST route of a server is judged, so is the whole server: it has shown that its
  generation requests hang, and every other route would cost the deadline again to learn the
  same (the checks behind them are *not run*, not failed: nothing was judged). A GET route
  (``/models``, ``/metrics``) is judged on its own, and judges only itself: a slow metrics page
  says nothing about generation;
- a request to a judged route is not sent: the clients return at once (``error="not-sent"``, the
  SDK transports raise), and the pytest plugin reports the checks that wanted it *not run*
  behind the one cause (:meth:`Verdict.message`).

Bursts (the asynchronous client of CONC and OVERLOAD) and the SDK clients only obey the verdicts;
they do not add to them: a request queued behind a burst on a saturated but healthy server is that
check's finding, not a sign that every response hangs.

A server here is its origin (scheme, host, port). xdist workers share no memory, so the notes go
to a small JSON-lines file that each process appends one line to (``O_APPEND``, one write) and
reads as it grows.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

THRESHOLD = 2
NOT_SENT = "not-sent"


@dataclass(frozen=True, slots=True)
class Stall:
    """One request whose response did not complete within its deadline."""

    origin: str
    route: str  # "POST /v1/chat/completions"
    within_s: float
    by: str  # the check that sent it
    probe: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """A route whose responses never complete, from the stalls that showed it."""

    origin: str
    route: str
    requests: int
    within_s: float
    by: str

    def message(self) -> str:
        seen = f" (first seen by {self.by})" if self.by else ""
        return (
            f"responses never complete: {self.route} on {self.origin}: {self.requests} "
            f"request(s) did not complete within {self.within_s:g} s{seen}"
        )

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "message": self.message()}


def _split(method: str, url: str) -> tuple[str, str]:
    """``(origin, route)``; the origin without the URL's credentials, as it is printed."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{parts.scheme}://{host}", f"{method.upper()} {parts.path or '/'}"


@dataclass(slots=True)
class StallGuard:
    """Shared by the clients of one run (through ``ClientSettings.stall_guard``)."""

    path: Path | None = None  # the file shared with the other xdist workers
    threshold: int = THRESHOLD
    current: str = ""  # the check now running (the plugin sets it), named in the verdict
    not_sent: int = 0  # requests of this process not sent because their route was judged
    _stalls: list[Stall] = field(default_factory=list)
    _offset: int = 0
    _probing: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """Requests inside are precondition probes: one stall judges their route."""
        self._probing = True
        try:
            yield
        finally:
            self._probing = False

    def note(self, method: str, url: str, within_s: float) -> None:
        """A response to ``method url`` did not complete within ``within_s``."""
        origin, route = _split(method, url)
        stall = Stall(origin, route, round(within_s, 3), self.current, self._probing)
        with self._lock:
            self._load()
            if self.path is not None:
                line = (json.dumps(asdict(stall)) + "\n").encode()
                with contextlib.suppress(OSError):
                    fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                    try:
                        os.write(fd, line)
                    finally:
                        os.close(fd)
                    self._load()
                    return
            self._stalls.append(stall)

    def judged(self, method: str, url: str) -> Verdict | None:
        """The verdict that keeps ``method url`` from being sent, or None."""
        origin, route = _split(method, url)
        for verdict in self.verdicts():
            if verdict.origin != origin:
                continue
            if verdict.route == route or verdict.route.startswith("POST "):
                return verdict
        return None

    def on_server(self, url: str) -> Verdict | None:
        """The first verdict on the server (origin) of ``url``, or None."""
        origin, _ = _split("GET", url)
        return next((v for v in self.verdicts() if v.origin == origin), None)

    def refuse(self, method: str, url: str) -> Verdict | None:
        """As :meth:`judged`, counting a refused request in :attr:`not_sent`."""
        verdict = self.judged(method, url)
        if verdict is not None:
            with self._lock:
                self.not_sent += 1
        return verdict

    def verdicts(self) -> list[Verdict]:
        """Every judged route, in the order it was judged."""
        with self._lock:
            self._load()
            stalls = list(self._stalls)
        groups: dict[tuple[str, str], list[Stall]] = {}
        out: list[Verdict] = []
        for stall in stalls:
            key = (stall.origin, stall.route)
            group = groups.setdefault(key, [])
            group.append(stall)
            judged = len(group) == self.threshold or (stall.probe and len(group) < self.threshold)
            if judged and not any((v.origin, v.route) == key for v in out):
                # the stalls that judged it, not those a worker added before it heard: one
                # message for every check not run behind it
                out.append(Verdict(*key, len(group), group[0].within_s, group[0].by))
        return out

    def _load(self) -> None:
        """Read what the other processes appended since the last read (lock held)."""
        if self.path is None:
            return
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError, TypeError):
                self._stalls.append(Stall(**json.loads(line)))
        self._offset += end


__all__ = ["NOT_SENT", "THRESHOLD", "Stall", "StallGuard", "Verdict"]
