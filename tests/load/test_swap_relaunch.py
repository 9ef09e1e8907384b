"""The Xinference relaunch swap against a stand-in Xinference (httpx's MockTransport): it
relaunches with the settings the model's description reported, waits until the model is listed
again, and says what is missing when the description cannot be relaunched from."""

from __future__ import annotations

import json

import httpx

from servecheck.probes.swap import _relaunch

BASE = "http://xinference.test/v1"
DESCRIPTION = {
    "model_type": "LLM",
    "model_name": "servecheck-tiny-custom",
    "model_engine": "Transformers",
    "model_format": "pytorch",
    "model_size_in_billions": "0_001",
    "quantization": "none",
    "replica": 1,
    "address": "127.0.0.1:35571",
}


def _xinference(description: dict, listed_after: int) -> tuple[httpx.Client, list[str]]:
    seen: list[str] = []
    state = {"polls": 0, "launched": None}

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.method == "GET" and request.url.path == "/v1/models/m":
            return httpx.Response(200, json=description)
        if request.method == "DELETE":
            return httpx.Response(200, json=None)
        if request.method == "POST":
            state["launched"] = json.loads(request.content)
            return httpx.Response(200, json={"model_uid": "m"})
        state["polls"] += 1
        ids = ["m"] if state["polls"] > listed_after else []
        return httpx.Response(200, json={"data": [{"id": i} for i in ids]})

    client = httpx.Client(transport=httpx.MockTransport(handle))
    client.launched = state  # type: ignore[attr-defined]
    return client, seen


def test_relaunch_uses_the_described_settings_and_waits_until_listed() -> None:
    client, seen = _xinference(DESCRIPTION, listed_after=2)
    out = _relaunch(client, BASE, "m", timeout_s=30)
    assert out.ok and "Transformers" in out.detail, out
    assert seen[:3] == ["GET /v1/models/m", "DELETE /v1/models/m", "POST /v1/models"]
    assert seen.count("GET /v1/models") == 3  # two polls without it, the third lists it
    launched = client.launched["launched"]  # type: ignore[attr-defined]
    assert launched == {
        "model_uid": "m",
        **{k: v for k, v in DESCRIPTION.items() if k != "address"},
    }


def test_a_description_without_an_engine_is_not_relaunched() -> None:
    client, seen = _xinference({k: v for k, v in DESCRIPTION.items() if k != "model_engine"}, 0)
    out = _relaunch(client, BASE, "m", timeout_s=30)
    assert not out.ok and "no model_engine to relaunch with" in out.detail
    assert "DELETE /v1/models/m" not in seen  # nothing was terminated
