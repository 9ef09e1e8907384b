"""Which ``${VAR}`` a secret came from, so that a reproduction can name it instead of the value.

The loader records, for each secret it expands (an ``api_key`` or a header value), the variable
whose value it used; :func:`references` splits a header value into literal text and the
variables its secret parts came from. The values stay in this process, as in
:mod:`servecheck.redact`; only the variable names ever leave it (the curl lines of
``servecheck/client/curl.py``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

_lock = threading.Lock()
_sources: dict[str, str] = {}  # secret value -> the variable that held it (first one wins)
MIN_LEN = 4  # as servecheck.redact: shorter values would match ordinary text


@dataclass(frozen=True, slots=True)
class VarRef:
    """A part of a value that is the value of the environment variable ``name``."""

    name: str


def remember(value: str, var: str) -> None:
    """``value`` was read from ``${var}`` (called by the targets loader for secrets only)."""
    if len(value) < MIN_LEN:
        return
    with _lock:
        _sources.setdefault(value, var)


def references(value: str) -> list[str | VarRef]:
    """``value`` as literal text and :class:`VarRef` parts, longest known secret first;
    ``[value]`` when no part of it came from a variable."""
    with _lock:
        known = sorted((s for s in _sources if s in value), key=len, reverse=True)
        names = {s: _sources[s] for s in known}
    parts: list[str | VarRef] = [value]
    for secret in known:
        out: list[str | VarRef] = []
        for part in parts:
            if isinstance(part, VarRef) or secret not in part:
                out.append(part)
                continue
            pieces = part.split(secret)
            for i, piece in enumerate(pieces):
                if i:
                    out.append(VarRef(names[secret]))
                if piece:
                    out.append(piece)
        parts = out
    return parts


__all__ = ["VarRef", "references", "remember"]
