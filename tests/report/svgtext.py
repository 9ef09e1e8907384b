"""What the report's inline SVGs say: their texts (svg.fonttype "none" keeps each as a <text>)."""

from __future__ import annotations

import html
import re


def texts(svg: str) -> list[str]:
    """Every ``<text>`` element's text, unescaped, in document order."""
    return [html.unescape(t) for t in re.findall(r"<text\b[^>]*>([^<]*)</text>", svg)]


def has_text(svg: str, text: str) -> bool:
    """Whether one of ``svg``'s texts is ``text`` (a title, an axis label, a legend entry)."""
    return text in texts(svg)
