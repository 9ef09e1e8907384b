"""Exceptions shared by every layer.

`UsageError` is what a user can fix (a bad targets.yaml, a missing ${VAR}, an unknown option
value): the CLI and the pytest plugin print its message on one line and exit 2, never a
traceback.
"""

from __future__ import annotations

import difflib
import string
from collections.abc import Iterable, Mapping
from typing import Any


class ServecheckError(Exception):
    """Base class for errors servecheck raises on purpose."""


class UsageError(ServecheckError):
    """A problem in the user's input: configuration, options or paths."""


class SpecError(UsageError):
    """A usage error about fields of a typed spec, raised by the library.

    The library never names a command-line option: ``message`` is a :meth:`str.format`
    template in which a placeholder with a value in ``values`` is that value, and any other
    placeholder names a spec field: ``SpecError("{cycles} {n}: at least 1", n=0)``. ``str()``
    shows the field names (what a :mod:`servecheck.api` caller passed); the command layer shows
    its own option for each field with :meth:`render` (``--cycles 0: at least 1``). Values are
    substituted, never parsed, so a brace in a user's path cannot become a field: a string
    from the user goes in ``values``, never into the template (numbers may).
    """

    def __init__(self, message: str, **values: Any) -> None:
        self.template = message
        self.values = values
        try:
            parsed = [name for _text, name, _spec, _conv in string.Formatter().parse(message)]
        except ValueError:  # a stray brace: no fields, the message as written
            parsed = []
        self.fields = tuple(dict.fromkeys(n for n in parsed if n and n not in values))
        super().__init__(self.render({}))

    def render(self, names: Mapping[str, str]) -> str:
        """The message with each field shown as ``names[field]`` (the field itself if absent)."""
        try:
            return self.template.format_map(_Fields(self.values, names))
        except (ValueError, IndexError, AttributeError):
            return self.template


class _Fields(dict[str, Any]):
    def __init__(self, values: Mapping[str, Any], names: Mapping[str, str]) -> None:
        super().__init__(values)
        self.names = names

    def __missing__(self, field: str) -> str:
        return self.names.get(field, field)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean "x"?)' for the closest choice, or '' when nothing is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f' (did you mean "{matches[0]}"?)' if matches else ""
