"""Types of the streaming summary's C prepare (servecheck/analysis/_hdrfast.c)."""

from collections.abc import Iterable

def prepare(values: Iterable[float | None], /) -> tuple[list[int], int, int, int, int]: ...
