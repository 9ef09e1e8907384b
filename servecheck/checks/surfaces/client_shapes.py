"""CLIENT-SHAPE-*: the request an agent client really sends, replayed without the client.

Each check replays one recorded, sanitised request body of one client version (a fixture in
``servecheck/checks/data/client_shapes/``, naming the client, its version and where it was
modelled from) against the target, with the target's model in place of the client's, and judges
the answer by the rules that client's parser holds: a server that refuses a field the client
always sends, or cuts its answer short, breaks that client on every request although it passes
every hand-written check. The replay needs neither node nor the client installed.

Two things are changed on replay and only these: ``model`` (the target's), and, for Claude Code,
``max_tokens`` lowered from its 32000 to :data:`REPLAY_MAX_TOKENS` so that the replay fits the
small contexts of CI models (whether a server takes agent-sized requests is another question).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from servecheck.checks.context import CONTEXT_REFUSALS, CheckContext, CheckSkipped, body_snippet
from servecheck.checks.registry import check
from servecheck.checks.surfaces import messages as msgs
from servecheck.checks.surfaces import responses as resp
from servecheck.client.http import Exchange

REPLAY_MAX_TOKENS = 256
# Without max_output_tokens an answer may be cut only where the context ends, never by a small
# default: a cut below this many tokens is the server's default, not the context.
MIN_DEFAULT_OUTPUT = 256
CLAUDE_BLOCKS = ("text", "thinking", "redacted_thinking", "tool_use")


@dataclass(frozen=True, slots=True)
class ClientShape:
    """One client's recorded request: who sent it, to which route, with which headers."""

    client: str
    package: str
    version: str
    route: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.client} {self.version}"


def load_shape(stem: str) -> ClientShape:
    """The packaged fixture ``client_shapes/<stem>.json``."""
    path = resources.files("servecheck.checks").joinpath("data", "client_shapes", f"{stem}.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    return ClientShape(
        data["client"],
        data["package"],
        data["version"],
        data["route"],
        dict(data["headers"]),
        dict(data["body"]),
    )


def replay(ctx: CheckContext, shape: ClientShape, **changes: Any) -> Exchange:
    """POST the shape's body (the target's model, ``changes`` applied) with its headers."""
    body = {**shape.body, "model": ctx.model, **changes}
    ex = ctx.post(shape.route, body, headers=shape.headers, stream=bool(body.get("stream")))
    said = ex.text[:600] if ex.status == 400 else ""
    if any(words in said.lower() for words in CONTEXT_REFUSALS):
        # Not the shape refused but its size: a CI model's context too small for even the cut
        # request (agent-sized requests are another check's question).
        raise CheckSkipped(
            f"{ctx.check_id}: the target's context cannot hold {shape.name}'s request, even "
            f"cut small: {said}"
        )
    ctx.expect(
        not ex.error and ex.status == 200,
        f"the request {shape.name} sends on {shape.route} is not served",
        expected=f"HTTP 200: every {shape.client} request has this shape",
        received=ex.describe(400),
        exchange=ex,
        hint=f"accept what {shape.name} sends (the fixture client_shapes/ names each field); "
        "a field the server cannot use is ignored or declined, never a 400 for the request",
    )
    return ex


@check(
    "CLIENT-SHAPE-CLAUDE-CODE",
    "the request Claude Code 2.1.332 sends to /v1/messages is served",
    "Claude Code's recorded streamed request (a role: system message inside messages, thinking "
    "{type: adaptive}, context_management, output_config.effort, metadata.user_id, cache_control "
    "on system, user and tool blocks, tools with draft-07 input_schema) gets 200 and an event "
    "stream in the Messages API's grammar whose content blocks are text, thinking or tool_use and "
    "whose message_delta has a stop_reason",
    requires=msgs.NEEDS,
)
def client_shape_claude_code(ctx: CheckContext) -> None:
    shape = load_shape("claude-code")
    ex = replay(ctx, shape, max_tokens=REPLAY_MAX_TOKENS)
    events = msgs.events_of(ctx, ex, f"the streamed request of {shape.name}")
    problems = msgs.order_problems(events)
    facts = msgs.stream_facts(events)
    unknown = [k for k in facts["kinds"] if k not in CLAUDE_BLOCKS]
    if unknown:
        problems.append(f"content blocks {shape.client} cannot read: {unknown}")
    if facts.get("stop_reason") not in msgs.STOP_REASONS:
        problems.append(f"message_delta stop_reason {facts.get('stop_reason')!r}")
    ctx.expect(
        not problems,
        f"the answer to {shape.name}'s request is not a stream it can read",
        expected="message_start, content blocks (text / thinking / tool_use), message_delta "
        f"with one of {list(msgs.STOP_REASONS)}, message_stop",
        received="; ".join(problems),
        exchange=ex,
    )


def _cut_short(final: dict[str, Any]) -> str | None:
    """Why a response to a request without max_output_tokens was cut by a small default."""
    details = final.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    usage = final.get("usage")
    out = usage.get("output_tokens") if isinstance(usage, dict) else None
    if final.get("status") != "incomplete" or reason != "max_output_tokens":
        return None
    if isinstance(out, int) and out >= MIN_DEFAULT_OUTPUT:
        return None  # the context ran out (a random model talks until it does)
    return f"status incomplete (max_output_tokens) after {out!r} output tokens"


@check(
    "CLIENT-SHAPE-CODEX",
    "the request Codex CLI 0.171.0 sends to /v1/responses is served in full",
    "Codex's recorded streamed request (no instructions and no max_output_tokens, its prompt as "
    "developer items; tools of type function, custom, web_search and namespace; reasoning, "
    "include, store false, prompt_cache_key), made at temperature 0, gets 200 and a stream ending "
    f"in response.completed; the answer is not cut by a default below {MIN_DEFAULT_OUTPUT} tokens "
    "and calls no tool the server cannot run (only the function tool)",
    requires=("responses", "route-accepts:/responses"),
)
def client_shape_codex(ctx: CheckContext) -> None:
    shape = load_shape("codex")
    ex = replay(ctx, shape, temperature=0)
    ctx.ok_stream(ex, f"the streamed request of {shape.name}")
    assert ex.stream is not None  # noqa: S101 - ok_stream guarantees it
    events = [e for e in ex.stream.chunks if isinstance(e, dict)]
    final = resp.terminal(events) or {}
    functions = {t["name"] for t in shape.body["tools"] if t.get("type") == "function"}
    problems = []
    kinds = [e.get("type") for e in events]
    if "response.completed" not in kinds:
        problems.append(f"no response.completed event (the stream ends with {kinds[-3:]})")
    cut = _cut_short(final)
    if cut:
        problems.append(cut + ", though the request set no max_output_tokens")
    calls = [i for i in final.get("output") or [] if isinstance(i, dict)]
    wrong = [i.get("name") for i in calls if i.get("type") == "function_call"]
    wrong = [n for n in wrong if n not in functions]
    if wrong:
        problems.append(f"function calls of tools that are no functions: {wrong}")
    ctx.expect(
        not problems,
        f"{shape.name} cannot finish a turn on this answer",
        expected="a stream ending in response.completed, its answer whole",
        received="; ".join(problems) + f" -- final response {body_snippet(final, 300)}",
        exchange=ex,
        hint="without max_output_tokens generate up to the context's end, as OpenAI's API does",
    )
