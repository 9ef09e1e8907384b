"""RESPONSES-* conformance checks (see docs/checks.md). The checks live in servecheck/checks/surfaces/."""

from servecheck.checks import run_check

SURFACE = "RESPONSES"


def test_conformance(sc_case, sc_ctx):
    run_check(sc_case.check, sc_ctx)
