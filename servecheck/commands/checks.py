"""``servecheck checks``: the conformance catalogue (docs/checks.md is generated from it)."""

from __future__ import annotations

import argparse

from servecheck.checks.registry import SURFACES, catalogue_markdown, load_all


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true", help="print docs/checks.md")
    parser.add_argument(
        "--surface",
        choices=sorted(SURFACES),
        metavar="NAME",
        help=f"only one surface ({', '.join(SURFACES)})",
    )


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(catalogue_markdown(), end="")
        return 0
    for check in load_all().values():
        if args.surface and check.surface != args.surface:
            continue
        needs = f" [needs {', '.join(check.requires)}]" if check.requires else ""
        print(f"{check.id:<24} {check.description}{needs}")
    return 0
