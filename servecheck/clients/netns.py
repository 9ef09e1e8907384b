"""Run a command in a fresh network namespace that reaches one target and nothing else.

``unshare --net`` (root) gives the command a namespace whose only interface is loopback, brought
up inside: no route leaves it, so a connect to any address but 127.0.0.1 fails at once with
"network is unreachable". The target is reached through a Unix socket, which a namespace does
not isolate (it is a file): on the host, :class:`Relay` accepts on ``<dir>/target.sock`` and
connects each stream to the target's host and port, and only there; inside, ``python -m
servecheck.clients.inside`` listens on ``127.0.0.1:<port>`` and hands each connection to that
socket. So a client pointed at ``http://127.0.0.1:<port>`` reaches the target, and a client that
tries any other address (telemetry, update checks, a plugin host) gets no connection. The relay
keeps the bytes of every exchange (bounded), which is how a failing client's request and the
answer that broke it are shown.

Where a namespace cannot be made (not root, no ``unshare`` or ``ip``, a kernel that refuses),
:func:`unavailable` says why in one line; callers refuse to run third-party clients then.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

KEEP_BYTES = 256_000  # of each direction of each connection: enough for a request and its answer
PROBE_TIMEOUT_S = 20.0


def unavailable() -> str | None:
    """Why no network namespace can be made here, or None when one can."""
    if os.name != "posix" or not hasattr(os, "geteuid"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (unshare --net); run as root or in a root container"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (util-linux / iproute2)"
    try:
        probe = subprocess.run(
            isolated_argv(["true"]), capture_output=True, text=True, timeout=PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare --net failed: {exc}"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"unshare --net failed: {last}"
    return None


def isolated_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` run in a new network namespace with loopback up (and nothing else)."""
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


def inside_argv(sock: Path, port: int, argv: Sequence[str]) -> list[str]:
    """``argv`` isolated, with ``127.0.0.1:port`` inside relayed to the Unix socket ``sock``."""
    relay = [sys.executable, "-m", "servecheck.clients.inside", str(sock), str(port), "--"]
    return isolated_argv([*relay, *argv])


@dataclass(slots=True)
class Exchange:
    """The bytes one relayed connection carried (each direction cut at :data:`KEEP_BYTES`)."""

    sent: bytearray = field(default_factory=bytearray)
    received: bytearray = field(default_factory=bytearray)


def _keep(buf: bytearray, data: bytes) -> None:
    room = KEEP_BYTES - len(buf)
    if room > 0:
        buf += data[:room]


@dataclass(slots=True)
class Relay:
    """Host side: ``<folder>/target.sock`` -> the target's ``host:port``, recording each stream."""

    folder: Path
    host: str
    port: int
    exchanges: list[Exchange] = field(default_factory=list)
    _server: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def sock(self) -> Path:
        return self.folder / "target.sock"

    def start(self) -> Relay:
        self.sock.unlink(missing_ok=True)
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(self.sock))
        srv.listen(64)
        self._server = srv
        threading.Thread(target=self._accept, name="netns-relay", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        self.sock.unlink(missing_ok=True)

    def _accept(self) -> None:
        srv = self._server
        while srv is not None:
            try:
                inner, _ = srv.accept()
            except OSError:
                return  # closed by stop()
            ex = Exchange()
            with self._lock:
                self.exchanges.append(ex)
            threading.Thread(target=self._serve, args=(inner, ex), daemon=True).start()

    def _serve(self, inner: socket.socket, ex: Exchange) -> None:
        try:
            outer = socket.create_connection((self.host, self.port), timeout=30)
        except OSError:
            inner.close()
            return
        outer.settimeout(None)
        threading.Thread(target=pump, args=(outer, inner, ex.received), daemon=True).start()
        pump(inner, outer, ex.sent)


def pump(src: socket.socket, dst: socket.socket, record: bytearray | None = None) -> None:
    """Copy ``src`` to ``dst`` until either end closes, keeping the bytes in ``record``."""
    try:
        while data := src.recv(65536):
            if record is not None:
                _keep(record, data)
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def free_port() -> int:
    """A port free on this host's loopback (inside a fresh namespace every port is free)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


__all__ = [
    "Exchange",
    "Relay",
    "free_port",
    "inside_argv",
    "isolated_argv",
    "pump",
    "unavailable",
]
