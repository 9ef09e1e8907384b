"""The ``servecheck`` command: a thin table of subcommands.

Each subcommand lives in ``servecheck/commands/<name>.py`` and exposes
``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only when their
subcommand runs, so ``servecheck --help`` stays fast and one broken optional dependency does not
take every command down.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from servecheck import __version__
from servecheck.errors import ServecheckError, SpecError, UsageError
from servecheck.redact import redact
from servecheck.signals import install_sigterm_handler, install_stack_dump, signum_of

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": (
        "servecheck.commands.check",
        "run the conformance catalogue against targets (pytest)",
    ),
    "accept": (
        "servecheck.commands.accept",
        "post-deploy acceptance: readiness, conformance, smoke load, exit code",
    ),
    "load": ("servecheck.commands.load", "run a bounded Locust load test and evaluate SLOs"),
    "capacity": (
        "servecheck.commands.capacity",
        "sweep load to find the highest level that meets the SLOs",
    ),
    "soak": ("servecheck.commands.soak", "repeated load cycles with telemetry and leak verdicts"),
    "compare": (
        "servecheck.commands.compare",
        "compare a run with a baseline run (nightly regression)",
    ),
    "cutover": ("servecheck.commands.cutover", "pre-cutover check before a hot model swap"),
    "history": (
        "servecheck.commands.history",
        "nightly history: record runs, plot a metric's series, judge tonight vs rolling:N",
    ),
    "drain": (
        "servecheck.commands.drain",
        "SIGTERM a server mid-stream: do streams finish and new requests get 503 or refused?",
    ),
    "clients": (
        "servecheck.commands.clients",
        "run real agent clients (OpenAI Agents SDK, Vercel AI SDK) against a target, isolated",
    ),
    "records": (
        "servecheck.commands.records",
        "describe a load run's records, export them as JSONL",
    ),
    "preflight": (
        "servecheck.commands.preflight",
        "check model files (safetensors, GGUF, config) before a launch",
    ),
    "wait-ready": (
        "servecheck.commands.wait_ready",
        "poll a target's health until ready, loading or down (bounded)",
    ),
    "init": (
        "servecheck.commands.init",
        "probe an endpoint and write a commented targets.yaml entry",
    ),
    "targets": (
        "servecheck.commands.targets",
        "validate targets.yaml and show the targets it defines",
    ),
    "checks": (
        "servecheck.commands.checks",
        "list the conformance checks (id, description, expectation)",
    ),
    "reference-server": (
        "servecheck.commands.reference_server",
        "run the built-in deterministic reference server",
    ),
    "engine": (
        "servecheck.commands.engine",
        "bring a real local engine up or down (vllm, llamacpp, xinference, litellm)",
    ),
    "pytest": (
        "servecheck.commands.run_pytest",
        "run pytest from servecheck's environment, arguments as they are (pipx installs)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servecheck",
        description="Acceptance, conformance and load tests for OpenAI-compatible LLM servers.",
    )
    parser.add_argument("--version", action="version", version=f"servecheck {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text, add_help=False)
    return parser


def field_options(parser: argparse.ArgumentParser, overrides: Mapping[str, str]) -> dict[str, str]:
    """Spec field -> the option a user typed, for showing a :class:`SpecError`: an option's
    ``dest`` is its field, and so is ``dest`` + ``_s`` (a duration option fills a field in
    seconds: ``--idle`` -> ``idle_s``); the command's ``FIELD_OPTIONS``, next to its options,
    names the others (``shared_prefix_words`` -> ``--shared-prefix``)."""
    names: dict[str, str] = {}
    for action in parser._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs:
            names.setdefault(action.dest, max(longs, key=len))
            names.setdefault(action.dest + "_s", max(longs, key=len))
    return {**names, **overrides}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not args_list or args_list[0] not in COMMANDS:
        # Let argparse print help, the version, or an "invalid choice" error.
        parser.parse_args(args_list or ["--help"])
        return 2
    name = args_list[0]
    module_name, help_text = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("servecheck.commands"):
            print(f"servecheck {name}: not available in this build", file=sys.stderr)
            return 2
        raise
    sub = argparse.ArgumentParser(prog=f"servecheck {name}", description=help_text)
    module.add_arguments(sub)
    rest = args_list[1:]
    if getattr(module, "PASS_THROUGH", False) and rest[:1] not in (["-h"], ["--help"]):
        # Every argument belongs to the wrapped program, options included.
        args = argparse.Namespace(passed_through=rest)
    else:
        args = sub.parse_args(rest)
    if argv is None:
        # The process is servecheck (console script, python -m): SIGTERM cleans up like Ctrl-C,
        # no orphaned child, no temp folder. Called in-process (tests), the host keeps its own.
        install_sigterm_handler()
        install_stack_dump()
    try:
        return int(module.run(args) or 0)
    except UsageError as exc:
        if isinstance(exc, SpecError):  # the library names spec fields; show this command's options
            text = exc.render(field_options(sub, getattr(module, "FIELD_OPTIONS", {})))
        else:
            text = str(exc)
        print(f"servecheck {name}: error: {redact(text)}", file=sys.stderr)
        return 2
    except ServecheckError as exc:
        # raised on purpose with its cause (an embedded server that would not start): one line
        print(f"servecheck {name}: error: {redact(str(exc))}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # stdout closed early (``servecheck checks | head``): not an error worth a traceback.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0
    except KeyboardInterrupt as exc:
        signum = signum_of(exc)
        print(f"servecheck {name}: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
