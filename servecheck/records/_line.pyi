"""Types of the records line's C writer (servecheck/records/_line.c)."""

from typing import Any

def floats6(values: Any, /) -> str | None: ...
def rounded6(values: Any, /) -> list[Any]: ...
def rounded6_json(values: Any, /) -> str | None: ...
def record(
    keys: tuple[str, ...],
    values: tuple[Any, ...],
    required: int,
    rounded: int,
    itls_at: int,
    line: bool,
    /,
) -> tuple[dict[str, Any], str | None] | None: ...
