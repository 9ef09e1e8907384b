"""The reference server's ``POST /v1/responses`` (the OpenAI Responses API, stateless).

Served beside chat completions by :func:`install` (called from ``server.build_app``). It speaks
what clients of the Responses API rely on: a ``response`` object with ``output`` items
(``message`` with ``output_text`` parts, ``function_call``), ``instructions`` in the prompt,
``function_call_output`` turns, ``text.format`` structured output, ``max_output_tokens`` cuts
marked ``incomplete``, usage, error objects, and the typed event stream (``response.created`` ...
``response.output_text.delta`` ... ``response.completed``). Every ``responses-*`` fault in
:mod:`servecheck.reference.faults` switches one defect on here.

Generation reuses the chat path's deterministic model: the same conversation gives the same text
at temperature 0, streamed or not.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from aiohttp import web

from servecheck.reference import agent, cases, grid_faults, model, response_store
from servecheck.reference import logprobs as reflogprobs
from servecheck.reference.http import (
    STATE,
    ApiError,
    State,
    check_ready,
    error_response,
    expect,
    is_int,
    is_num,
    read_json,
    validate_common,
    write_event,
)

INPUT_ROLES = {"user", "system", "developer", "assistant"}
TOOL_TEXT_OPEN, TOOL_TEXT_CLOSE = "<tool_call>", "</tool_call>"  # responses-tool-as-text
LOGPROBS_INCLUDE = "message.output_text.logprobs"
# Tool types other than function that the Responses API defines (hosted tools, client-side
# tools such as custom and local_shell) and Codex CLI's namespace (its multi-agent tools).
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "file_search",
        "code_interpreter",
        "mcp",
        "computer_use_preview",
        "image_generation",
        "local_shell",
        "shell",
        "custom",
        "apply_patch",
        "namespace",
    }
)


@dataclass(slots=True)
class Turn:
    """A validated request, reduced to what generation needs."""

    messages: list[dict[str, Any]]  # chat-style, for the prompt count and the generation key
    tools: list[dict[str, Any]]
    tool_choice: Any
    fmt: dict[str, Any]
    max_output_tokens: int | None
    call_ids: list[str] = field(default_factory=list)
    top_logprobs: int | None = None  # None: include names no output_text logprobs
    # chat-style, without instructions: what a response stored for previous_response_id keeps
    conversation: list[dict[str, Any]] = field(default_factory=list)


def _fault(state: State, name: str) -> bool:
    return name in state.faults


def _input_items(state: State, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """``input`` as chat-style messages (and the call ids a function_call_output may answer)."""
    raw = body.get("input")
    if isinstance(raw, str):
        expect(raw != "", "'input' must not be empty", "input")
        return [{"role": "user", "content": raw}], []
    expect(
        isinstance(raw, list) and bool(raw),
        "'input' is required: a string or a non-empty list of input items",
        "input",
    )
    assert isinstance(raw, list)
    messages: list[dict[str, Any]] = []
    calls: list[str] = []
    for i, item in enumerate(raw):
        expect(isinstance(item, dict), f"input[{i}] must be an object", f"input[{i}]")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            expect(
                role in INPUT_ROLES,
                f"input[{i}].role must be one of {sorted(INPUT_ROLES)}, got {role!r}",
                f"input[{i}].role",
            )
            if role == "developer" and _fault(state, "responses-developer-rejected"):
                raise ApiError(
                    400, f"input[{i}].role: unknown role 'developer'", param=f"input[{i}].role"
                )
            _replayed_ids(state, item, i)
            if "phase" in item and _fault(state, "responses-phase-rejected"):
                raise ApiError(
                    400, f"input[{i}]: unexpected field 'phase'", param=f"input[{i}].phase"
                )
            expect(
                item.get("phase") in (None, "commentary", "final_answer"),
                f"input[{i}].phase must be commentary or final_answer",
                f"input[{i}].phase",
            )
            content = item.get("content")
            if (
                role == "assistant"
                and isinstance(content, str)
                and _fault(state, "responses-assistant-string-rejected")
            ):
                raise ApiError(
                    400,
                    f"input[{i}].content: an assistant message needs output_text parts",
                    param=f"input[{i}].content",
                )
            ok = isinstance(content, str) or (
                isinstance(content, list)
                and all(
                    isinstance(p, dict)
                    and p.get("type") in ("input_text", "output_text")
                    and isinstance(p.get("text"), str)
                    for p in content
                )
            )
            expect(
                ok,
                f"input[{i}].content must be a string or a list of input_text parts",
                f"input[{i}].content",
            )
            if role in ("system", "developer") and _fault(state, "responses-system-item-dropped"):
                continue  # only `instructions` would reach the prompt
            messages.append({"role": role, "content": model.content_text(content)})
        elif kind == "function_call":
            _replayed_ids(state, item, i)
            if "call_id" not in item and _fault(state, "responses-call-id-optional"):
                item = {**item, "call_id": f"call_{secrets.token_hex(6)}"}  # made up, not refused
            for key in ("call_id", "name", "arguments"):
                expect(
                    isinstance(item.get(key), str),
                    f"input[{i}].{key} must be a string",
                    f"input[{i}].{key}",
                )
            calls.append(item["call_id"])
            messages.append({"role": "assistant", "content": item["name"] + item["arguments"]})
        elif kind == "function_call_output":
            if _fault(state, "responses-tool-output-rejected"):
                raise ApiError(400, f"input[{i}]: unsupported input item type", param=f"input[{i}]")
            if "call_id" not in item:
                _crash_on_bad_item(state)
            output = item.get("output")
            if isinstance(output, list) and _fault(state, "responses-output-parts-rejected"):
                raise ApiError(
                    400, f"input[{i}].output must be a string", param=f"input[{i}].output"
                )
            expect(
                isinstance(item.get("call_id"), str)
                and (isinstance(output, str) or _parts(output)),
                f"input[{i}] needs a call_id string and an output string or input_text parts",
                f"input[{i}]",
            )
            expect(
                item["call_id"] in calls,
                f"input[{i}].call_id {item['call_id']!r} answers no function_call earlier in input",
                f"input[{i}].call_id",
            )
            messages.append({"role": "tool", "content": model.content_text(output)})
        else:
            raise ApiError(
                400,
                f"input[{i}].type must be message, function_call or function_call_output, got {kind!r}",
                param=f"input[{i}].type",
            )
    return messages, calls


def _parts(content: Any) -> bool:
    """A non-empty list of text parts (input_text, or output_text in replayed turns)."""
    return (
        isinstance(content, list)
        and bool(content)
        and all(
            isinstance(p, dict)
            and p.get("type") in ("input_text", "output_text")
            and isinstance(p.get("text"), str)
            for p in content
        )
    )


def _replayed_ids(state: State, item: dict[str, Any], i: int) -> None:
    """responses-replay-needs-ids: a replayed function_call, or assistant item of output_text
    parts, must carry the id and status its output item had (the API makes both optional)."""
    replayed = item.get("type") == "function_call" or (
        item.get("role") == "assistant" and isinstance(item.get("content"), list)
    )
    if replayed and _fault(state, "responses-replay-needs-ids"):
        for key in ("id", "status"):
            if not isinstance(item.get(key), str):
                raise ApiError(400, f"input[{i}].{key} is required", param=f"input[{i}].{key}")


def _builtin(state: State, tool: Any) -> bool:
    """Whether ``tool`` is a hosted or client-side tool (web_search, namespace, custom, ...):
    accepted and never called, as a server that cannot run it declines it (Codex CLI always
    offers some); responses-builtin-tools-rejected refuses the whole request instead."""
    if not isinstance(tool, dict) or tool.get("type") == "function":
        return False
    _crash_on_bad_item(state)
    if _fault(state, "responses-builtin-tools-rejected"):
        return False  # refused below, naming the shape a function tool needs
    return tool.get("type") in HOSTED_TOOLS  # a type nobody defined is still a 400


def _tools(state: State, body: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    offered = body.get("tools") or []
    expect(isinstance(offered, list), "tools must be a list", "tools")
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(offered):
        if _builtin(state, tool):
            continue
        expect(
            isinstance(tool, dict)
            and tool.get("type") == "function"
            and isinstance(tool.get("name"), str),
            f"tools[{i}] must be {{type: function, name, parameters}}",
            f"tools[{i}]",
        )
        try:
            jsonschema.Draft202012Validator.check_schema(tool.get("parameters") or {})
        except jsonschema.SchemaError as exc:
            raise ApiError(
                400,
                f"tools[{i}].parameters is not a valid JSON Schema: {exc.message}",
                param=f"tools[{i}].parameters",
            ) from None
        tools.append(tool)
    choice = body.get("tool_choice", "auto")
    names = [t["name"] for t in tools]
    if isinstance(choice, dict):
        expect(
            choice.get("type") == "function" and isinstance(choice.get("name"), str),
            "tool_choice must be none, auto, required or {type: function, name}",
            "tool_choice",
        )
        expect(
            choice["name"] in names,
            f"tool_choice names {choice['name']!r}, which is not in tools",
            "tool_choice",
        )
    else:
        expect(
            choice in ("none", "auto", "required"),
            "tool_choice must be none, auto, required or an object",
            "tool_choice",
        )
        expect(choice != "required" or bool(tools), "tool_choice required needs tools", "tools")
    return tools, choice


def _crash_on_bad_item(state: State) -> None:
    """responses-item-keyerror-500: a handler that indexes an input item's call_id or a tool's
    function fields without validating them first, so the KeyError escapes as a 500."""
    if _fault(state, "responses-item-keyerror-500"):
        raise ApiError(500, "Internal Server Error", "server_error")


def _top_logprobs(state: State, body: dict[str, Any]) -> int | None:
    """The top_logprobs count when include asks for output_text logprobs, else None."""
    include = body.get("include")
    expect(
        include is None or (isinstance(include, list) and all(isinstance(x, str) for x in include)),
        "include must be a list of strings",
        "include",
    )
    top = body.get("top_logprobs")
    expect(
        top is None or (is_int(top) and 0 <= top <= 20),
        "top_logprobs must be an integer in 0..20",
        "top_logprobs",
    )
    if LOGPROBS_INCLUDE not in (include or []) or _fault(state, "responses-logprobs-ignored"):
        return None
    return top or 0


def _format(state: State, body: dict[str, Any]) -> dict[str, Any]:
    text = body.get("text")
    if text is None:
        return {"type": "text"}
    expect(isinstance(text, dict), "text must be an object", "text")
    fmt = text.get("format", {"type": "text"})
    if _fault(state, "responses-format-unchecked") and isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind not in ("text", "json_object", "json_schema") or (
            kind == "json_schema" and not isinstance(fmt.get("schema"), dict)
        ):
            return {"type": "text"}  # what it does not understand, it serves as plain text
    expect(
        isinstance(fmt, dict) and fmt.get("type") in ("text", "json_object", "json_schema"),
        "text.format.type must be text, json_object or json_schema",
        "text.format",
    )
    if fmt["type"] == "json_schema":
        expect(
            isinstance(fmt.get("name"), str) and isinstance(fmt.get("schema"), dict),
            "text.format json_schema needs name and schema",
            "text.format",
        )
        try:
            jsonschema.Draft202012Validator.check_schema(fmt["schema"])
        except jsonschema.SchemaError as exc:
            raise ApiError(
                400, f"text.format.schema is not a valid JSON Schema: {exc.message}", "text.format"
            ) from None
    return fmt


def _validate(state: State, body: dict[str, Any]) -> Turn:
    seed = body.get("seed")
    if (
        isinstance(seed, int)
        and not -(2**63) <= seed < 2**63
        and _fault(state, "responses-seed-500")
    ):
        # this route hands the seed to the sampler before the shared range checks run
        raise ApiError(500, "internal error: OverflowError (seed)", "server_error")
    validate_common(state, body)
    messages, calls = _input_items(state, body)
    messages = conversation = response_store.chain(state, body, messages)
    instructions = body.get("instructions")
    expect(
        instructions is None or isinstance(instructions, str),
        "instructions must be a string",
        "instructions",
    )
    if instructions and not _fault(state, "responses-instructions-dropped"):
        messages = [{"role": "system", "content": instructions}, *messages]
    mot = body.get("max_output_tokens")
    expect(
        mot is None or (is_int(mot) and mot >= 1),
        "max_output_tokens must be an integer >= 1",
        "max_output_tokens",
    )
    tools, choice = _tools(state, body)
    return Turn(
        messages,
        tools,
        choice,
        _format(state, body),
        mot,
        calls,
        _top_logprobs(state, body),
        conversation,
    )


@dataclass(slots=True)
class Output:
    text_pieces: list[str]
    call: dict[str, Any] | None  # {"call_id", "name", "arguments"}
    incomplete: bool
    prompt_tokens: int
    output_tokens: int
    logprobs: list[float] = field(default_factory=list)  # one per text piece
    extra_calls: list[dict[str, Any]] = field(default_factory=list)  # parallel calls after `call`

    def calls(self, fc_id: str) -> list[tuple[str, dict[str, Any]]]:
        """(item id, call) of every call, in output order."""
        if self.call is None:
            return []
        return [(fc_id, self.call)] + [
            (f"{fc_id}_{n}", c) for n, c in enumerate(self.extra_calls, 1)
        ]


def _parallel_calls(
    state: State, body: dict[str, Any], turn: Turn, key: str, seed: Any
) -> list[dict[str, Any]]:
    """The calls after the first, as the chat path makes them: tool_choice required, a prompt
    naming several tools, and parallel_tool_calls not false (responses-parallel-ignored: even
    when it is)."""
    parallel = body.get("parallel_tool_calls") is not False or _fault(
        state, "responses-parallel-ignored"
    )
    last = str(turn.messages[-1].get("content", "")) if turn.messages else ""
    if not parallel or turn.tool_choice != "required" or turn.tools[0]["name"] not in last:
        return []
    return [
        {
            "call_id": f"call_{secrets.token_hex(6)}",
            "name": tool["name"],
            "arguments": json.dumps(
                model.instance(
                    tool.get("parameters") or {"type": "object"},
                    model.json_key_rng(key + tool["name"], seed),
                ),
                ensure_ascii=False,
            ),
        }
        for tool in turn.tools[1:]
        if tool["name"] in last
    ]


def _generate(state: State, body: dict[str, Any], turn: Turn) -> Output:
    cfg = state.config
    chat_tools = [{"type": "function", "function": t} for t in turn.tools]
    prompt_tokens = model.count_chat_tokens(turn.messages, chat_tools)
    if prompt_tokens > cfg.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {cfg.max_model_len} tokens. However, your "
            f"prompt contains at least {prompt_tokens} input tokens.",
            param="input",
            code="context_length_exceeded",
        )
    room = max(cfg.max_model_len - prompt_tokens, 1)
    # No max_output_tokens: the room left in the context, as OpenAI's API and vLLM do (Codex CLI
    # sends none); responses-default-length-16 keeps the completions API's 16 instead.
    default = cfg.default_max_tokens if _fault(state, "responses-default-length-16") else room
    limit = min(turn.max_output_tokens or default, room)
    key = json.dumps(turn.messages, sort_keys=True, ensure_ascii=False) + json.dumps(
        turn.fmt, sort_keys=True
    )
    seed = body.get("seed")
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    last = turn.messages[-1] if turn.messages else {}
    target = None
    choice = turn.tool_choice
    if choice == "none" and _fault(state, "responses-tool-choice-none-ignored"):
        choice = "auto"  # 'none' read as 'auto': a prompt naming a tool still gets the call
    if turn.tools and choice != "none" and last.get("role") != "tool":
        if isinstance(turn.tool_choice, dict) and _fault(
            state, "responses-named-choice-as-required"
        ):
            target = turn.tools[0]  # the object form read as "call some tool"
        elif isinstance(turn.tool_choice, dict):
            target = next(t for t in turn.tools if t["name"] == turn.tool_choice["name"])
        elif choice == "required" or (
            choice == "auto" and agent.wants_call(state.config.agent, turn.messages)
        ):
            target = turn.tools[0]  # required, or the scripted agent's call (reference/agent.py)
        else:
            target = next((t for t in turn.tools if t["name"] in last.get("content", "")), None)
    if target is not None:
        args = agent.arguments(
            cfg.agent,
            target.get("parameters") or {"type": "object"},
            model.json_key_rng(key, seed),
            turn.messages,
        )
        arguments = json.dumps(args, ensure_ascii=False)
        call = {
            "call_id": f"call_{secrets.token_hex(6)}",
            "name": target["name"],
            "arguments": arguments,
        }
        tokens = max(1, len(model.tokenize(arguments)))
        if tokens > limit and not _fault(state, "responses-tool-length-ignored"):
            # The call is cut where max_output_tokens ends it: what was generated so far.
            call["arguments"] = "".join(model.split_json(arguments, 1)[:limit])
            return Output([], call, True, prompt_tokens, limit)
        if _fault(state, "responses-tool-as-text"):
            # A server that does not parse the model's tool-call markup passes it on as text.
            text = (
                TOOL_TEXT_OPEN
                + json.dumps({"name": target["name"], "arguments": args})
                + TOOL_TEXT_CLOSE
            )
            return Output(model.split_json(text), None, False, prompt_tokens, tokens)
        extra = _parallel_calls(state, body, turn, key, seed)
        tokens += sum(len(model.tokenize(c["arguments"])) for c in extra)
        return Output([], call, False, prompt_tokens, tokens, extra_calls=extra)
    fmt = turn.fmt.get("type")
    if fmt in ("json_object", "json_schema") and not _fault(state, "responses-format-ignored"):
        rng = model.json_key_rng(key, seed)
        value = (
            model.instance(turn.fmt["schema"], rng)
            if fmt == "json_schema"
            else {"answer": rng.choice(model.VOCAB[:30]), "ok": True}
        )
        pieces = model.split_json(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
        cut = len(pieces) > limit
        pieces = pieces[:limit]
        return Output(pieces, None, cut, prompt_tokens, len(pieces), [-0.5] * len(pieces))
    if turn.top_logprobs is not None and _fault(state, "logprobs-blank-content"):
        return Output([], None, False, prompt_tokens, 0)  # asked for logprobs: nothing to spell
    gen = model.generate_text(
        key,
        max_tokens=limit,
        seed=seed,
        temperature=temperature,
        fresh=temperature > 0 and seed is None,
    )
    incomplete = gen.finish_reason == "length"
    return Output(gen.pieces, None, incomplete, prompt_tokens, len(gen.pieces), gen.logprobs)


def _usage(state: State, out: Output) -> dict[str, Any]:
    total = out.prompt_tokens + out.output_tokens
    if _fault(state, "responses-usage-sum-wrong"):
        total += 1
    # responses-reasoning-tokens-over: the whole exchange counted as reasoning
    reasoning = total if _fault(state, "responses-reasoning-tokens-over") else 0
    usage = {
        "input_tokens": out.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": out.output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total,
    }
    if _fault(state, "responses-tool-length-uncounted") and out.call and out.incomplete:
        del usage["output_tokens"]  # a cut call whose output tokens go uncounted
    return usage


def _message_item(
    item_id: str,
    text: str,
    status: str,
    part_type: str = "output_text",
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    part = {"type": part_type, "text": text, "annotations": [], "logprobs": logprobs or []}
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": status,
        "content": [part],
    }


def _logprobs(state: State, turn: Turn, out: Output) -> list[dict[str, Any]]:
    """The output_text logprobs entries, one per piece (empty unless include asked for them)."""
    if turn.top_logprobs is None:
        return []
    faults = frozenset(
        {"logprobs-positive"} if _fault(state, "responses-logprobs-positive") else ()
    ) | frozenset(
        {"top-logprobs-count-wrong"} if _fault(state, "responses-top-logprobs-count-wrong") else ()
    )
    lps = out.logprobs + [-0.5] * (len(out.text_pieces) - len(out.logprobs))
    return reflogprobs.content(out.text_pieces, lps, turn.top_logprobs, faults)


def _call_item(
    item_id: str, call: dict[str, Any], status: str, arguments: str | None = None
) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call["call_id"],
        "name": call["name"],
        "arguments": call["arguments"] if arguments is None else arguments,
        "status": status,
    }


def _response(
    state: State,
    body: dict[str, Any],
    turn: Turn,
    resp_id: str,
    created: int,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete: bool = False,
) -> dict[str, Any]:
    if status == "completed" and incomplete:
        status = "incomplete"
        if _fault(state, "responses-incomplete-as-completed"):
            status = "completed"
    resp: dict[str, Any] = {
        "id": resp_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": _incomplete_details(state, status),
        "instructions": body.get("instructions"),
        "max_output_tokens": turn.max_output_tokens,
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "previous_response_id": None
        if _fault(state, "responses-previous-not-echoed")
        else body.get("previous_response_id"),
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "text": {"format": turn.fmt},
        "tool_choice": turn.tool_choice,
        "tools": [{"strict": False, **t} for t in turn.tools],
        "truncation": "disabled",
        "metadata": {},
        "usage": usage,
    }
    resp.update(_open_fields(state, body, status))
    if _fault(state, "responses-created-at-float"):
        resp["created_at"] = created + 0.25  # time.time() as it comes, not whole seconds
    if _fault(state, "responses-instructions-dropped"):
        resp["instructions"] = None
    if "extra-fields" in state.config.quirks:
        resp["x_servecheck_extra"] = {"note": "ignore me"}
    return resp


def _incomplete_details(state: State, status: str) -> dict[str, Any] | None:
    if status == "incomplete":
        return {"reason": "max_output_tokens"}
    if status == "completed" and _fault(state, "responses-completed-incomplete-details"):
        return {"reason": None}  # the object always sent, its reason empty
    return None


def _open_fields(state: State, body: dict[str, Any], status: str) -> dict[str, Any]:
    """The fields the Open Responses schema requires beside the SDK's (responses-open-fields-missing
    leaves them out, as a server whose object ends at the SDK's required set does)."""
    if _fault(state, "responses-open-fields-missing"):
        return {}
    done = status in ("completed", "incomplete", "failed")
    return {
        "completed_at": int(time.time()) if done else None,
        "presence_penalty": _echo(body, "presence_penalty", 0.0, is_num),
        "frequency_penalty": _echo(body, "frequency_penalty", 0.0, is_num),
        "top_logprobs": _echo(body, "top_logprobs", 0, is_int),
        "reasoning": None,
        "max_tool_calls": None,
        "store": response_store.stores(state, body),
        "background": False,
        "service_tier": "default",
        "safety_identifier": _echo(body, "safety_identifier", None, _is_str),
        "prompt_cache_key": _echo(body, "prompt_cache_key", None, _is_str),
    }


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _echo(body: dict[str, Any], key: str, default: Any, ok: Callable[[Any], bool]) -> Any:
    """The request's value where it has the type the response field needs, else the default."""
    value = body.get(key)
    return value if value is not None and ok(value) else default


