"""Each benchmark owns one section of ``docs/benchmarks.md``, between its own markers."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def write_section(start: str, end: str, block: str, path: Path = DOC) -> None:
    """Replace the text between ``start`` and ``end`` (markers included in ``block``) or append
    ``block`` when the markers are not there yet; the rest of the file is left as it is."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text, encoding="utf-8")
