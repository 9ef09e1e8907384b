"""Secret redaction.

Every secret that servecheck learns (an expanded ``${VAR}`` used as an API key, a key given on
the command line) is registered here once; every piece of text that leaves the process (failure
messages, curl reproductions, logs, report files) passes through :func:`redact`. A plain
``str`` subclass, :class:`Secret`, keeps keys out of ``repr`` and f-strings by accident.
"""

from __future__ import annotations

import re
import threading
from typing import Any

MASK = "***"

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
# Bearer tokens and common key shapes are masked even when nobody registered them.
# A ``$NAME`` / ``${NAME}`` or ``<secret:...>`` there is a curl line's placeholder, not a key.
_GENERIC = re.compile(
    r"(?i)(bearer\s+|x-api-key:\s*|api-key:\s*)(?!\$\{?[A-Za-z_]|<secret:)([^\s'\"\\]+)"
)
# Credentials in a URL (``scheme://user:password@host``) and secret-looking query parameters
# (``?api-key=...``, ``&token=...``), masked wherever a URL is written.
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]*:)([^@\s/'\"]+)(@)")
_SECRET_QUERY = re.compile(
    r"(?i)([?&](?:api[-_]?key|key|token|access[-_]?token|auth|secret|password|sig|signature|code)=)"
    r"([^&#\s'\"]+)"
)
# Header names whose values are secrets wherever they come from (a literal in targets.yaml too).
SENSITIVE_HEADER = re.compile(r"(?i)(authorization|api[-_]?key|token|secret|password|cookie|auth)")


class Secret(str):
    """A string that never shows itself in ``repr()``, ``str()`` or f-strings.

    ``reveal()`` returns the value for the one place that needs it: the HTTP header.
    """

    __slots__ = ()

    def __new__(cls, value: str) -> Secret:
        register(value)
        return super().__new__(cls, value)

    def reveal(self) -> str:
        return str.__str__(self)

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return "Secret('***')"

    def __format__(self, spec: str) -> str:
        return MASK

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # Lets pydantic models hold a Secret (validated as a str, shown as a string in the schema)
        # without this core module importing pydantic at import time.
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(
            cls,
            core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(lambda v: MASK),
        )


def register(secret: str | None) -> None:
    """Remember a secret so that :func:`redact` masks it everywhere."""
    global _pattern
    if not secret or len(secret) < 4:
        # Very short values would mask ordinary words; they are still kept out of headers' reprs.
        return
    value = secret.reveal() if isinstance(secret, Secret) else str.__str__(secret)
    with _lock:
        if value in _secrets:
            return
        _secrets.add(value)
        ordered = sorted(_secrets, key=len, reverse=True)
        _pattern = re.compile("|".join(re.escape(s) for s in ordered))


def register_url(url: str | None) -> None:
    """Register the secrets a configured URL carries: the password (and ``user:password``) of its
    userinfo and the values of secret-named query parameters (``?api-key=...`` on gateways)."""
    if not url:
        return
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(url)
    if parts.password:
        register(parts.password)
        register(f"{parts.username}:{parts.password}")
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        # Only secret-named parameters: an ``api-version=2024-02-01`` must not mask every date.
        if _SECRET_QUERY.search(f"?{name}={value}") or SENSITIVE_HEADER.search(name):
            register(value)


def register_headers(headers: dict[str, str]) -> None:
    """Register the values of headers whose names say they are secrets (``X-Auth-Token``,
    ``Cookie``...). Values expanded from ``${VAR}`` are registered by the loader whatever the name."""
    for name, value in headers.items():
        if SENSITIVE_HEADER.search(name):
            register(value)


def redact(text: str) -> str:
    """Mask every registered secret, any bearer token, URL password and secret query value."""
    if not text:
        return text
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    text = _GENERIC.sub(lambda m: m.group(1) + MASK, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    if "=" in text:
        text = _SECRET_QUERY.sub(lambda m: m.group(1) + MASK, text)
    return text


def redact_obj(obj: Any) -> Any:
    """Redact every string inside a JSON-like structure (dicts, lists, strings)."""
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(v) for v in obj]
    return obj


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    """Headers as they may be shown: secret-named ones masked, every other value redacted."""
    return {k: (MASK if SENSITIVE_HEADER.search(k) else redact(v)) for k, v in headers.items()}