def _call_status(state: State, status: str) -> str:
    # responses-tool-length-completed: a call cut short is still marked completed
    return "completed" if _fault(state, "responses-tool-length-completed") else status


def _final_output(
    state: State, turn: Turn, out: Output, msg_id: str, fc_id: str, status: str
) -> list[dict[str, Any]]:
    if out.call is not None:
        items = [
            _call_item(item_id, call, _call_status(state, status))
            for item_id, call in out.calls(fc_id)
        ]
        if _fault(state, "responses-call-item-bare"):
            for item in items:
                del item["id"], item["status"]  # what the SDK's type lets a server leave out
        return items
    part = "text" if _fault(state, "responses-content-type-text") else "output_text"
    text = "".join(out.text_pieces)
    return [_message_item(msg_id, text, status, part, _logprobs(state, turn, out))]


async def handle(request: web.Request) -> web.StreamResponse:
    """POST /v1/responses."""
    state = request.app[STATE]
    try:
        check_ready(state)
        try:
            body = await read_json(request, state)
            turn = _validate(state, body)
        except ApiError as err:
            if _fault(state, "responses-error-500") and err.status == 400:
                return web.Response(
                    status=500, text="Internal Server Error", content_type="text/plain"
                )
            raise
        out = _generate(state, body, turn)
    except ApiError as err:
        return error_response(state, err)
    resp_id = "resp_" + secrets.token_hex(12)
    msg_id, fc_id = "msg_" + secrets.token_hex(8), "fc_" + secrets.token_hex(8)
    created = int(time.time())
    state.request_count += 1
    if body.get("stream"):
        return await _stream(request, state, body, turn, out, resp_id, msg_id, fc_id, created)
    cfg = state.config
    await asyncio.sleep((cfg.ttft_ms + cfg.itl_ms * max(len(out.text_pieces) - 1, 0)) / 1000)
    item_status = "incomplete" if out.incomplete else "completed"
    output = _final_output(state, turn, out, msg_id, fc_id, item_status)
    state.success += 1
    state.prompt_tokens += out.prompt_tokens
    state.generation_tokens += out.output_tokens
    resp = _response(
        state, body, turn, resp_id, created, "completed", output, _usage(state, out), out.incomplete
    )
    response_store.keep(state, body, turn.conversation, resp)
    return web.json_response(resp, dumps=lambda o: json.dumps(o, ensure_ascii=False))


