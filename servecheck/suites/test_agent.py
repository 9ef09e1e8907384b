"""AGENT-* conformance checks (see docs/checks.md). The checks live in servecheck/checks/surfaces/."""

from servecheck.checks import run_with_allowances

SURFACE = "AGENT"


def test_conformance(sc_case, sc_ctx):
    run_with_allowances(sc_case.check, sc_ctx)
