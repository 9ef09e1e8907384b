"""error_shape_problem: what counts as an OpenAI error object, and which departures are legal deviations."""

from __future__ import annotations

import json

import pytest

from servecheck.checks.surfaces.err import error_shape_problem
from servecheck.client.http import Exchange
from servecheck.engines.registry import PROFILES
from servecheck.engines.spec import DEVIATIONS


def _answer(status: int, body: object, ctype: str = "application/json") -> Exchange:
    raw = body if isinstance(body, str) else json.dumps(body)
    return Exchange(
        method="GET",
        url="http://127.0.0.1:1/v1/x",
        request_headers={},
        request_body=None,
        status=status,
        response_headers={"content-type": ctype},
        body=raw.encode(),
    )


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            {
                "error": {
                    "message": "bad",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            },
            id="openai",
        ),
        pytest.param(
            {"error": {"code": 400, "message": "bad", "type": "invalid_request_error"}},
            id="llamacpp",
        ),
        pytest.param(
            {"object": "error", "error": {"message": "bad", "type": "BadRequestError"}},
            id="extra-top-level-keys",
        ),
    ],
)
def test_openai_error_objects_pass(body):
    assert error_shape_problem(_answer(400, body)) == (None, None)


@pytest.mark.parametrize(
    "status,body,ctype,needle,deviation",
    [
        pytest.param(
            404,
            {"detail": "Not Found"},
            "application/json",
            "FastAPI",
            "error-shape-detail",
            id="fastapi-detail",
        ),
        pytest.param(400, "Bad Request", "text/plain", "not a JSON object", None, id="plain-text"),
        pytest.param(404, "<html>404</html>", "text/html", "text/html", None, id="html-page"),
        pytest.param(
            400,
            {"error": "bad"},
            "application/json",
            "no 'error' object",
            None,
            id="error-is-a-string-tgi",
        ),
        pytest.param(
            400, {"error": {"message": "bad"}}, "application/json", "error.type", None, id="no-type"
        ),
        pytest.param(
            400,
            {"object": "error", "message": "bad", "type": "x"},
            "application/json",
            "no 'error' object",
            None,
            id="old-vllm-flat",
        ),
    ],
)
def test_departures_are_named(status, body, ctype, needle, deviation):
    problem, dev = error_shape_problem(_answer(status, body, ctype))
    assert problem is not None and needle in problem
    assert dev == deviation


def test_deviation_keys_used_by_these_checks_exist_and_profiles_use_known_keys():
    for key in (
        "error-status-422",
        "error-shape-detail",
        "malformed-json-500",
        "empty-messages-accepted",
        "out-of-range-accepted",
    ):
        assert key in DEVIATIONS
    for profile in PROFILES.values():
        assert set(profile.deviations) <= set(DEVIATIONS), profile.name
