"""Exceptions shared by every layer.

`UsageError` is what a user can fix (a bad targets.yaml, a missing ${VAR}, an unknown option
value): the CLI and the pytest plugin print its message on one line and exit 2, never a
traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class ServecheckError(Exception):
    """Base class for errors servecheck raises on purpose."""


class UsageError(ServecheckError):
    """A problem in the user's input: configuration, options or paths."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean "x"?)' for the closest choice, or '' when nothing is close."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f' (did you mean "{matches[0]}"?)' if matches else ""
