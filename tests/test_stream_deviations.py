"""Engine deviations on the STREAM surface are non-strict for the engine that has them, failures elsewhere.

Xinference (4.1.0, measured) puts usage on its finish chunk and repeats the finish choice, with the
same usage, as its last chunk; the reference server's ``stream-usage-in-choices`` plus
``stream-usage-repeated`` faults produce that shape.
"""

from __future__ import annotations

import pytest

from servecheck.checks import CheckFailed, NonStrict, load_all, run_with_allowances
from tests.support import TEST_KEY, context_for

CHECKS = load_all()


@pytest.fixture(scope="module")
def usage_with_choices(make_reference):
    return make_reference("stream-usage-in-choices", "stream-usage-repeated", api_key=TEST_KEY)


@pytest.mark.parametrize(
    "check_id,deviation",
    [
        pytest.param("STREAM-USAGE", "usage-chunk-repeated", id="usage-chunk-repeated"),
        pytest.param("STREAM-FINISH", "stream-extra-finish-chunk", id="stream-extra-finish-chunk"),
    ],
)
def test_xinference_profile_allows_its_usage_chunk(usage_with_choices, check_id, deviation):
    ctx = context_for(usage_with_choices, check_id, engine="xinference")
    try:
        with pytest.raises(NonStrict) as excinfo:
            run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()
    assert excinfo.value.failure.deviation == deviation
    assert "Xinference" in excinfo.value.reason


@pytest.mark.parametrize("check_id", ["STREAM-USAGE", "STREAM-FINISH"])
def test_other_engines_fail_on_it(usage_with_choices, check_id):
    ctx = context_for(usage_with_choices, check_id, engine="vllm")
    try:
        with pytest.raises(CheckFailed) as excinfo:
            run_with_allowances(CHECKS[check_id], ctx)
    finally:
        ctx.client.close()
    assert excinfo.value.check_id == check_id


@pytest.mark.parametrize("engine", ["litellm", "xinference"])
def test_a_usage_chunk_without_choices_is_not_their_deviation(make_reference, engine):
    """LiteLLM and Xinference may repeat a choice in the usage chunk; a chunk with no choices
    key at all is another defect (the SDK's ChatCompletionChunk requires the list): it fails."""
    server = make_reference("stream-usage-no-choices", api_key=TEST_KEY)
    ctx = context_for(server, "STREAM-USAGE", engine=engine)
    try:
        with pytest.raises(CheckFailed) as excinfo:
            run_with_allowances(CHECKS["STREAM-USAGE"], ctx)
    finally:
        ctx.client.close()
    assert "the usage chunk has no choices list" in str(excinfo.value)
