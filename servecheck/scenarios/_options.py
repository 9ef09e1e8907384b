"""The edge of a Locust process: what a user tells it beyond Locust's own options.

``servecheck load`` hands its Locust processes one typed config file (load/plan.py's
``RunConfig``). Plain ``locust -f scenarios/chat.py`` has none: its inputs are Locust options
registered here (``--servecheck-target`` ...), each with the environment variable the docs name
(Locust's own ``env_var=``), checked as they are parsed; the library reads the parsed options
through :class:`~servecheck.load.plan.PlainInputs` and turns them into the same ``RunConfig``.

The scenario knobs that shape a scenario's class (``SERVECHECK_TURNS``, ``SERVECHECK_THINK_S``,
``SERVECHECK_PREFIX_TOKENS``, ``SERVECHECK_PREFIX_GROUPS``) are read here too, when the scenario
module is imported (before Locust parses any option), under ``servecheck load`` as well.

Every packaged scenario imports this module; a locustfile of your own that imports only
``LLMUser`` runs with ``--host`` and the defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from servecheck.errors import UsageError

ENV_TURNS = "SERVECHECK_TURNS"
ENV_THINK = "SERVECHECK_THINK_S"
ENV_PREFIX_TOKENS = "SERVECHECK_PREFIX_TOKENS"
ENV_PREFIX_GROUPS = "SERVECHECK_PREFIX_GROUPS"


def _positive_int(text: str) -> int | None:
    if text == "":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a positive whole number")
    return int(text)


def _speed(text: str) -> float | None:
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number (2 replays twice as fast)") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


# (option name, metavar, environment variable, type, help); the dest is servecheck_<name>.
OPTIONS: tuple[tuple[str, str, str, Any, str], ...] = (
    ("target", "NAME", "SERVECHECK_TARGET", str, "target from the targets file (else --host)"),
    ("targets-file", "FILE", "SERVECHECK_TARGETS_FILE", str, "targets file (targets.yaml)"),
    ("model", "NAME", "SERVECHECK_MODEL", str, "model (else the target's, else GET /models)"),
    ("records-dir", "DIR", "SERVECHECK_RECORDS_DIR", str, "run folder (reports/locust-TIME)"),
    ("max-requests", "N", "SERVECHECK_MAX_REQUESTS", _positive_int, "stop after N requests"),
    ("trace", "FILE", "SERVECHECK_TRACE", str, "replay this trace file on its schedule"),
    ("trace-format", "FMT", "SERVECHECK_TRACE_FORMAT", str, "the trace's format (auto)"),
    ("trace-speed", "X", "SERVECHECK_TRACE_SPEED", _speed, "replay speed (1.0)"),
    ("dataset", "FILE", "SERVECHECK_DATASET", str, "prompts from this JSONL / ShareGPT file"),
    ("dataset-format", "FMT", "SERVECHECK_DATASET_FORMAT", str, "the dataset's format (auto)"),
    ("dataset-sample", "N", "SERVECHECK_DATASET_SAMPLE", _positive_int, "items kept (1000)"),
    (
        "dataset-max-tokens",
        "N",
        "SERVECHECK_DATASET_MAX_TOKENS",
        _positive_int,
        "output bound of an item that names none (128)",
    ),
    ("api", "API", "SERVECHECK_LOAD_API", str, "chat or messages (the scenario's)"),
    ("images", "SPEC", "SERVECHECK_LOAD_IMAGES", str, "images per request: sizes or a folder"),
)


def add_options(parser: Any, **_: Any) -> None:
    """Register the options on Locust's parser (kept out of its web UI's form)."""
    for name, metavar, env, kind, text in OPTIONS:
        parser.add_argument(
            f"--servecheck-{name}",
            dest=f"servecheck_{name.replace('-', '_')}",
            metavar=metavar,
            env_var=env,
            type=kind,
            default=None,
            help=f"servecheck: {text} (env {env})",
            include_in_web_ui=False,
        )


def _register() -> None:
    """Hook :func:`add_options` into Locust's parser, in a Locust process only: a scenario
    imports ``locust`` first (gevent's monkey-patching), and a test that imports the knobs below
    must not patch its own process by importing locust here."""
    if "locust" in sys.modules:
        from locust import events

        events.init_command_line_parser.add_listener(add_options)


_register()


def _env_int(name: str, default: int, low: int = 1) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: not a whole number") from None
    if value < low:
        raise UsageError(f"{name}={raw!r}: must be >= {low}")
    return value


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r}: not a number of seconds") from None
    if value < 0 or value != value:
        raise UsageError(f"{name}={raw!r}: must be >= 0")
    return value


def env_turns(default: int = 4) -> int:
    """Turns per conversation from ``SERVECHECK_TURNS``."""
    return _env_int(ENV_TURNS, default)


def env_think_s(default: float = 0.0) -> float:
    """Think time between turns, seconds, from ``SERVECHECK_THINK_S``."""
    return _env_float(ENV_THINK, default)


def env_prefix(default_tokens: int = 256, default_groups: int = 4) -> tuple[int, int]:
    """``(prefix_tokens, groups)`` from ``SERVECHECK_PREFIX_TOKENS`` / ``SERVECHECK_PREFIX_GROUPS``."""
    return _env_int(ENV_PREFIX_TOKENS, default_tokens), _env_int(ENV_PREFIX_GROUPS, default_groups)


__all__ = ["OPTIONS", "add_options", "env_prefix", "env_think_s", "env_turns"]
