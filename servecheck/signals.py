"""Signal-safe cleanup for every child process servecheck starts.

Two rules, used by every command:

- SIGTERM (what a CI system sends when it cancels a job) is turned into :class:`Interrupted`, a
  ``KeyboardInterrupt``, in the main thread: every ``finally`` and ``except KeyboardInterrupt``
  runs as it does for Ctrl-C, so child processes are stopped, temporary folders removed and the
  command says where its partial results are. Python's default for SIGTERM runs none of that.
- Every child is started with :func:`die_with_parent` as its ``preexec_fn``: Linux sends it
  SIGTERM when servecheck dies, even by SIGKILL (``PR_SET_PDEATHSIG``), so nothing is orphaned.

And one aid: SIGUSR1 prints every thread's stack (:func:`install_stack_dump`), for a run that
seems stuck.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM. ``partial`` may carry what the interrupted work had finished."""

    def __init__(self, signum: int = signal.SIGINT, partial: Any = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.partial = partial

    @property
    def exit_code(self) -> int:
        """128 + the signal number: 130 for SIGINT, 143 for SIGTERM (what shells report)."""
        return 128 + int(self.signum)


def signum_of(exc: BaseException) -> int:
    """The signal behind a KeyboardInterrupt (SIGINT unless it is an :class:`Interrupted`)."""
    return exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)


def _on_sigterm(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def install_sigterm_handler() -> None:
    """Make SIGTERM raise :class:`Interrupted` in the main thread (a no-op elsewhere)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def stoppable_child() -> None:
    """``preexec_fn`` for a child that servecheck stops with SIGINT (Locust: it then writes its
    CSVs): :func:`die_with_parent`, and SIGINT back at its default. A shell starts a background
    job (``cmd &`` in a script, ``nohup``, some CI runners) with SIGINT ignored, that survives
    exec, and the child would not hear our stop until the SIGKILL after it. The child runs in
    its own session, so no terminal's Ctrl-C reaches it either way; only ours does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent()


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, where SIGTERM stops it as cleanly as Ctrl-C does.

    :func:`install_sigterm_handler` raises :class:`Interrupted` wherever the main thread is: in
    an event loop that is inside some task, which then dies with it unretrieved (asyncio prints
    "Task exception was never retrieved" and a traceback). Here SIGTERM cancels the main task
    instead, as asyncio's own SIGINT handling does, and once the loop has closed it is raised
    as :class:`Interrupted`. Off the main thread this is ``asyncio.run``."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(main)
    got: list[int] = []

    async def guarded() -> T:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        previous = signal.getsignal(signal.SIGTERM)

        def on_term() -> None:
            got.append(int(signal.SIGTERM))
            if task is not None:
                task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_term)
        try:
            return await main
        finally:
            loop.remove_signal_handler(signal.SIGTERM)  # sets SIG_DFL: put ours back
            signal.signal(signal.SIGTERM, previous)

    try:
        return asyncio.run(guarded())
    except asyncio.CancelledError:
        if got:
            raise Interrupted(got[0]) from None
        raise


def install_stack_dump() -> None:
    """``kill -USR1 <pid>`` prints every thread's stack to stderr and the run goes on: where a
    run seems stuck, this says where (file, line and function names only: no values, so no
    secret). A no-op off the main thread or where SIGUSR1 does not exist."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def die_with_parent() -> None:
    """``preexec_fn`` for a child: SIGTERM it when its parent dies, however the parent dies."""
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return  # not Linux: the parent's own cleanup is all there is
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


__all__ = [
    "Interrupted",
    "die_with_parent",
    "install_sigterm_handler",
    "install_stack_dump",
    "run_async",
    "signum_of",
    "stoppable_child",
]
