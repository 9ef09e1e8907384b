"""Proof that the checks work: every check passes on the clean reference server, and every
fault in the catalogue makes the check it was made for fail, with that check's id.

Legal variations (quirks) must not fail anything: the whole catalogue passes with each on.
"""

from __future__ import annotations

import pytest

from servecheck.checks import CheckFailed, NonStrict, load_all, run_check
from servecheck.reference.faults import FAULTS, QUIRKS
from tests.support import TEST_KEY, context_for

CHECKS = load_all()
PAIRS = [(fault.name, cid) for fault in FAULTS.values() for cid in fault.catches]
# Faults that only show on a server slow enough to be caught mid-generation.
FAULT_OPTIONS: dict[str, dict[str, object]] = {
    "abort-leak": {"itl_ms": 20.0},
    "kv-leak": {"itl_ms": 20.0},
    # A burst exceeds the limit only while earlier requests are still in flight: hold each for
    # 300 ms, far longer than a loaded 2-core machine takes to send the 12 requests.
    **{f: {"ttft_ms": 300.0} for f in FAULTS if f.startswith("overload-")},
}


def _run(server, check_id):
    ctx = context_for(server, check_id)
    try:
        run_check(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()


@pytest.mark.parametrize("check_id", [pytest.param(cid, id=cid) for cid in CHECKS])
def test_clean_server_passes(reference, check_id):
    _run(reference, check_id)


@pytest.mark.parametrize("fault,check_id", [pytest.param(f, c, id=f"{f}->{c}") for f, c in PAIRS])
def test_fault_is_caught(make_reference, fault, check_id):
    if check_id not in CHECKS:
        pytest.fail(f"fault {fault!r} names check {check_id!r}, which is not in the registry")
    server = make_reference(fault, api_key=TEST_KEY, **FAULT_OPTIONS.get(fault, {}))
    with pytest.raises(CheckFailed) as excinfo:
        _run(server, check_id)
    assert excinfo.value.check_id == check_id
    assert str(excinfo.value).startswith(f"{check_id}: ")
    assert TEST_KEY not in str(excinfo.value), "a failure message shows the API key"


def test_every_check_has_a_fault():
    covered = {cid for _, cid in PAIRS}
    missing = sorted(set(CHECKS) - covered)
    assert not missing, f"checks without a fault that proves them: {missing}"


@pytest.mark.parametrize("quirk", [pytest.param(q, id=q) for q in QUIRKS])
def test_legal_variations_pass(make_reference, quirk):
    server = make_reference(quirks=(quirk,), api_key=TEST_KEY)
    failures = []
    for check_id, check in CHECKS.items():
        ctx = context_for(server, check_id)
        try:
            run_check(check, ctx)
        except (CheckFailed, NonStrict) as exc:
            failures.append(str(exc).splitlines()[0])
        finally:
            ctx.client.close()
    assert not failures, f"legal variation {quirk!r} failed: {failures}"