async def _chat_sse(
    response: web.StreamResponse, body: dict[str, Any], out: Output, resp_id: str, created: int
) -> web.StreamResponse:
    """responses-chat-sse: a server that routes /responses to its chat streaming path, so chat
    chunks and [DONE] come back."""
    text_pieces = out.text_pieces or [out.call["arguments"] if out.call else ""]
    for piece in text_pieces:
        chunk = {
            "id": "chatcmpl-" + resp_id[5:],
            "object": "chat.completion.chunk",
            "created": created,
            "model": body["model"],
            "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
        }
        await response.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _stream_message(
    state: State,
    turn: Turn,
    out: Output,
    msg_id: str,
    item_status: str,
    emit: Callable[..., Awaitable[None]],
    tick: Callable[[], Awaitable[None]],
) -> None:
    """The events of a text answer: the item, its content part, the text deltas, the ends."""
    pieces = list(out.text_pieces)
    if _fault(state, "responses-stream-differs") and len(pieces) > 1:
        pieces[1] = pieces[1].upper() + "!"
    text = "".join(pieces)
    entries = _logprobs(state, turn, out)
    # responses-stream-logprobs-lag: each delta carries the previous piece's entry (the last is lost)
    lag = _fault(state, "responses-stream-logprobs-lag")
    # responses-stream-item-unannounced: the deltas name an item id no output_item.added announced
    delta_item = (
        "msg_" + secrets.token_hex(8)
        if _fault(state, "responses-stream-item-unannounced")
        else msg_id
    )
    await emit(
        "response.output_item.added",
        output_index=0,
        item=_message_item(msg_id, "", "in_progress") | {"content": []},
    )
    empty_part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    await emit(
        "response.content_part.added",
        item_id=msg_id,
        output_index=0,
        content_index=0,
        part=empty_part,
    )
    for n, piece in enumerate(pieces):
        await tick()
        k = n - 1 if lag else n
        await emit(
            "response.output_text.delta",
            item_id=delta_item,
            output_index=0,
            content_index=0,
            delta=piece,
            logprobs=[entries[k]] if 0 <= k < len(entries) else [],
        )
    # responses-text-done-no-logprobs: output_text.done's list left empty (vLLM 0.32)
    done_entries = [] if _fault(state, "responses-text-done-no-logprobs") else entries
    await emit(
        "response.output_text.done",
        item_id=msg_id,
        output_index=0,
        content_index=0,
        text=text,
        logprobs=done_entries,
    )
    if not _fault(state, "responses-stream-part-unclosed"):
        await emit(
            "response.content_part.done",
            item_id=msg_id,
            output_index=0,
            content_index=0,
            part={**empty_part, "text": text, "logprobs": entries},
        )
    await emit(
        "response.output_item.done",
        output_index=0,
        item=_message_item(msg_id, text, item_status, logprobs=entries),
    )


