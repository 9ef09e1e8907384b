"""``servecheck init URL``: probe an endpoint and print (or append) a commented targets.yaml entry.

The probe is :func:`servecheck.workflows.init.probe_endpoint`; each value of the entry carries a
comment saying where it came from. A key is read from the variable ``--api-key-env`` names and
written as ``${VAR}``, never as itself. ``--append`` edits the file with a round-trip YAML
library (comments, order and indentation kept) and writes it only when the whole result loads.
Exit codes: 0 written, 2 usage error (nothing OpenAI-compatible at URL, a key needed and not
given, the name taken in ``--append``'s file, a result that would not load: nothing written).
When chat completions never complete within ``--timeout`` (an endless stream, headers and then
silence) the capabilities they decide are left out as unknown and a warning line says so on
stderr: the entry is still written and the exit is 0, since the URL, models and engine it found
are right; ``--strict`` makes that exit 1 and appends nothing (a CI job that must not go on with
a half-probed target).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck init``."""
    parser.add_argument("url", metavar="URL", help="the endpoint, e.g. http://host:8000 or .../v1")
    parser.add_argument(
        "--name", default="mine", metavar="NAME", help="target name (default: %(default)s)"
    )
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        default=None,
        help="environment variable holding the API key; the entry says ${VAR} (default: none)",
    )
    parser.add_argument(
        "--append",
        metavar="FILE",
        default=None,
        help="append the entry to this targets file (created with a targets: list if missing)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        metavar="S",
        help="per request, for its whole response (default: %(default)s)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 and append nothing when the endpoint is not usable as it is (chat "
        "completions that never complete); without it a warning line says so and the exit is 0",
    )


def _valid(entry: str, key_env: str | None) -> None:
    """The entry parses as a targets file (the key variable set to a dummy)."""
    from servecheck.config import load_targets

    with tempfile.TemporaryDirectory(prefix="servecheck-init-") as tmp:
        path = Path(tmp) / "targets.yaml"
        path.write_text("targets:\n" + entry, encoding="utf-8")
        load_targets(path, env={key_env: "probe"} if key_env else {})


def run(args: argparse.Namespace) -> int:
    """Probe, print the entry, append it with ``--append``."""
    from servecheck.errors import UsageError
    from servecheck.workflows.init import probe_endpoint, render_entry

    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise UsageError(f"--api-key-env {args.api_key_env}: that variable is not set")
    facts = probe_endpoint(args.url, key, timeout_s=args.timeout)
    entry = render_entry(facts, args.name, args.api_key_env or "SERVECHECK_API_KEY")
    _valid(entry, args.api_key_env or "SERVECHECK_API_KEY")
    print(entry, end="")
    for problem in facts.problems:
        print(f"servecheck init: warning: {problem}", file=sys.stderr)
    if facts.problems and args.strict:
        print("servecheck init: --strict: exit 1, nothing appended", file=sys.stderr)
        return 1
    if args.append:
        from servecheck.workflows.init import append_entry

        key_env = args.api_key_env or "SERVECHECK_API_KEY"
        # The new entry names its key variable; the rest of the file loads as it would in a run.
        append_entry(args.append, entry, args.name, {**os.environ, key_env: "probe"})
        print(f"# appended to {args.append}")
    return 0
