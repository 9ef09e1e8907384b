"""Ready-to-paste curl reproductions, with secrets masked."""

from __future__ import annotations

import json
import shlex
from typing import Any

from servecheck.redact import redact, redact_headers


def curl_command(
    method: str,
    url: str,
    headers: dict[str, str] | None = None,
    body: Any = None,
    *,
    stream: bool = False,
) -> str:
    """Return a one-line ``curl`` that repeats a request. Keys become ``***`` (export the real one)."""
    parts = ["curl", "-sS"]
    placeholders: set[int] = (
        set()
    )  # "$API_KEY" header parts: already masked, and redact() would mask them again
    if stream:
        parts.append("-N")
    if method.upper() != "GET" or body is not None:
        parts += ["-X", method.upper()]
    parts.append(shlex.quote(url))
    for name, value in redact_headers(headers or {}).items():
        if name.lower() in (
            "content-length",
            "host",
            "accept-encoding",
            "connection",
            "user-agent",
            "accept",
        ):
            continue
        if value == "***" and name.lower() == "authorization":
            value = "Bearer $API_KEY"
        elif value == "***":
            value = "$API_KEY"
        if "$API_KEY" in value:
            placeholders.add(len(parts) + 1)
            parts += ["-H", f'"{name}: {value}"']
        else:
            parts += ["-H", shlex.quote(f"{name}: {value}")]
    if body is not None:
        text = (
            body.decode("utf-8", "replace")
            if isinstance(body, bytes)
            else body
            if isinstance(body, str)
            else json.dumps(body, ensure_ascii=False)
        )
        if "Content-Type" not in (headers or {}) and "content-type" not in (headers or {}):
            parts += ["-H", shlex.quote("Content-Type: application/json")]
        parts += ["--data-raw", shlex.quote(text)]
    return " ".join(p if i in placeholders else redact(p) for i, p in enumerate(parts))