async def _stream_calls(
    state: State,
    out: Output,
    fc_id: str,
    emit: Callable[..., Awaitable[None]],
    tick: Callable[[], Awaitable[None]],
    item_status: str,
) -> None:
    """The events of the function calls, one item each at its own output_index
    (responses-parallel-stream-shared: the calls after the first reuse index 0 and its call_id)."""
    assert out.call is not None
    shared = _fault(state, "responses-parallel-stream-shared")
    for n, (item_id, made) in enumerate(out.calls(fc_id)):
        index = 0 if shared else n
        call = {**made, "call_id": out.call["call_id"]} if shared else made
        await emit(
            "response.output_item.added",
            output_index=index,
            item=_call_item(item_id, call, "in_progress", ""),
        )
        pieces = model.split_json(call["arguments"], 8)
        if _fault(state, "responses-stream-args-dropped") and len(pieces) > 1:
            del pieces[1]  # a delta lost between the parser and the event writer
        for piece in pieces:
            await tick()
            await emit(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=piece,
            )
        if not _fault(state, "responses-stream-no-args-done"):
            await emit(
                "response.function_call_arguments.done",
                item_id=item_id,
                output_index=index,
                name=call["name"],
                arguments=call["arguments"],
            )
        if not _fault(state, "responses-stream-no-item-done"):
            await emit(
                "response.output_item.done",
                output_index=index,
                item=_call_item(item_id, call, _call_status(state, item_status)),
            )


