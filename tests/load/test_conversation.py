"""Multi-turn and shared-prefix request building, the breakdown, the engine counters and the
reference server's prefix cache (no Locust: the pure parts, in the pytest process)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from servecheck.analysis.breakdown import ENGINE_FILE, scenario_sections
from servecheck.analysis.engine_cache import read_counters, run_delta
from servecheck.analysis.typed_json import to_json
from servecheck.errors import UsageError
from servecheck.load.workload.conversation import (
    ConversationPool,
    SharedPrefixes,
    reply_text,
)
from servecheck.load.workload.prompts import Prompt
from servecheck.records.record import RequestRecord, cached_tokens
from servecheck.reference.prefix_cache import PrefixCache, ttft_s
from servecheck.reference.server import ServerConfig
from servecheck.report.load_text import format_breakdown
from servecheck.scenarios._options import env_think_s, env_turns


def scenario_breakdown(records: Any, run_dir: Any = None) -> dict[str, Any]:
    """The ``turns`` and ``prefix_cache`` sections as summary.json writes them (absent ones left out)."""
    turns, prefix_cache = scenario_sections(records, run_dir)
    out: dict[str, Any] = {}
    if turns is not None:
        out["turns"] = to_json(turns)
    if prefix_cache is not None:
        out["prefix_cache"] = to_json(prefix_cache)
    return out


def _sse(*pieces: str, usage: dict[str, Any] | None = None, crlf: bool = False) -> bytes:
    sep = "\r\n\r\n" if crlf else "\n\n"
    out = [
        'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}' + sep,
    ]
    for p in pieces:
        out.append(
            "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": p}}]}) + sep
        )
    out.append('data: {"choices":[{"index":1,"delta":{"content":"other choice"}}]}' + sep)
    if usage:
        out.append("data: " + json.dumps({"choices": [], "usage": usage}) + sep)
    out.append("data: [DONE]" + sep)
    return "".join(out).encode()


def test_reply_text_joins_content_of_choice_zero_only() -> None:
    raw = _sse("Hello", ", wor", "ld \u00e9", usage={"prompt_tokens": 3})
    assert reply_text(raw) == "Hello, world \u00e9"
    assert reply_text(_sse("a", "b", crlf=True)) == "ab"
    # Bytes cut anywhere (as reads arrive) join to the same text.
    assert reply_text(raw[:37] + raw[37:]) == "Hello, world \u00e9"
    assert reply_text(b"data: not json\n\ndata: [DONE]\n\n") == ""


def _pool(
    turns: int = 3, think: float = 0.0, ctx: int | None = None, **kw: Any
) -> ConversationPool:
    prompts = [Prompt(f"question {i}", 10, 20) for i in range(100)]
    it = iter(prompts)
    return ConversationPool(
        turns=turns, think_s=think, pick=lambda rng: next(it), context_length=ctx, **kw
    )


def test_each_turn_resends_the_real_replies_and_counts_history_from_usage() -> None:
    pool = _pool(turns=3)
    rng = random.Random(0)
    first = pool.checkout(0.0, rng)
    assert first.fields == {"conversation": "c-1", "turn": 0, "history_tokens": 0}
    assert first.capture and first.messages[-1]["content"].endswith("question 0")
    pool.checkin(first, True, "the REAL answer", {"prompt_tokens": 14, "completion_tokens": 4}, 1.0)
    second = pool.checkout(1.0, rng)
    assert second.fields == {"conversation": "c-1", "turn": 1, "history_tokens": 18}
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert second.messages[1]["content"] == "the REAL answer"
    assert second.messages[2]["content"] == "question 1"
    # No usage from the server: the history is estimated from what was sent and received.
    pool.checkin(second, True, "x" * 40, None, 2.0)
    third = pool.checkout(2.0, rng)
    assert third.fields["turn"] == 2 and third.fields["history_tokens"] == 18 + 10 + 10
    pool.checkin(third, True, "done", {"prompt_tokens": 60, "completion_tokens": 5}, 3.0)
    # Three turns done: the next request opens a new conversation.
    assert pool.checkout(3.0, rng).fields["conversation"] == "c-2"
    assert pool.as_dict()["completed"] == 1


def test_think_time_holds_a_conversation_and_open_loop_starts_another() -> None:
    pool = _pool(turns=4, think=5.0)
    rng = random.Random(0)
    a = pool.checkout(0.0, rng)
    pool.checkin(a, True, "r", {"prompt_tokens": 14, "completion_tokens": 1}, 1.0)
    assert pool.wait_s(2.0) == pytest.approx(4.0)
    # An arrival during the think time gets a new conversation ...
    assert pool.checkout(2.0, rng).fields["conversation"] == "c-2"
    # ... and after it, the waiting one continues.
    nxt = pool.checkout(6.0, rng)
    assert nxt.fields["conversation"] == "c-1" and nxt.fields["turn"] == 1


def test_a_failed_turn_or_a_full_context_ends_the_conversation() -> None:
    pool = _pool(turns=5)
    rng = random.Random(0)
    a = pool.checkout(0.0, rng)
    pool.checkin(a, False, "", None, 1.0)
    assert pool.as_dict()["ended_by_error"] == 1
    assert pool.checkout(1.0, rng).fields["conversation"] == "c-2"

    small = _pool(turns=5, ctx=16 + 30 + 30)  # room for one prompt (10) + answer (20) + history 30
    b = small.checkout(0.0, rng)
    small.checkin(b, True, "r", {"prompt_tokens": 25, "completion_tokens": 20}, 0.0)
    c = small.checkout(0.0, rng)  # 45 history + 30 does not fit in 60: a new conversation instead
    assert c.fields["turn"] == 0 and small.as_dict()["ended_by_context"] == 1


def test_shared_prefixes_are_distinct_per_group_and_requests_own_their_message() -> None:
    sp = SharedPrefixes.build(64, 3, seed=1)
    texts = [t for t, _ in sp.texts]
    assert len(set(texts)) == 3 and len({t[:40] for t in texts}) == 3
    rng = random.Random(0)
    reqs = [sp.request(Prompt("same question", 5, 8), rng) for _ in range(30)]
    groups = {r.fields["prefix_group"] for r in reqs}
    assert groups == {"g0", "g1", "g2"}
    assert len({r.messages[1]["content"] for r in reqs}) == 30
    for r in reqs:
        g = int(r.fields["prefix_group"][1:])
        assert r.messages[0] == {"role": "system", "content": texts[g]}


def test_scenario_settings_from_the_environment_are_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SERVECHECK_TURNS", "6")
    monkeypatch.setenv("SERVECHECK_THINK_S", "1.5")
    assert env_turns() == 6 and env_think_s() == 1.5
    monkeypatch.setenv("SERVECHECK_TURNS", "0")
    with pytest.raises(UsageError, match="SERVECHECK_TURNS='0': must be >= 1"):
        env_turns()
    monkeypatch.setenv("SERVECHECK_THINK_S", "soon")
    with pytest.raises(UsageError, match="not a number of seconds"):
        env_think_s()


def test_records_carry_the_scenario_fields_only_when_set() -> None:
    plain = json.loads(RequestRecord("t", "chat", "w", 1, 0.0, 0.0).to_json())
    assert "turn" not in plain and "cached_tokens" not in plain
    rec = RequestRecord("t", "m", "w", 1, 0.0, 0.0, turn=2, conversation="c-1", history_tokens=90)
    rec.cached_tokens = 64
    d = json.loads(rec.to_json())
    assert (d["turn"], d["conversation"], d["history_tokens"], d["cached_tokens"]) == (
        2,
        "c-1",
        90,
        64,
    )
    assert RequestRecord.from_dict(d).turn == 2
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": 32}}) == 32
    assert cached_tokens({"prompt_tokens_details": None}) is None
    assert cached_tokens({"prompt_tokens_details": {"cached_tokens": True}}) is None


def _rec(turn: int | None, ttft: float, pt: int, ct: int | None, **kw: Any) -> dict[str, Any]:
    return {
        "turn": turn,
        "ttft": ttft,
        "e2e": ttft * 3,
        "prompt_tokens": pt,
        "cached_tokens": ct,
        "error": None,
        **kw,
    }


def test_breakdown_by_turn_and_cache_split(tmp_path: Any) -> None:
    recs = [
        _rec(0, 0.100, 50, 0, conversation="a", history_tokens=0),
        _rec(1, 0.040, 100, 64, conversation="a", history_tokens=60),
        _rec(0, 0.110, 50, 0, conversation="b", history_tokens=0),
        _rec(1, 0.050, 100, 48, conversation="b", history_tokens=62),
        {**_rec(2, 0.0, 150, None, conversation="b"), "error": "http-500", "ttft": None},
    ]
    (tmp_path / ENGINE_FILE).write_text(
        json.dumps(
            {"source": "vllm:prefix_cache", "queries": 300.0, "hits": 112.0, "hit_rate": 0.3733}
        )
    )
    out = scenario_breakdown(recs, tmp_path)
    turns = out["turns"]
    assert turns["conversations"] == 2
    t0, t1, t2 = (turns["by_turn"][k] for k in ("0", "1", "2"))
    assert t0["count"] == 2 and t0["ttft_ms"]["p50"] == pytest.approx(100, rel=0.01)
    assert t1["history_tokens_mean"] == 61.0 and t1["cache_hit_rate"] == pytest.approx(112 / 200)
    assert t2["errors"] == 1 and t2["ttft_ms"]["count"] == 0
    pc = out["prefix_cache"]
    assert pc["requests_reporting"] == 4 and pc["requests_hit"] == 2
    assert pc["hit_rate"] == pytest.approx(112 / 300, abs=1e-4)
    assert pc["ttft_cached_ms"]["count"] == 2 and pc["ttft_uncached_ms"]["count"] == 2
    assert pc["ttft_first_of_group_ms"]["count"] == 2  # turn 0 of each conversation
    assert pc["engine"]["hit_rate"] == 0.3733
    text = "\n".join(format_breakdown(*scenario_sections(recs, tmp_path)))  # read typed
    assert "turns (2 conversations)" in text and "hit rate 37.3% of prompt tokens" in text
    assert "engine vllm:prefix_cache): hit rate 37.3%" in text
    # A plain chat run's records have none of these fields: nothing is added.
    assert scenario_breakdown([{"ttft": 0.1, "error": None, "prompt_tokens": 5}]) == {}


def test_engine_counters_are_read_and_a_restart_is_not_a_delta() -> None:
    text = (
        "# TYPE vllm:prefix_cache_queries counter\n"
        'vllm:prefix_cache_queries_total{engine="0"} 100\n'
        'vllm:prefix_cache_queries_total{engine="1"} 50\n'
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{engine="0"} 30\n'
        'vllm:prefix_cache_hits_total{engine="1"} 15\n'
    )
    c = read_counters(text)
    assert c == {"source": "vllm:prefix_cache", "queries": 150.0, "hits": 45.0}
    assert read_counters("# TYPE x gauge\nx 1\n") is None
    after = {"source": "vllm:prefix_cache", "queries": 250.0, "hits": 125.0}
    assert run_delta(c, after) == {
        "source": "vllm:prefix_cache",
        "queries": 100.0,
        "hits": 80.0,
        "hit_rate": 0.8,
    }
    assert "restarted" in run_delta(after, c)["note"]
    assert run_delta({"note": "x"}, {"note": "no counters here"})["note"] == "no counters here"


def test_reference_prefix_cache_matches_whole_leading_blocks_only() -> None:
    pc = PrefixCache(capacity_blocks=8, block_size=4)
    a = list(range(10))
    assert pc.lookup_insert(a, 10) == 0
    assert pc.lookup_insert(a, 10) == 8  # two full blocks; the tail is always computed
    b = [*range(4), 99, *range(5, 10)]  # differs in block 2: only block 1 matches
    assert pc.lookup_insert(b, 10) == 4
    assert pc.lookup_insert(list(range(8)), 8) == 7  # never the whole prompt
    assert (pc.queries, pc.hits) == (38, 19)
    big = PrefixCache(capacity_blocks=2, block_size=4)
    big.lookup_insert(list(range(12)), 12)  # 3 blocks, capacity 2: the oldest is evicted
    assert big.lookup_insert(list(range(12)), 12) == 0


def test_reference_ttft_shrinks_with_the_cached_share() -> None:
    cfg = ServerConfig(ttft_ms=100.0)
    assert ttft_s(cfg, None, 100) == pytest.approx(0.1)
    assert ttft_s(cfg, 0, 100) == pytest.approx(0.1)
    assert ttft_s(cfg, 80, 100) == pytest.approx(0.1 * (0.25 + 0.75 * 0.2))


def test_reply_text_fast_path_equals_parsing_every_chunk() -> None:
    from servecheck.load.workload.conversation import _parsed_text

    rng = random.Random(5)
    pieces = ["a", ' "q" ', "\\n", "\u00e9\u6a21", "\U0001f642", "tab\there", "", "x\\y"]
    events: list[dict[str, Any]] = []
    for _ in range(300):
        kind = rng.randrange(6)
        p = rng.choice(pieces)
        if kind == 0:
            events.append({"choices": [{"index": 0, "delta": {"content": p}}]})
        elif kind == 1:
            events.append({"choices": [{"index": 1, "delta": {"content": p}}]})
        elif kind == 2:
            events.append({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]})
        elif kind == 3:
            events.append({"choices": [], "usage": {"prompt_tokens": 1}})
        elif kind == 4:
            events.append({"choices": [{"index": 0, "delta": {"content": p, "role": "x"}}]})
        else:
            events.append(
                {"choices": [{"index": 0, "delta": {"content": p}}, {"index": 1, "delta": {}}]}
            )
    datas = [json.dumps(e, separators=(",", ":"), ensure_ascii=rng.random() < 0.5) for e in events]
    raw = "".join(f"data: {d}\n\n" for d in datas).encode() + b"data: [DONE]\n\n"
    assert reply_text(raw) == "".join(_parsed_text(d.encode()) for d in datas)
