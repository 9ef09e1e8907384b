"""Shared fixtures for servecheck's self-tests (layers: factory -> server)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from servecheck.reference.inprocess import RunningServer
from servecheck.reference.server import ServerConfig
from tests.support import TEST_KEY

SELFTEST_ITL_MS = 2.0


@pytest.fixture(scope="session")
def make_reference() -> Iterator[Callable[..., RunningServer]]:
    """Factory: start an in-process reference server with the given faults/quirks/options."""
    started: list[RunningServer] = []

    def factory(*faults: str, quirks: tuple[str, ...] = (), **options: Any) -> RunningServer:
        # A small inter-token delay: STREAM-INCREMENTAL only judges streams that take >= 50 ms,
        # and an instant server would make it (rightly) skip. 2 ms x ~40 tokens keeps it judged.
        options.setdefault("itl_ms", SELFTEST_ITL_MS)
        # The prefix cache is off by default (it shortens TTFT); the CACHE checks need it on.
        options.setdefault("prefix_cache_blocks", 1024)
        config = ServerConfig(faults=frozenset(faults), quirks=frozenset(quirks), **options)
        server = RunningServer(config).start()
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def reference(make_reference: Callable[..., RunningServer]) -> RunningServer:
    """A clean reference server with an API key, shared by the session."""
    return make_reference(api_key=TEST_KEY)
