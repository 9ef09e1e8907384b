"""TOOLS-* cases users hit beyond one forced call: parallel calls and a call cut by max_tokens.

- ``parallel_tool_calls: false`` must give at most one call (vLLM honours it since PR#26233;
  SGLang ignored it, sglang#9696).
- A call cut by ``max_tokens`` must end with ``length``: agents run a ``tool_calls`` answer, and
  run it with half its arguments (vllm#9053, PR#46303).
- Several parallel calls stream with distinct indexes and ids, or the SDK merges them into one
  call with mixed arguments (vllm#18412).

The prompt names both tools, so a server that makes parallel calls (the reference server with
``tool_choice: required``; vLLM piles calls up with parallel calls on) makes several.
"""

from __future__ import annotations

import json
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces.json_mode import first_choice
from servecheck.checks.surfaces.tools import (
    HINT_TOOLS,
    TOOL_NAMES,
    _stream_calls,
    tool_request,
)

BOTH = "Call get_weather for Paris and get_time for UTC, both at once."
CUT_TOKENS = 3  # fewer than any complete call's arguments: {"city": "Paris"} is ~9 tokens


def _body(ctx: CheckContext, parallel: bool, **params: Any) -> dict[str, Any]:
    body = tool_request(ctx, "required", parallel_tool_calls=parallel, **params)
    body["messages"] = [{"role": "user", "content": BOTH}]
    return body


@check(
    "TOOLS-PARALLEL-OFF",
    "parallel_tool_calls false gives at most one call",
    "with a prompt asking for both tools, tool_choice 'required' and parallel_tool_calls false, "
    "choices[0].message.tool_calls holds exactly one call",
    requires=("tools",),
)
def tools_parallel_off(ctx: CheckContext) -> None:
    ex = ctx.post("/chat/completions", _body(ctx, parallel=False))
    choice = first_choice(ctx, ctx.ok_json(ex, "chat completion with tools"), ex)
    calls = (choice.get("message") or {}).get("tool_calls") or []
    ctx.expect(
        isinstance(calls, list) and len(calls) >= 1,
        "tool_choice required returned no tool call",
        expected="one tool call",
        received=f"finish_reason {choice.get('finish_reason')!r}, {body_snippet(choice.get('message'), 300)}",
        exchange=ex,
        hint=HINT_TOOLS,
    )
    names = [(c.get("function") or {}).get("name") for c in calls if isinstance(c, dict)]
    ctx.expect(
        len(calls) == 1,
        f"parallel_tool_calls false returned {len(calls)} calls",
        expected="exactly one tool call",
        received=f"calls to {names}",
        exchange=ex,
        hint="the engine ignores parallel_tool_calls (vLLM honours it since PR#26233); clients "
        "that run one call per turn drop the others",
    )


@check(
    "TOOLS-LENGTH",
    "a tool call cut by max_tokens finishes with 'length'",
    f"a forced call with max_tokens {CUT_TOKENS} (too few for its arguments) ends with "
    "finish_reason 'length'; 'tool_calls' is accepted only when every call's arguments are "
    "complete JSON",
    requires=("tools",),
)
def tools_length(ctx: CheckContext) -> None:
    ex = ctx.post("/chat/completions", _body(ctx, parallel=False, max_tokens=CUT_TOKENS))
    data = ctx.ok_json(ex, "chat completion with tools and a tiny max_tokens")
    choice = first_choice(ctx, data, ex)
    calls = (choice.get("message") or {}).get("tool_calls") or []
    reason = choice.get("finish_reason")
    broken = []
    for i, call in enumerate(calls if isinstance(calls, list) else []):
        raw = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
        try:
            json.loads(raw if isinstance(raw, str) else "")
        except ValueError:
            broken.append(f"tool_calls[{i}].arguments {str(raw)[:80]!r}")
    ctx.expect(
        not (reason == "tool_calls" and broken),
        "a tool call cut by max_tokens says finish_reason 'tool_calls'",
        expected=f"finish_reason 'length' for a call cut at {CUT_TOKENS} tokens",
        received=f"finish_reason {reason!r} with cut arguments: {'; '.join(broken) or 'no calls'}",
        exchange=ex,
        hint="agents execute a 'tool_calls' answer; with cut arguments they crash or act on half "
        "a request (vllm#9053, fixed by PR#46303)",
    )
    ctx.expect(
        reason in ("length", "tool_calls"),
        "a cut tool call ends with an unexpected finish_reason",
        expected="finish_reason 'length'",
        received=f"finish_reason {reason!r}, message {body_snippet(choice.get('message'), 200)}",
        exchange=ex,
    )


@check(
    "TOOLS-PARALLEL-STREAM",
    "parallel streamed tool calls have distinct indexes and ids",
    "with a prompt asking for both tools, tool_choice 'required' and parallel_tool_calls true, a "
    "stream with several calls gives each its own index and id, its name once, and arguments "
    "that parse as JSON (skipped when the server makes a single call)",
    requires=("tools", "streaming"),
)
def tools_parallel_stream(ctx: CheckContext) -> None:
    body = _body(ctx, parallel=True, stream=True)
    ex = ctx.ok_stream(
        ctx.post("/chat/completions", body, stream=True), "streamed chat completion with tools"
    )
    calls, problems = _stream_calls(ctx, ex)
    names = [n for slot in calls.values() for n in slot["names"]]
    if len(names) < 2:
        raise CheckSkipped(
            f"{ctx.check_id}: the server made {len(names)} call(s) for a prompt naming two tools; "
            "parallel streaming could not be observed"
        )
    ids = [slot["id"] for slot in calls.values()]
    if len(set(ids)) != len(ids):
        problems.append(f"calls share ids: {ids}")
    finish = [
        c.get("finish_reason")
        for chunk in ex.stream.chunks  # type: ignore[union-attr]
        for c in chunk.get("choices") or []
        if isinstance(c, dict) and c.get("finish_reason")
    ]
    for index, slot in sorted(calls.items()):
        if finish[-1:] == ["length"] and index == max(calls):
            continue  # the last call may be cut by max_tokens, and then says so
        try:
            json.loads(slot["arguments"])
        except ValueError:
            problems.append(f"call {index}: arguments {slot['arguments'][:80]!r} are not JSON")
        if slot["names"] and slot["names"][0] not in TOOL_NAMES:
            problems.append(f"call {index}: name {slot['names'][0]!r} is not an offered tool")
    ctx.expect(
        not problems,
        "parallel streamed tool calls cannot be told apart",
        expected="each call: its own index, an id, the name once, JSON arguments",
        received="; ".join(problems[:4]) + f" -- {len(calls)} index(es), names {names}",
        exchange=ex,
        hint="the openai SDK merges tool-call deltas by index: shared indexes mix two calls into "
        "one with both names and concatenated arguments",
    )
