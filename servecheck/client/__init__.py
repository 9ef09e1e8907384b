"""httpx transport, strict SSE parser, per-request timings, curl reproductions."""

from servecheck.client.http import (
    AsyncServeClient,
    ClientSettings,
    Exchange,
    ServeClient,
    StreamResult,
)
from servecheck.client.sse import SSEEvent, SSEParser, StreamProblem, classify_data
from servecheck.client.timing import Timing

__all__ = [
    "AsyncServeClient",
    "ClientSettings",
    "Exchange",
    "SSEEvent",
    "SSEParser",
    "ServeClient",
    "StreamProblem",
    "StreamResult",
    "Timing",
    "classify_data",
]