async def _stream(
    request: web.Request,
    state: State,
    body: dict[str, Any],
    turn: Turn,
    out: Output,
    resp_id: str,
    msg_id: str,
    fc_id: str,
    created: int,
) -> web.StreamResponse:
    cfg = state.config
    response = web.StreamResponse(
        status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    seq = 0
    quirks = cfg.quirks

    async def emit(kind: str, **fields: Any) -> None:
        nonlocal seq
        event = {"type": kind, "sequence_number": seq, **fields}
        seq += 1
        data = f"event: {kind}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()
        await write_event(response, quirks, data)

    async def tick() -> None:
        if cfg.itl_ms:
            await asyncio.sleep(cfg.itl_ms / 1000)

    if _fault(state, "responses-chat-sse"):
        return await _chat_sse(response, body, out, resp_id, created)

    await asyncio.sleep(cfg.ttft_ms / 1000)
    # responses-stream-early-usage: the in-progress shells carry (zero) usage already
    early = (
        _usage(state, Output([], None, False, 0, 0))
        if _fault(state, "responses-stream-early-usage")
        else None
    )
    shell = _response(state, body, turn, resp_id, created, "in_progress", [], early)
    await emit("response.created", response=shell)
    await emit("response.in_progress", response=shell)
    item_status = "incomplete" if out.incomplete else "completed"
    if out.call is not None:
        await _stream_calls(state, out, fc_id, emit, tick, item_status)
    else:
        await _stream_message(state, turn, out, msg_id, item_status, emit, tick)
    output = (
        []
        if _fault(state, "responses-completed-empty-output")
        else _final_output(state, turn, out, msg_id, fc_id, item_status)
    )
    output = cases.calls_twice(state.faults, body, output)  # responses-reasoning-call-twice
    usage = _usage(state, out)
    if _fault(state, "responses-stream-usage-wrong"):
        usage = {
            **usage,
            "output_tokens": usage["output_tokens"] + 3,
            "total_tokens": usage["total_tokens"] + 3,
        }
    if _fault(state, "responses-stream-id-changes"):
        resp_id = "resp_" + secrets.token_hex(12)  # the final object built afresh, with a new id
    final = _response(
        state, body, turn, resp_id, created, "completed", output, usage, out.incomplete
    )
    for _ in range(1 + grid_faults.responses_end_twice(state.faults)):
        await emit(
            "response.incomplete" if final["status"] == "incomplete" else "response.completed",
            response=final,
        )
    response_store.keep(state, body, turn.conversation, final)
    state.success += 1
    await response.write_eof()
    return response


def install(app: web.Application) -> None:
    """Add the Responses API routes to the reference server."""
    app.router.add_post("/v1/responses", handle)
    app.router.add_get("/v1/responses/{response_id}", response_store.handle_get)
