"""Reasoning mode of the reference server: a DeepSeek-R1-style model behind a reasoning parser.

With a :class:`ReasoningMode` in the server config, every chat answer first "thinks" for
``tokens`` tokens. The reasoning goes into the message's reasoning field (``reasoning_content``,
as vLLM's and llama.cpp's parsers and LiteLLM write it, or ``reasoning``, vLLM's newer name), the
answer into ``content``; ``max_tokens`` counts both, as engines count them; usage reports
``completion_tokens_details.reasoning_tokens``. A request with
``chat_template_kwargs: {enable_thinking: false}`` (or ``thinking: false``) gets no reasoning.

The ``reasoning-*`` faults (faults.py) each switch on one defect the REASON checks hunt: the
parser missing (markers in content), stream and non-stream splitting differently, a reasoning
delta after the answer began, a cut in the reasoning reported as ``stop``, reasoning_tokens
reported as 0, JSON or a tool call only valid once the reasoning is stripped, thinking-off
ignored. Any ``reasoning-*`` fault turns the mode on with its defaults.

Imported by server.py and http.py; it imports nothing from ``client/`` or ``checks/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servecheck.reference import model

if TYPE_CHECKING:
    from servecheck.reference.model import Choice

FIELDS = ("reasoning_content", "reasoning")


@dataclass(frozen=True, slots=True)
class ReasoningMode:
    """How the reference model reasons: length in tokens, the field it lands in, its markers."""

    tokens: int = 12
    field: str = "reasoning_content"
    markers: tuple[str, str] = ("<think>", "</think>")

    def __post_init__(self) -> None:
        if self.field not in FIELDS:
            raise ValueError(
                f"reasoning field must be one of {', '.join(FIELDS)}, got {self.field!r}"
            )
        if self.tokens < 1:
            raise ValueError(f"reasoning tokens must be at least 1, got {self.tokens}")


def parse_spec(spec: str) -> ReasoningMode:
    """``tokens=12,field=reasoning,markers=<think>|</think>`` (any part optional) -> a mode."""
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in ("tokens", "field", "markers"):
            raise ValueError(
                f"reasoning spec part {part!r}: expected tokens=N, field=NAME or markers=OPEN|CLOSE"
            )
        if key == "tokens":
            if not value.isdigit():
                raise ValueError(f"reasoning tokens must be an integer, got {value!r}")
            values["tokens"] = int(value)
        elif key == "field":
            values["field"] = value
        else:
            opening, bar, closing = value.partition("|")
            if not (bar and opening and closing):
                raise ValueError(f"reasoning markers must be OPEN|CLOSE, got {value!r}")
            values["markers"] = (opening, closing)
    return ReasoningMode(**values)


def mode_for(config_mode: ReasoningMode | None, faults: frozenset[str]) -> ReasoningMode | None:
    """The configured mode; a ``reasoning-*`` fault implies the default mode."""
    if config_mode is None and any(f.startswith("reasoning-") for f in faults):
        return ReasoningMode()
    return config_mode


def thinking_requested(body: dict[str, Any], faults: frozenset[str]) -> bool:
    """False when the request turns thinking off (Qwen3 / DeepSeek chat template kwargs)."""
    if "reasoning-off-ignored" in faults:
        return True
    if "reasoning-off-ignored-stream" in faults and body.get("stream"):
        return True  # the streaming path reads the switch from elsewhere, and misses it
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, dict):
        for key in ("enable_thinking", "thinking"):
            if kwargs.get(key) is False:
                return False
    return True


def apply(
    mode: ReasoningMode,
    faults: frozenset[str],
    body: dict[str, Any],
    choices: list[Choice],
    max_tokens: int,
    fmt: str,
) -> None:
    """Give each choice its reasoning and fit reasoning + answer into ``max_tokens``."""
    if not thinking_requested(body, faults):
        return
    seed = body.get("seed")
    temperature = body.get("temperature")
    temperature = 1.0 if temperature is None else float(temperature)
    fresh = (temperature > 0 and seed is None) or "nondeterministic" in faults
    key = json.dumps(body.get("messages"), sort_keys=True, ensure_ascii=False) + "\x00think"
    opening, closing = mode.markers
    for c in choices:
        gen = model.generate_text(
            key,
            max_tokens=mode.tokens,
            seed=seed,
            temperature=temperature,
            index=c.index,
            fresh=fresh,
            ignore_eos=True,
        )
        thought = gen.pieces
        remaining = max_tokens - len(thought)
        if remaining <= 0:
            # The cut falls inside the reasoning: no answer, no tool call, finish "length".
            c.reasoning = thought[:max_tokens]
            c.pieces, c.logprobs, c.tool_call = [], [], None
            c.finish_reason = "stop" if "reasoning-cut-as-stop" in faults else "length"
            continue
        c.reasoning = list(thought)
        if c.tool_call is not None and "reasoning-tool-in-reasoning" in faults:
            # The call is written as text inside the reasoning and never parsed into tool_calls.
            call = json.dumps({"name": c.tool_call["name"], "arguments": c.tool_call["arguments"]})
            c.reasoning += [" <tool_call>", call, "</tool_call>"]
            c.tool_call, c.finish_reason = None, "stop"
        if len(c.pieces) > remaining:
            c.pieces = c.pieces[:remaining]
            c.logprobs = c.logprobs[:remaining]
            c.finish_reason = "length"
        json_fmt = fmt in ("json_object", "json_schema")
        leak = (
            "reasoning-leak" in faults
            or ("reasoning-json-leak" in faults and json_fmt)
            # the parser runs on choice 0 only: with n > 1 the others keep the raw output
            or ("reasoning-json-leak-n" in faults and json_fmt and c.index > 0)
        )
        if leak:
            # No reasoning parser: the raw output, markers and all, is the content.
            c.pieces = [opening, *c.reasoning, closing, *c.pieces]
            c.logprobs = [-0.5] * (len(c.reasoning) + 2) + c.logprobs
            c.reasoning = []


def message_fields(mode: ReasoningMode, choice: Choice) -> dict[str, Any]:
    """The reasoning field of a non-streamed message (null when the model did not reason)."""
    return {mode.field: "".join(choice.reasoning) if choice.reasoning else None}


def reasoning_tokens(choices: list[Choice], faults: frozenset[str]) -> int:
    if "reasoning-tokens-zero" in faults:
        return 0
    return sum(len(c.reasoning) for c in choices)


# One streamed step of a choice: ("reasoning", k) is reasoning piece k in the reasoning field,
# ("reasoning-as-content", k) the same text in content, ("answer", k) the server's step k
# of the answer (content piece or tool-call fragment).
Step = tuple[str, int]


def stream_plan(choice: Choice, answer_steps: int, faults: frozenset[str]) -> list[Step]:
    """The order in which a choice's reasoning and answer are streamed."""
    r = len(choice.reasoning)
    plan: list[Step] = [("reasoning", k) for k in range(r)]
    answer: list[Step] = [("answer", k) for k in range(answer_steps)]
    if r >= 3 and "reasoning-stream-split" in faults:
        # The streaming parser misses the end of the reasoning (a marker split across deltas):
        # its last two pieces arrive as content; non-streamed answers split correctly.
        plan[-2:] = [("reasoning-as-content", r - 2), ("reasoning-as-content", r - 1)]
    if r >= 2 and answer and "reasoning-after-answer" in faults:
        # The last reasoning piece is flushed after the first answer piece.
        last = plan.pop()
        return plan + answer[:1] + [last] + answer[1:]
    return plan + answer


def stream_delta(mode: ReasoningMode, choice: Choice, step: Step) -> str:
    """The delta JSON of a reasoning step."""
    kind, k = step
    name = mode.field if kind == "reasoning" else "content"
    return json.dumps({name: choice.reasoning[k]}, ensure_ascii=False)


__all__ = [
    "FIELDS",
    "ReasoningMode",
    "apply",
    "message_fields",
    "mode_for",
    "parse_spec",
    "reasoning_tokens",
    "stream_delta",
    "stream_plan",
    "thinking_requested",
]
