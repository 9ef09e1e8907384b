"""Is anything listening at the target? One TCP connect before a load starts.

Without it a load against a target that is down fires thousands of failing requests a second
for its whole duration and then reports what a connect error looks like. A refused or timed-out
connect stops the run at once with "target down" (verdict FAIL, exit 1).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit


def target_down(base_url: str, timeout_s: float) -> str | None:
    """Why nothing answers at ``base_url`` (refused, unresolvable, no answer in ``timeout_s``),
    or None when a TCP connection opens. Sends no HTTP request."""
    parts = urlsplit(base_url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except TimeoutError:
        return f"target down: no TCP answer from {host}:{port} within {timeout_s:g} s"
    except OSError as exc:
        return f"target down: cannot connect to {host}:{port} ({exc.strerror or exc})"


__all__ = ["target_down"]
