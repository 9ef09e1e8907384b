"""Run one check and decide its outcome: pass, fail, non-strict, or skipped."""

from __future__ import annotations

from servecheck.checks import preconditions
from servecheck.checks.context import CheckContext, CheckFailed, NonStrict
from servecheck.checks.registry import Check, matches


def run_with_allowances(check: Check, ctx: CheckContext) -> None:
    """Run ``check`` and apply the allowances: a failure the profile or the target's ``allow`` accepts becomes :class:`NonStrict`.
    An unmet precondition raises :class:`~servecheck.checks.preconditions.CheckError` first."""
    preconditions.ensure(check, ctx)
    try:
        check.func(ctx)
    except CheckFailed as failure:
        reason = ctx.profile.allowance(failure.deviation)
        if reason is None:
            pattern = matches(check.id, ctx.target.allow)
            if pattern is not None:
                reason = f"allowed in targets.yaml ({pattern}): {ctx.target.allow[pattern]}"
        if reason is not None:
            raise NonStrict(check.id, reason, failure) from None
        raise
