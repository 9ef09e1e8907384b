"""The drain verdict live: this test starts its OWN llama.cpp and vLLM CPU (ports 86xx, never
the shared engines), streams into it, sends it SIGTERM through ``servecheck drain`` and judges
what it does (docs/engines.md, "Drain on shutdown").

What was measured (2026-12-02) and is pinned here, so that an engine upgrade that changes it is
noticed: llama.cpp stops listening at once (new requests refused; one sent in that instant is
accepted and hangs) but stops generating and cuts its in-flight streams ~30 s later without a
finish reason: FAIL, for the streams (2026-12-03: streams long enough that a loaded machine's
late SIGTERM still finds them mid-generation). vLLM 0.32 CPU
runs here with ``--shutdown-timeout 30`` (its drain mode; the default 0 races, see
docs/engines.md): in-flight streams finish, but new requests get HTTP 500 JSON ("cannot schedule
new futures after shutdown") while it drains, not 503: FAIL, for the new requests.

Without the engine install these skip; with CI=true they fail (CI installs both).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servecheck import api
from servecheck.engines import base
from servecheck.engines.base import Engine, LaunchPlan, Readiness
from servecheck.probes.drain import DrainOptions
from servecheck.workflows.drain import DrainSpec


def _engine_or_skip(name: str) -> Engine:
    from servecheck.engines.llamacpp import LlamaCpp
    from servecheck.engines.vllm import Vllm

    engine: Engine
    if name == "llamacpp":
        engine = LlamaCpp()
        installed = engine.binary.is_file()
    else:
        engine = Vllm()
        installed = (engine.venv / ".servecheck-installed").is_file()
    if not installed:
        message = f"{name} is not installed: `servecheck engine install {name}` (or `engine up`)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: the drain must run live)")
        pytest.skip(message)
    return engine


def _drain(engine: Engine, port: int, tmp_path: Path, opts: DrainOptions) -> dict:
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        "targets:\n"
        f"  - name: own-{engine.name}\n    base_url: http://127.0.0.1:{port}/v1\n"
        f"    engine: {engine.name}\n    models: [servecheck-tiny]\n    slo: [drain_ok]\n"
    )
    state = base.start(engine, port, echo=lambda _line: None)
    try:
        spec = DrainSpec(
            target=f"own-{engine.name}", targets_file=str(targets), options=opts, out=tmp_path
        )
        return api.drain(spec).data
    finally:
        base.stop_state(state, timeout_s=20.0)  # drained or not, nothing of it stays up


def _judged_as_measured(data: dict, streams: set[str], probes: set[str], reason: str) -> None:
    assert data["action"]["what"].startswith("SIGTERM to engine"), data["action"]
    in_flight = [s for s in data["streams"] if s["outcome"] in ("finished", "ended", "cut", "hung")]
    assert in_flight, f"no stream was in flight at SIGTERM: {data['stream_outcomes']}"
    assert {s["outcome"] for s in in_flight} == streams, data["streams"]
    assert data["probes"] and set(data["probe_outcomes"]) <= probes, data["probes"]
    assert data["verdict"] == "fail"
    assert data["slos"][0]["metric"] == "drain_ok" and data["slos"][0]["passed"] is False
    assert any(reason in r for r in data["reasons"]), data["reasons"]


@pytest.mark.timeout(400)
def test_llamacpp_drain(tmp_path: Path) -> None:
    engine = _engine_or_skip("llamacpp")
    # idle 60 s: llama.cpp cuts the held streams at ~30 s, which is then what is usually seen;
    # in one fresh-clone make test (2 cores shared with 12 other engines and the suite) it held
    # them open past the 90 s deadline instead. Either way no stream finished: a FAIL.
    # Streams of 2000 tokens (2048 per slot, the tiny model's training context: -c 8192 with its
    # 4 slots), over a second of its generation: the 400 of `engine up`'s 512-token slots took
    # 0.25 s, and on a loaded machine the drain's own readers, seeing the tokens late, sent
    # SIGTERM after the engine had finished them (one fresh-clone make test saw 4 "finished").
    opts = DrainOptions(streams=4, max_tokens=2000, deadline_s=90, stream_idle_s=60)
    data = _drain(_Launched(engine, ["-c", "8192"]), 8651, tmp_path, opts)
    seen = {s["outcome"] for s in data["streams"]} & {"cut", "hung"}
    assert len(seen) == 1, data["streams"]
    (outcome,) = seen
    what = "cut without a finish reason" if outcome == "cut" else "hung"
    # New requests are refused once it stops listening; one sent in the instant before (the
    # first probe goes at once) is accepted and never answered: a hang, seen 1 time in 3.
    _judged_as_measured(data, {outcome}, {"refused", "reset", "hang"}, f"streams {what}")


@pytest.mark.timeout(600)
def test_vllm_cpu_drain(tmp_path: Path) -> None:
    engine = _engine_or_skip("vllm")
    opts = DrainOptions(streams=4, max_tokens=400, deadline_s=60, stream_idle_s=20)
    data = _drain(_Launched(engine, ["--shutdown-timeout", "30"]), 8652, tmp_path, opts)
    _judged_as_measured(
        data, {"finished"}, {"other", "refused", "reset"}, "new requests got another answer"
    )
    assert any(p["status"] == 500 for p in data["probes"]), data["probes"]


class _Launched(Engine):
    """An engine as ``servecheck engine up`` runs it, with options set: each ``FLAG VALUE`` pair
    of ``options`` replaces that flag's value where the engine gives it, else is added."""

    def __init__(self, inner: Engine, options: list[str]) -> None:
        self.inner, self.options = inner, options
        self.name, self.version = inner.name, inner.version
        self.ready_timeout_s, self.stop_timeout_s = inner.ready_timeout_s, inner.stop_timeout_s

    def plan(self, port: int) -> LaunchPlan:
        plan = self.inner.plan(port)
        for flag, value in zip(self.options[::2], self.options[1::2], strict=True):
            if flag in plan.argv:
                plan.argv[plan.argv.index(flag) + 1] = value
            else:
                plan.argv += [flag, value]
        return plan

    def probe(self, port: int) -> tuple[Readiness, str]:
        return self.inner.probe(port)
