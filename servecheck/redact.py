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
_GENERIC = re.compile(r"(?i)(bearer\s+|x-api-key:\s*|api-key:\s*)(?!\$API_KEY)([^\s'\"\\]+)")


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


def redact(text: str) -> str:
    """Mask every registered secret and any bearer token in ``text``."""
    if not text:
        return text
    pattern = _pattern
    if pattern is not None:
        text = pattern.sub(MASK, text)
    return _GENERIC.sub(lambda m: m.group(1) + MASK, text)


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
    sensitive = {"authorization", "x-api-key", "api-key", "proxy-authorization"}
    return {k: (MASK if k.lower() in sensitive else redact(v)) for k, v in headers.items()}
