"""``servecheck pytest ARGS...``: pytest from servecheck's own environment, arguments as they are.

pipx puts only an application's own commands on the PATH, so after ``pipx install servecheck``
there is no ``pytest`` to run ``pytest --pyargs servecheck.suites`` with, though pytest is
installed beside servecheck. This runs that pytest: it replaces the process (``exec``), so the
exit code, signals, the terminal and stdin are pytest's own, with nothing of ours in between.
"""

from __future__ import annotations

import argparse
import os
import sys

# cli.py hands every argument to run() untouched; only a leading -h/--help is ours.
PASS_THROUGH = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "every argument goes to pytest, e.g. servecheck pytest --pyargs servecheck.suites "
        "--sc-target mine -n auto; pytest's own help: servecheck pytest -- --help"
    )
    parser.add_argument("passed_through", nargs="*", metavar="ARG", help="arguments for pytest")


def pytest_command(pytest_args: list[str]) -> list[str]:
    """The command line that :func:`run` executes (this interpreter's ``-m pytest``)."""
    args = pytest_args[1:] if pytest_args[:1] == ["--"] else pytest_args
    return [sys.executable, "-m", "pytest", *args]


def run(args: argparse.Namespace) -> int:
    cmd = pytest_command(list(args.passed_through))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)
