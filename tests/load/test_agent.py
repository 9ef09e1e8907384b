"""Agent sessions as load (load/workload/agent.py, analysis/agent_stats.py): the knobs, the
session and branch generator, the trace readers, the agent section and its SLOs. No server:
the pool is driven by hand, as a Locust user would drive it."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis.agent_stats import agent_section, bucket, judge
from servecheck.analysis.slo import parse_slo
from servecheck.errors import SpecError, UsageError
from servecheck.load.plan import load_plan
from servecheck.load.workload.agent import (
    AgentPool,
    AgentShape,
    PlannedRequest,
    agent_tools,
    load_sessions,
    parse_agent,
    parse_tool_wait,
)

SYSTEM = ("You are the shared agent system prompt. " * 20, 160)


def _piece(key: int, tokens: int) -> str:
    return f"text{key % 997} " + "word " * tokens


def _pool(shape: AgentShape, **kw: Any) -> AgentPool:
    tools = agent_tools(shape.tools)
    return AgentPool(shape, SYSTEM, tools, _piece, name="w0", **kw)


def _usage(req: PlannedRequest, out: int = 10) -> dict[str, int]:
    return {"prompt_tokens": req.fields["context_tokens"], "completion_tokens": out}


# ------------------------------------------------------------------ the knobs


def test_parse_agent_reads_every_key_and_keeps_defaults() -> None:
    assert parse_agent(None) == AgentShape()
    shape = parse_agent(
        "turns=8,tools=12,system_tokens=4000,user_tokens=30,tool_result_tokens=200,"
        "output_tokens=32,tool_wait=uniform:0.2-2,fork=0.25x3,branch_turns=3,"
        "source=s.jsonl,format=aiperf"
    )
    assert (shape.turns, shape.tools, shape.system_tokens, shape.user_tokens) == (8, 12, 4000, 30)
    assert (shape.tool_result_tokens, shape.output_tokens, shape.branch_turns) == (200, 32, 3)
    assert (shape.fork, shape.branches) == (0.25, 3)
    assert shape.tool_wait.text == "uniform:0.2-2"
    assert (shape.source, shape.source_format) == ("s.jsonl", "aiperf")
    assert AgentShape.from_dict(shape.to_dict()) == shape  # what the run config carries
    assert parse_agent({"turns": 3, "fork": "10%"}) == AgentShape(turns=3, fork=0.1)  # a plan


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("turn=3", 'unknown key turn (did you mean "turns"?)', id="misspelt"),
        pytest.param("turns=0", "turns=0: a whole number >= 1", id="no-turns"),
        pytest.param("fork=2", "fork=2: a share of turns in [0, 1]", id="share-above-1"),
        pytest.param("fork=0.2x0", "fork=0.2x0: a share", id="no-branches"),
        pytest.param("tool_wait=soon", "tool_wait=soon: a time in seconds", id="wait-word"),
        pytest.param("tool_wait=uniform:3-1", "tool_wait=uniform:3-1", id="wait-reversed"),
        pytest.param("format=csv", "format=csv: one of auto, aiperf, servecheck", id="format"),
        pytest.param("turns", "turns: KEY=VALUE pairs", id="no-value"),
    ],
)
def test_parse_agent_refuses_with_the_key_and_the_option(spec: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_agent(spec)
    rendered = err.value.render({"agent": "--agent"})
    assert rendered.startswith("--agent ") and message in rendered, rendered


def test_tool_wait_draws_from_its_distribution() -> None:
    rng = random.Random(3)
    assert parse_tool_wait("0.5").draw(rng) == 0.5
    assert parse_tool_wait("fixed:2s").draw(rng) == 2.0
    draws = [parse_tool_wait("uniform:0.2-0.4").draw(rng) for _ in range(200)]
    assert min(draws) >= 0.2 and max(draws) <= 0.4
    exp = [parse_tool_wait("exp:1").draw(rng) for _ in range(4000)]
    assert 0.9 < sum(exp) / len(exp) < 1.1  # its mean, loosely (4000 draws)
    assert parse_tool_wait("exp:0").draw(rng) == 0.0


def test_a_plan_takes_the_agent_key_and_names_itself_in_errors(tmp_path: Path) -> None:
    plan = tmp_path / "agent.yaml"
    plan.write_text("scenario: agent\nagent: {turns: 5, fork: 0.5x4, source: sessions.jsonl}\n")
    values = load_plan(plan).values
    assert values["agent"]["turns"] == 5 and values["agent"]["branches"] == 4
    assert values["agent"]["source"] == str(tmp_path / "sessions.jsonl")  # the plan's folder
    plan.write_text("agent: {turnz: 5}\n")
    with pytest.raises(UsageError, match=r"agent\.yaml: agent: unknown key turnz"):
        load_plan(plan)


# ------------------------------------------------------------------ sessions and turns


def test_each_turn_resends_history_with_the_answer_its_tool_call_and_result() -> None:
    pool = _pool(AgentShape(turns=3, fork=0.0, tool_wait=parse_tool_wait("fixed:2")))
    rng = random.Random(1)
    first = pool.checkout(0.0, rng)
    assert first.kind == "agent" and first.capture
    assert first.fields["session"] == "w0-s1" and first.fields["turn"] == 0
    assert "tool_wait_s" not in first.fields  # nothing ran before a first turn
    assert first.messages[0] == {"role": "system", "content": SYSTEM[0]}
    assert first.messages[-1]["role"] == "user"
    pool.checkin(first, True, "I will read the file.", _usage(first), 1.0, rng)
    # The tool runs for 2 s: another user asking now opens a second session instead.
    other = pool.checkout(2.9, rng)
    assert other.fields["session"] == "w0-s2"
    assert other.messages[0] == first.messages[0]  # one system prompt for every session
    second = pool.checkout(3.0, rng)
    assert second.fields["session"] == "w0-s1" and second.fields["turn"] == 1
    assert second.fields["tool_wait_s"] == 2.0
    history = second.messages
    assert history[: len(first.messages)] == first.messages
    call = history[len(first.messages)]
    assert call["role"] == "assistant" and call["content"] == "I will read the file."
    (tc,) = call["tool_calls"]
    assert tc["type"] == "function" and json.loads(tc["function"]["arguments"])["path"]
    assert tc["function"]["name"] in {t["function"]["name"] for t in pool.tools}
    result = history[len(first.messages) + 1]
    assert result == {"role": "tool", "tool_call_id": tc["id"], "content": result["content"]}
    # The history as the server counted it, the call, and the tool's result on top.
    assert second.fields["context_tokens"] == first.fields["context_tokens"] + 10 + 24 + 96
    pool.checkin(second, True, "", _usage(second), 4.0, rng)
    third = pool.checkout(10.0, rng)
    assert third.fields["turn"] == 2 and third.fields["session_end"] == "done"
    assert third.messages[len(history)]["content"] is None  # an answer that was only a call


def test_a_fork_sends_its_branches_at_once_and_the_parent_waits_for_the_last() -> None:
    shape = AgentShape(turns=3, fork=1.0, branches=3, branch_turns=1)
    pool = _pool(shape, roots_cap=1)
    rng = random.Random(2)
    root = pool.checkout(0.0, rng)
    pool.checkin(root, True, "split the work", _usage(root), 1.0, rng)
    branches = [pool.checkout(1.0, rng) for _ in range(3)]
    assert {b.fields["branch"] for b in branches} == {0, 1, 2}
    assert {b.fields["parent"] for b in branches} == {"w0-s1@0"}
    for b in branches:  # each starts from the parent's context, then its own task
        assert b.messages[: len(root.messages) + 1] == root.messages + [
            b.messages[len(root.messages)]
        ]
        assert b.messages[len(root.messages)]["tool_calls"]
        assert b.fields["session_end"] == "done"  # one-turn branches
        assert b.fields["context_tokens"] > root.fields["context_tokens"]
    assert not pool.ready(1.0)  # the parent waits while its branches run
    assert pool.wait_s(1.0) > 0  # a closed-loop user with nothing to send waits (one root)
    for i, b in enumerate(branches):
        pool.checkin(b, True, f"part {i} done", _usage(b), 2.0 + i, rng)
    resumed = pool.checkout(4.0, rng)
    assert resumed.fields["session"] == "w0-s1" and resumed.fields["turn"] == 1
    assert "tool_wait_s" not in resumed.fields  # its wait was the fan-out, not a tool
    tool = resumed.messages[-1]
    assert tool["role"] == "tool" and all(f"part {i} done" in tool["content"] for i in range(3))


def test_a_failed_branch_still_releases_its_parent() -> None:
    pool = _pool(AgentShape(turns=2, fork=1.0, branches=2, branch_turns=2))
    rng = random.Random(4)
    root = pool.checkout(0.0, rng)
    pool.checkin(root, True, "go", _usage(root), 0.0, rng)
    a, b = pool.checkout(0.0, rng), pool.checkout(0.0, rng)
    pool.checkin(a, False, "", None, 1.0, rng)  # an error ends that branch
    pool.checkin(b, True, "b", _usage(b), 1.0, rng)
    b2 = pool.checkout(5.0, rng)  # b's second turn
    assert b2.fields["branch"] == b.fields["branch"] and b2.fields["turn"] == 1
    pool.checkin(b2, True, "b done", _usage(b2), 2.0, rng)
    assert pool.checkout(2.0, rng).fields["session"] == "w0-s1"


def test_no_turn_is_planned_past_the_context_and_the_session_says_why_it_ended() -> None:
    context = 1200
    shape = AgentShape(turns=50, tools=2, fork=0.3, tool_wait=parse_tool_wait("0"))
    pool = _pool(shape, context_length=context, roots_cap=4)
    rng = random.Random(5)
    ends: dict[str, str] = {}
    for _ in range(400):
        req = pool.checkout(0.0, rng)
        # The worst case (the whole answer) fits, with the template's room.
        assert req.fields["context_tokens"] + req.max_tokens <= context - 16, req.fields
        if "session_end" in req.fields:
            ends[req.fields["session"]] = req.fields["session_end"]
        pool.checkin(req, True, "ok", _usage(req, out=req.max_tokens), 0.0, rng)
    assert "context" in ends.values()


# ------------------------------------------------------------------ sessions from files


def test_aiperf_multi_turn_sessions_are_read_as_published(tmp_path: Path) -> None:
    p = tmp_path / "aiperf.jsonl"
    lines = [
        {
            "session_id": "a",
            "turns": [
                {"role": "system", "text": "You are terse."},
                {"text": "What is deep learning?", "output_length": 20},
                {"text": "Shorter.", "delay": 1500},
            ],
        },
        {"session_id": "b", "turns": [{"texts": ["Who are you?", "Hello"]}]},
        {"session_id": "a", "turns": [{"text": "And again.", "delay": 250}]},
    ]
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    a, b = load_sessions(p)  # auto: the lines have turns
    assert a.sid == "a" and a.system == "You are terse."
    assert [t.text for t in a.turns] == ["What is deep learning?", "Shorter.", "And again."]
    assert [t.delay_s for t in a.turns] == [0.0, 1.5, 0.25]
    assert a.turns[0].max_tokens == 20 and a.turns[1].max_tokens is None
    assert b.turns[0].text == "Who are you? Hello"


def test_servecheck_trace_sessions_grow_by_the_new_content(tmp_path: Path) -> None:
    p = tmp_path / "trace.jsonl"
    rows = [
        {"t": 0.0, "input_tokens": 100, "output_tokens": 20, "session_id": "s"},
        {"t": 0.5, "input_tokens": 50, "output_tokens": 5},  # no session: not an agent turn
        {"t": 3.0, "input_tokens": 180, "output_tokens": 10, "session_id": "s"},
    ]
    p.write_text("".join(json.dumps(x) + "\n" for x in rows))
    (s,) = load_sessions(p, "servecheck")
    assert [(t.tokens, t.max_tokens, t.delay_s) for t in s.turns] == [(100, 20, 0.0), (60, 10, 3.0)]


@pytest.mark.parametrize(
    ("text", "fmt", "message"),
    [
        pytest.param("{not json\n", "auto", ":1: not a JSON object", id="bad-json"),
        pytest.param(
            '{"session_id": "a", "turns": []}\n', "aiperf", ":1: an AIPerf", id="no-turns"
        ),
        pytest.param(
            '{"turns": [{"text": "x", "delay": -1}]}\n', "aiperf", "delay must be >= 0", id="neg"
        ),
        pytest.param('{"t": 0, "input_tokens": 5}\n', "servecheck", "no sessions", id="none"),
    ],
)
def test_a_bad_sessions_file_is_a_usage_error_naming_it(
    tmp_path: Path, text: str, fmt: str, message: str
) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(UsageError, match="bad.jsonl") as err:
        load_sessions(p, fmt)
    assert message in str(err.value)


def test_recorded_sessions_are_replayed_turn_by_turn_with_their_delays(tmp_path: Path) -> None:
    p = tmp_path / "aiperf.jsonl"
    p.write_text(
        json.dumps({"session_id": "x", "turns": [{"text": "one"}, {"text": "two", "delay": 800}]})
        + "\n"
    )
    pool = _pool(AgentShape(fork=1.0), sessions=load_sessions(p))
    rng = random.Random(0)
    t0 = pool.checkout(0.0, rng)
    assert t0.messages[-1]["content"].endswith("one")
    pool.checkin(t0, True, "first answer", _usage(t0), 1.0, rng)
    assert not pool.ready(1.5)
    t1 = pool.checkout(1.8, rng)
    assert t1.fields["tool_wait_s"] == 0.8 and t1.fields["session_end"] == "done"
    assert t1.messages[-2:] == [
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "two"},
    ]


# ------------------------------------------------------------------ the summary section


def _rec(session: str, turn: int, sent: float, done: float, **kw: Any) -> dict[str, Any]:
    ttft = kw.pop("ttft", 0.1)
    return {
        "session": session,
        "turn": turn,
        "t_sent": sent,
        "t_done": done,
        "ttft": ttft,
        "e2e": done - sent,
        "error": kw.pop("error", None),
        "prompt_tokens": kw.pop("prompt_tokens", 100),
        **kw,
    }


def test_agent_section_by_turn_session_e2e_fan_out_and_tool_wait() -> None:
    recs = [
        _rec("s1", 0, 0.0, 1.0, context_tokens=900, cached_tokens=0),
        _rec("s1.0b0", 0, 1.0, 2.0, parent="s1@0", branch=0, context_tokens=1500),
        _rec("s1.0b1", 0, 1.0, 3.5, parent="s1@0", branch=1, session_end="done"),
        _rec("s1.0b0", 1, 2.5, 3.0, parent="s1@0", branch=0, tool_wait_s=0.5, session_end="done"),
        _rec("s1", 1, 3.5, 4.0, ttft=0.3, context_tokens=2100, cached_tokens=80),
        _rec("s1", 2, 5.0, 6.0, ttft=0.2, tool_wait_s=1.0, session_end="done", cached_tokens=90),
        _rec("s2", 0, 0.0, 1.0, ttft=None, error="http-500"),
    ]
    a = agent_section(recs, {"note": "the engine exposes no prefix-cache counters"})
    assert a is not None
    assert (a.sessions, a.completed, a.ended_by_error, a.branches, a.forks) == (2, 1, 1, 2, 1)
    assert a.by_turn["0"].count == 4 and a.by_turn["0"].errors == 1
    # Turn 1: only the root's request reported cached tokens (80 of its 100).
    assert a.by_turn["1"].cache_hit_rate == 0.8
    assert a.by_turn["1"].cache_source == "usage.cached_tokens"
    assert a.by_turn["2"].ttft_ms["p95"] == pytest.approx(200, rel=0.01)
    assert set(a.by_context) == {"<1k", "1k-2k", "2k-4k"}
    assert a.session_e2e_ms["count"] == 1 and a.session_e2e_ms["p50"] == pytest.approx(
        6000, rel=0.01
    )
    assert a.fanout_ms["count"] == 1 and a.fanout_ms["p50"] == pytest.approx(2500, rel=0.01)
    assert a.tool_wait_s == 1.5 and a.tool_share == pytest.approx(
        1.5 / (1.5 + a.server_s), abs=1e-4
    )
    assert a.cache_note is None
    # turn_ttft_p95 is the worst turn's; session_e2e_p95 the completed sessions'.
    (turn_slo, e2e_slo) = judge(
        [parse_slo("turn_ttft_p95<=250ms"), parse_slo("session_e2e_p95<=5s")], a
    )
    assert not turn_slo.passed and turn_slo.observed == pytest.approx(300, rel=0.01)
    assert not e2e_slo.passed and e2e_slo.observed == pytest.approx(6000, rel=0.01)
    assert all(v.passed for v in judge([parse_slo("turn_ttft_p95<=1s")], a))


def test_a_hung_up_request_is_no_answers_e2e_in_the_turn_rows() -> None:
    """A turn row's E2E is the answers' (as the summary's and the production breakdown's): a
    request the client hung up on after 0.2 s is counted, but its time is not an E2E."""
    recs = [
        _rec("s1", 0, 0.0, 2.0, session_end="done"),
        _rec("s2", 0, 0.0, 0.2, abandoned=True, session_end="done"),
    ]
    a = agent_section(recs, None)
    assert a is not None
    row = a.by_turn["0"]
    assert row.count == 2 and row.errors == 0
    assert row.e2e_ms["count"] == 1 and row.e2e_ms["p50"] == pytest.approx(2000, rel=0.01)


def test_without_any_cache_count_the_section_says_not_measured_and_why() -> None:
    a = agent_section(
        [_rec("s", 0, 0.0, 1.0), _rec("s", 1, 1.0, 2.0, server_timings={"prompt_n": 5})],
        {"source": "vllm:prefix_cache", "queries": 10, "hits": 5, "hit_rate": 0.5},
    )
    assert a is not None and a.by_turn["1"].cache_hit_rate is None
    assert a.cache_note is not None and a.cache_note.startswith("not measured")
    assert a.engine_hit_rate == 0.5
    # llama.cpp's own per-request count (timings.cache_n) stands in for usage's.
    b = agent_section([_rec("s", 1, 0, 1, server_timings={"prompt_n": 200, "cached_n": 150})])
    assert b is not None and b.by_turn["1"].cache_hit_rate == 0.75
    assert b.by_turn["1"].cache_source == "engine timings.cache_n"


def test_no_sessions_no_section_and_agent_slos_fail_unmeasured() -> None:
    assert agent_section([{"turn": 0, "conversation": "c"}]) is None
    (v,) = judge([parse_slo("session_e2e_p95<=2s")], None)
    assert not v.passed and v.observed is None and v.note == "not an agent run"


def test_the_slo_grammar_takes_the_agent_metrics_with_a_statistic() -> None:
    slo = parse_slo("session_e2e_p95<=2s")
    assert (slo.metric, slo.stat, slo.bound, slo.unit, slo.agent) == (
        "session_e2e",
        "p95",
        2000.0,
        "ms",
        True,
    )
    assert parse_slo("turn_ttft_p99<800ms").bound == 800.0
    with pytest.raises(UsageError, match="turn_ttft needs a statistic"):
        parse_slo("turn_ttft<=1s")
    with pytest.raises(UsageError, match='did you mean "session_e2e_p95"'):
        parse_slo("sesion_e2e_p95<=1s")


def test_context_buckets() -> None:
    assert [bucket(n) for n in (10, 1024, 3000, 40_000, 200_000)] == [
        "<1k",
        "1k-2k",
        "2k-4k",
        "32k-64k",
        "128k+",
    ]


def test_a_turn_forks_only_when_its_branches_first_turn_fits() -> None:
    shape = AgentShape(turns=4, tools=2, fork=1.0, tool_wait=parse_tool_wait("0"))
    pool = _pool(shape, context_length=1100, roots_cap=1)
    rng = random.Random(6)
    first = pool.checkout(0.0, rng)
    # The server counted a long prompt: the parent's context is now close to the limit.
    pool.checkin(first, True, "long", {"prompt_tokens": 800, "completion_tokens": 10}, 0.0, rng)
    nxt = pool.checkout(0.0, rng)
    assert "branch" not in nxt.fields and (nxt.fields["session"], nxt.fields["turn"]) == (
        "w0-s1",
        1,
    )
    assert nxt.messages[-1]["role"] == "tool"  # an ordinary tool result instead of a fork
