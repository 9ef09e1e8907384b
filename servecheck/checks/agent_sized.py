"""Agent-sized requests (issue 44 item 3): what coding agents really send, generated.

Claude Code sends 12-21 tools of 32-62k characters and a 7k-character system prompt beside a
9k-character system-role message; Codex a 19.5k-character prompt; opencode and the AI SDK tool
lists of 20-60 functions with multi-kB descriptions and nested JSON schemas. A server that passes
every small check can still answer such a request with a 500, a hang, or (llama.cpp with a large
toolset and reasoning on) ``finish_reason: stop`` and no content at all.

Everything here is generated from a seed, with no download: the same request every run, on every
machine. Words are common English words (one token each in the BPE vocabularies in use), so a
word count is a fair first estimate of the tokens; the checks ask the target's ``/tokenize``
where it has one. Pure: no request is sent from this module (``surfaces/agent.py`` sends them).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from typing import Any

SEED = 44
# The sizes, inside what the agents measured in issue 44 send.
TOOL_COUNT = 32  # 20-60 tools, about 2.3 kB each: ~17k tokens
DESCRIPTION_CHARS = (1000, 2000)  # multi-kB descriptions
SYSTEM_TOKENS = 20_000  # a 15-30k-token system prompt (words; ~22k BPE tokens)
MESSAGES_TOOL_COUNT = 20  # Claude Code's 12-21 tools on /v1/messages, with cache_control
MESSAGES_SYSTEM_TOKENS = 10_000  # its 7k-character prompt and 9k-character system message, grown
SCHEMA_DEPTH = 3  # an object holding an array of objects holding an object
# Characters per token where no /tokenize can say: the prose and JSON here measure 4.5-5 with
# real models' BPE vocabularies, so the estimate errs high for them; a small vocabulary needs more
# (the CI models' 2048 tokens: ~2 characters a token, measured 2026-12-06). It only says whether a
# refusal is to be expected; a refusal naming the context is judged by the server's own words.
CHARS_PER_TOKEN = 4.0

WORDS = (
    "file", "read", "write", "search", "pattern", "line", "change", "test", "build", "branch",
    "commit", "review", "project", "module", "function", "class", "error", "result", "value",
    "path", "folder", "command", "shell", "output", "input", "check", "user", "agent", "task",
    "plan", "step", "edit", "patch", "diff", "note", "rule", "tool", "call", "answer", "short",
    "clear", "always", "never", "before", "after", "when", "only", "each", "every", "the", "a",
    "of", "to", "in", "and", "or", "with", "for", "from", "that", "this", "it", "is", "be",
    "use", "keep", "run", "show", "ask", "find", "list", "open", "save", "small", "large",
)  # fmt: skip
VERBS = ("read", "write", "search", "list", "run", "edit", "find", "open", "check", "review")
NOUNS = ("file", "folder", "test", "branch", "commit", "symbol", "issue", "note", "task", "log")
HEADINGS = (
    "Tone and style", "Tool usage policy", "Doing tasks", "Code references", "Following "
    "conventions", "Proactiveness", "Task management", "Git safety", "Testing", "Security",
)  # fmt: skip


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 18))]
    return " ".join(words).capitalize() + "."


def prose(rng: random.Random, chars: int) -> str:
    """Sentences of common words, about ``chars`` characters long."""
    out: list[str] = []
    size = 0
    while size < chars:
        out.append(_sentence(rng))
        size += len(out[-1]) + 1
    return " ".join(out)


def system_prompt(tokens: int, seed: int = SEED) -> str:
    """A coding agent's system prompt of about ``tokens`` words: headed sections of rules."""
    rng = random.Random(seed)
    parts = ["You are a coding agent working in the user's repository."]
    words = len(parts[0].split())
    k = 0
    while words < tokens:
        heading = f"# {HEADINGS[k % len(HEADINGS)]} ({k // len(HEADINGS) + 1})"
        rules = [f"- {_sentence(rng)}" for _ in range(12)]
        parts += [heading, *rules]
        words += sum(len(r.split()) for r in rules) + len(heading.split())
        k += 1
    return "\n".join(parts)


def _leaf(rng: random.Random, name: str) -> dict[str, Any]:
    kind = rng.choice(("string", "integer", "boolean", "enum"))
    about = {"description": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7)))}
    if kind == "enum":
        return {"type": "string", "enum": [f"{name}_{i}" for i in range(4)], **about}
    if kind == "integer":
        return {"type": "integer", "minimum": 0, "maximum": 10_000, **about}
    return {"type": kind, **about}


def schema(rng: random.Random, depth: int = SCHEMA_DEPTH) -> dict[str, Any]:
    """A nested JSON schema: leaves of every kind and, below the top, an array of objects or an
    object of options, alternately, ``depth`` objects deep."""
    props: dict[str, Any] = {
        f"{rng.choice(NOUNS)}_{i}": _leaf(rng, f"v{i}") for i in range(rng.randint(2, 4))
    }
    if depth > 1 and depth % 2:
        props["items"] = {"type": "array", "items": schema(rng, depth - 1), "maxItems": 20}
    elif depth > 1:
        props["options"] = schema(rng, depth - 1)
    return {
        "type": "object",
        "properties": props,
        "required": sorted(props)[:2],
        "additionalProperties": False,
    }


@dataclass(frozen=True, slots=True)
class Tool:
    """One generated function: a name, a multi-kB description, a nested schema."""

    name: str
    description: str
    parameters: dict[str, Any]


def tools(count: int = TOOL_COUNT, seed: int = SEED) -> list[Tool]:
    """``count`` tools with distinct names, descriptions of 1.5-3 kB and nested schemas."""
    rng = random.Random(seed)
    out = []
    for k in range(count):
        name = f"{VERBS[k % len(VERBS)]}_{NOUNS[(k // len(VERBS)) % len(NOUNS)]}_{k}"
        description = prose(rng, rng.randint(*DESCRIPTION_CHARS))
        out.append(Tool(name, description, schema(rng)))
    return out


def openai_tools(listed: list[Tool]) -> list[dict[str, Any]]:
    """The tools as chat completions' ``tools``."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in listed
    ]


def anthropic_tools(listed: list[Tool]) -> list[dict[str, Any]]:
    """The tools as Messages' ``tools``, the last with a cache_control marker (Claude Code's)."""
    out: list[dict[str, Any]] = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in listed
    ]
    out[-1] = {**out[-1], "cache_control": {"type": "ephemeral"}}
    return out


def estimate_tokens(*parts: Any) -> int:
    """Tokens of ``parts`` (strings or JSON) where the target cannot count them (a real
    model's vocabulary: :data:`CHARS_PER_TOKEN`)."""
    chars = sum(len(p) if isinstance(p, str) else len(json.dumps(p)) for p in parts)
    return math.ceil(chars / CHARS_PER_TOKEN)
