"""What the command watches while its Locust child runs: the records as they grow, and the exit.

:class:`RecordTail` reads the new lines of the workers' record files once a second, for the live
progress line and the down watch (``analysis/down.py``); :class:`ChildExit` waits for the child
to end without polling. Both run in the command's process, on the generator's core when the
run is pinned (``--cpus``), so what they cost per second is taken from the generator (issue 46).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
from pathlib import Path
from typing import Any

from servecheck.records.record import progress_batch, progress_fields, worker_files

__all__ = ["ChildExit", "RecordTail"]

RECENT_TTFTS = 200  # the progress line's TTFT p50 is of the last this many answers


class RecordTail:
    """Reads new lines of the worker record files as they grow (for live progress)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.offsets: dict[Path, int] = {}
        self.total = self.errors = self.tokens = 0
        self.ttfts: list[float] = []

    def poll(self) -> list[dict[str, Any]]:
        """Read what the workers wrote since the last poll; returns what the down watch needs of
        those records, in no order: every record, or, when all of them were plain answers, one
        answer at the latest send time (all the watch does with an answer is end a streak)."""
        others: list[dict[str, Any]] = []
        answered: list[float] = []
        for p in worker_files(self.run_dir):
            data = self._read(p)
            if not data:
                continue
            plain = progress_batch(data)
            if plain is not None:
                answered += self._count_plain(plain)
                continue
            for line in data.splitlines():
                r = self._one(line)
                if r is not None:
                    others.append(r)
        if len(self.ttfts) > 10 * RECENT_TTFTS:
            self.ttfts = self.ttfts[-RECENT_TTFTS:]
        if not others:
            return [{"t_sent": max(answered), "error": None}] if answered else []
        return others + [{"t_sent": t, "error": None} for t in answered]

    def _read(self, p: Path) -> bytes:
        """The whole lines added to ``p`` since the last read (a torn last line waits)."""
        off = self.offsets.get(p, 0)
        try:
            with open(p, "rb") as fh:
                fh.seek(off)
                data = fh.read()
        except OSError:
            return b""
        cut = data.rfind(b"\n") + 1
        self.offsets[p] = off + cut
        return data[:cut]

    def _count_plain(
        self, plain: tuple[list[bytes], list[bytes], list[tuple[bytes, bytes]]]
    ) -> list[float]:
        """Count a batch of plain answers (:func:`progress_batch`); their send times."""
        sent, ttfts, tokens = plain
        self.total += len(sent)
        self.ttfts += [float(t) for t in ttfts if t != b"null"]
        self.tokens += sum(
            (int(out) if out != b"null" else 0) or int(client) for out, client in tokens
        )
        return [float(t) for t in sent]

    def _one(self, line: bytes) -> dict[str, Any] | None:
        r = progress_fields(line)  # an answer's few fields, without decoding its ITLs
        if r is None:
            try:
                r = json.loads(line)
            except ValueError:
                return None
            if not isinstance(r, dict):
                return None
        self.total += 1
        if r.get("error"):
            self.errors += 1
        elif r.get("ttft") is not None:
            self.ttfts.append(r["ttft"])
        self.tokens += int(r.get("output_tokens") or r.get("output_tokens_client") or 0)
        return r

    def line(self, elapsed: float, bound: float | None, drain: float | None = None) -> str:
        """The progress line; past ``bound`` the run is stopping (requests in flight finish,
        for at most ``drain`` s), and it says so rather than ``load 8s/6s``."""
        recent = sorted(self.ttfts[-RECENT_TTFTS:])
        p50 = f"{recent[len(recent) // 2] * 1000:.0f} ms" if recent else "-"
        if bound and elapsed > bound:
            most = f" of at most {drain:.0f}s" if drain else ""
            phase = (
                f"load {bound:.0f}s done, stopping: requests in flight finish "
                f"({elapsed - bound:.0f}s{most})"
            )
        else:
            phase = f"load {elapsed:5.0f}s" + (f"/{bound:.0f}s" if bound else "")
        return (
            f"{phase}  done {self.total}  errors {self.errors}  "
            f"tokens {self.tokens}  ttft p50 (recent) {p50}"
        )


class ChildExit:
    """Waits up to a timeout for a child process to end, woken by the kernel (a pidfd) rather
    than by ``Popen.wait``'s timed polls (up to twenty ``waitpid`` calls a second while it
    waits); where pidfds are missing, ``Popen.wait`` as before."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self._poll: select.poll | None = None
        self._fd = -1
        with contextlib.suppress(AttributeError, OSError):  # not Linux, or a kernel before 5.3
            self._fd = os.pidfd_open(proc.pid)
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN)

    def wait(self, timeout_s: float) -> int | None:
        """The child's exit code once it ended within ``timeout_s``, else None."""
        if self._poll is not None and not self._poll.poll(int(timeout_s * 1000)):
            return None
        try:
            return self.proc.wait(timeout=None if self._poll is not None else timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
