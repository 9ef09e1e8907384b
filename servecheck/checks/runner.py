"""Run one check and decide its outcome: pass, fail, non-strict, or skipped."""

from __future__ import annotations

from servecheck.checks import preconditions
from servecheck.checks.context import CheckContext, CheckFailed, NonStrict
from servecheck.checks.registry import Check, matches

SCHEMA_EXPECTED = (
    "every 2xx body and stream chunk validates strictly against the openai SDK's generated "
    "types: required fields present, enum values from the allowed set, exact JSON types"
)
SCHEMA_FIX = (
    "send each field with the JSON type and value the OpenAI spec gives it (a number as a "
    "number, finish_reason/object/role from the spec's set); extra fields are fine"
)


def run_with_allowances(check: Check, ctx: CheckContext) -> None:
    """Run ``check`` and apply the allowances: a failure the profile or the target's ``allow`` accepts becomes :class:`NonStrict`.
    An unmet precondition raises :class:`~servecheck.checks.preconditions.CheckError` first.
    A check that passes but received answers that break the SDK's types (checks/schema.py) is
    non-strict, or fails in strict mode; a failing check keeps its failure, the findings added."""
    preconditions.ensure(check, ctx)
    try:
        check.func(ctx)
    except CheckFailed as failure:
        findings = ctx.schema_findings()
        if findings:
            failure.note(f"Schema: {findings.summary()}")
        reason = ctx.profile.allowance(failure.deviation)
        if reason is None:
            pattern = matches(check.id, ctx.target.allow)
            if pattern is not None:
                reason = f"allowed in targets.yaml ({pattern}): {ctx.target.allow[pattern]}"
        if reason is not None:
            raise NonStrict(check.id, reason, failure) from None
        raise
    schema_verdict(check, ctx)


def schema_verdict(check: Check, ctx: CheckContext) -> None:
    """After a pass: the schema findings make it non-strict, or a failure in strict mode."""
    findings = ctx.schema_findings()
    if not findings:
        return
    count = len(findings.findings) + findings.more
    failure = CheckFailed(
        check.id,
        f"schema: {count} field(s) of the answers break the openai SDK's types",
        expected=SCHEMA_EXPECTED,
        received=findings.summary(),
        exchange=findings.exchange,
        hint=SCHEMA_FIX,
    )
    if ctx.strict_schema:
        raise failure
    raise NonStrict(check.id, f"{findings.summary()}; fix: {SCHEMA_FIX}", failure, kind="schema")
