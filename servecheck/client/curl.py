"""Ready-to-paste curl reproductions, with secrets masked.

A secret header value that came from a ``${VAR}`` in targets.yaml is written as that variable
(``-H "X-Token: ${HDR_SECRET}"``), so the line runs where the variable is exported; the loader
says which variable each value came from (:mod:`servecheck.config.provenance`). A secret that
came from no variable (a literal in targets.yaml, the wrong key a check sends on purpose) is
written as the placeholder ``<secret:HEADER-NAME>``, to be replaced by hand: a ``$VAR`` that
nobody exported would silently send an empty value.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from servecheck.config.provenance import VarRef, references
from servecheck.redact import MASK, SENSITIVE_HEADER, redact

_SKIPPED = ("content-length", "host", "accept-encoding", "connection", "user-agent", "accept")
# Text a secret header may show beside its secret: an auth scheme and separators.
_SCHEME = re.compile(r"(?i)^(?:(?:bearer|basic|token|apikey)\s+)?[\s:;,=]*$")


def placeholder(name: str) -> str:
    """What a curl line shows for a secret in header ``name`` that came from no variable."""
    return f"<secret:{name}>"


def _double_quoted(text: str) -> str:
    return re.sub(r'([\\"$`])', r"\\\1", text)


def _header(name: str, value: str) -> str:
    """The ``-H`` argument, quoted for a POSIX shell."""
    parts = references(value)
    secret_name = bool(SENSITIVE_HEADER.search(name))
    if not any(isinstance(p, VarRef) for p in parts):
        if secret_name:
            scheme = re.match(r"(?i)(bearer|basic|token)\s+", value)
            shown = (scheme.group(0) if scheme else "") + placeholder(name)
        else:
            shown = redact(value).replace(MASK, placeholder(name))
        return shlex.quote(f"{name}: {shown}")
    out = [_double_quoted(f"{name}: ")]
    for part in parts:
        if isinstance(part, VarRef):
            out.append("${" + part.name + "}")
        elif secret_name and not _SCHEME.match(part):
            out.append(_double_quoted(placeholder(name)))
        else:
            out.append(_double_quoted(redact(part).replace(MASK, placeholder(name))))
    return '"' + "".join(out) + '"'


def curl_command(
    method: str,
    url: str,
    headers: dict[str, str] | None = None,
    body: Any = None,
    *,
    stream: bool = False,
) -> str:
    """Return a one-line ``curl`` that repeats a request; no secret value is in it."""
    parts = ["curl", "-sS"]
    if stream:
        parts.append("-N")
    if method.upper() != "GET" or body is not None:
        parts += ["-X", method.upper()]
    parts.append(redact(shlex.quote(url)))
    for name, value in (headers or {}).items():
        if name.lower() in _SKIPPED:
            continue
        parts += ["-H", _header(name, value)]  # already redacted, part by part
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
        parts += ["--data-raw", redact(shlex.quote(text))]
    return " ".join(parts)
