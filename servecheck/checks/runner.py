"""Run one check and decide its outcome: pass, fail, non-strict, or skipped; a model-dependent
check run ``--trials`` times is judged by how many of its runs passed."""

from __future__ import annotations

from servecheck.checks import preconditions
from servecheck.checks.context import CheckContext, CheckFailed, NonStrict, Trials
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
        run_trials(check, ctx)
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


def run_trials(check: Check, ctx: CheckContext) -> None:
    """Run ``check`` once, or ``ctx.trials`` times when it is model-dependent: it passes when at
    least its threshold of runs pass (the tally lands in ``ctx.trial_result``), else it fails
    with the first failure's detail and the rate. A skip or an error in any run ends it so."""
    runs = ctx.trials if check.model_dependent else 1
    if runs <= 1:
        check.func(ctx)
        return
    failures: list[CheckFailed] = []
    for _ in range(runs):
        try:
            check.func(ctx)
        except CheckFailed as failure:
            failures.append(failure)
    first = failures[0] if failures else None
    tally = Trials(
        passed=runs - len(failures),
        runs=runs,
        threshold=check.threshold(runs),
        first_failure=first.summary if first is not None else "",
    )
    ctx.trial_result = tally
    if tally.ok or first is None:
        return
    failed = CheckFailed(
        check.id,
        f"{tally.phrase()}; the first failure: {first.summary}",
        expected=f"at least {tally.threshold} of {runs} trials pass; each: {first.expected}",
        received=first.received,
        exchange=first.exchange,
        # one deviation for every failing run: the profile or the target may still allow it
        deviation=first.deviation
        if all(f.deviation == first.deviation for f in failures)
        else None,
        hint=first.hint,
    )
    raise failed
