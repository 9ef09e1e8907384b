"""Agent sessions as load (issue 44, item 4): what an agent sends, turn after turn.

Why: agent traffic is not chat traffic. Every session opens with the same long system prompt
and the same tool list (a prefix every session shares), each turn resends the whole history
plus the previous answer, an assistant tool call and its tool result (so the prompt grows turn
by turn and a prefix cache decides TTFT), a tool runs between turns (think time the server sees
as idle), and a share of turns fork parallel subagents that each start from the parent's
context (bursts of requests with a long shared prefix).

* :class:`AgentShape` is the scenario's knobs (``turns=6,tools=8,fork=0.2x3,tool_wait=exp:0.5``
  ...), parsed by :func:`parse_agent` from one text or a plan's mapping.
* :class:`AgentPool` holds one process's sessions: a new one, or the next turn of a session
  whose tool wait is over, or a subagent branch; the reply of each turn comes back through
  :meth:`AgentPool.checkin`. A forking turn starts ``branches`` branch sessions at once (any
  free user of the process sends them, so they run concurrently); the parent waits until the
  last branch is done, then continues with their results as its tool result.
* Sources: generated sessions (default), or sessions read from a file
  (:func:`load_sessions`): AIPerf's ``multi_turn`` JSONL (``{"session_id", "turns": [{"text",
  "delay" ms, "output_length"}]}``) or servecheck's trace format grouped by ``session_id``.

Bounds: the run's duration bounds the sessions. A turn whose successor could not fit the
target's context (its history, the worst-case answer, the next tool result and answer) is the
session's last: the record says ``session_end: "context"``, and no sure 400 is ever sent.

Record fields (docs/metrics.md): ``session``, ``turn``, ``branch`` and ``parent`` (a subagent
branch: its index and ``<parent session>@<turn>`` it forked from), ``context_tokens``
(tokens this request carries: system prompt, tools, history and the new content),
``tool_wait_s`` (the tool's think time before this turn; absent after a fork, whose wait is
the fan-out, and on a first turn), ``session_end`` (``done`` / ``context`` on a session's last turn).

No locust or gevent here: unit-tested in the pytest process.
"""

from __future__ import annotations

import heapq
import json
import math
import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.errors import SpecError, UsageError
from servecheck.load.workload.planned import (
    CHAT_TEMPLATE_TOKENS,
    PlannedRequest,
    reported_tokens,
)
from servecheck.load.workload.prompts import approx_tokens

AGENT_KEYS = (
    "turns",
    "tools",
    "system_tokens",
    "user_tokens",
    "tool_result_tokens",
    "output_tokens",
    "tool_wait",
    "fork",
    "branch_turns",
    "source",
    "format",
)
SOURCE_FORMATS = ("auto", "aiperf", "servecheck")
WAIT_KINDS = ("fixed", "exp", "uniform")
MAX_TOOL_WAIT_S = 600.0  # a trace's delay beyond this is clipped (a paused recording)
MAX_SESSIONS = 100_000  # sessions read from one file
CALL_TOKENS = 24  # what an assistant tool call adds to the history beyond its answer
POLL_S = 0.05  # closed loop: how often a user with nothing to send looks again


# ------------------------------------------------------------------ the knobs


@dataclass(slots=True, frozen=True)
class ToolWait:
    """The tool's think time between turns, seconds: ``fixed:S``, ``exp:MEAN``, ``uniform:LO-HI``."""

    kind: str = "exp"
    a: float = 0.5
    b: float = 0.0

    def draw(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return 0.0 if self.a == 0 else min(MAX_TOOL_WAIT_S, rng.expovariate(1.0 / self.a))

    @property
    def text(self) -> str:
        if self.kind == "uniform":
            return f"uniform:{self.a:g}-{self.b:g}"
        return f"{self.kind}:{self.a:g}"


def parse_tool_wait(text: str) -> ToolWait:
    """``0.5`` (fixed), ``fixed:0.5``, ``exp:0.5`` (exponential, its mean), ``uniform:0.2-2``."""
    raw = str(text).strip().removesuffix("s")
    kind, _, rest = raw.partition(":") if ":" in raw else ("fixed", ":", raw)
    try:
        if kind == "uniform":
            lo, _, hi = rest.partition("-")
            a, b = float(lo.removesuffix("s")), float(hi.removesuffix("s"))
            ok = 0 <= a <= b
        else:
            a, b = float(rest), 0.0
            ok = kind in WAIT_KINDS and a >= 0
    except ValueError:
        ok = False
    if not ok or not all(math.isfinite(x) for x in (a, b)):
        raise SpecError(
            "{agent} tool_wait={text}: a time in seconds (0.5), exp:MEAN or uniform:LO-HI",
            text=text,
        )
    return ToolWait(kind, a, b)


@dataclass(slots=True, frozen=True)
class AgentShape:
    """What one agent session looks like; ``fork`` is the share of a session's turns that fork
    ``branches`` subagents of ``branch_turns`` turns each. ``source``: sessions from a file."""

    turns: int = 6
    tools: int = 8
    system_tokens: int = 1024
    user_tokens: int = 48
    tool_result_tokens: int = 96
    output_tokens: int = 64
    tool_wait: ToolWait = ToolWait()
    fork: float = 0.2
    branches: int = 2
    branch_turns: int = 2
    source: str | None = None
    source_format: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        """JSON values (the run config carries it to each Locust process)."""
        return {
            "turns": self.turns,
            "tools": self.tools,
            "system_tokens": self.system_tokens,
            "user_tokens": self.user_tokens,
            "tool_result_tokens": self.tool_result_tokens,
            "output_tokens": self.output_tokens,
            "tool_wait": self.tool_wait.text,
            "fork": self.fork,
            "branches": self.branches,
            "branch_turns": self.branch_turns,
            "source": self.source,
            "source_format": self.source_format,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AgentShape:
        values = dict(d)
        values["tool_wait"] = parse_tool_wait(str(values.get("tool_wait") or "exp:0.5"))
        return cls(**values)


_INT_KEYS = ("turns", "tools", "system_tokens", "user_tokens", "tool_result_tokens")


def _int_value(key: str, raw: Any) -> int:
    try:
        n = int(str(raw))
    except ValueError:
        n = -1
    low = 0 if key in ("tools", "system_tokens") else 1
    if n < low:
        raise SpecError("{agent} " + key + "={raw}: a whole number >= " + str(low), raw=raw)
    return n


def _fork(raw: Any) -> tuple[float, int]:
    """``fork=0.2`` (two branches) or ``fork=0.2x3`` (a share of turns, times branches)."""
    share_text, _, k_text = str(raw).partition("x")
    try:
        share = float(share_text.removesuffix("%")) / (100 if share_text.endswith("%") else 1)
        k = int(k_text) if k_text else 2
    except ValueError:
        share, k = -1.0, 0
    if not 0 <= share <= 1 or k < 1:
        raise SpecError(
            "{agent} fork={raw}: a share of turns in [0, 1], optionally xK branches (0.2x3)",
            raw=raw,
        )
    return share, k


def _pairs(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return {str(k): v for k, v in spec.items()}
    out: dict[str, Any] = {}
    for part in str(spec).split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        if not eq:
            raise SpecError("{agent} {part}: KEY=VALUE pairs, e.g. turns=6,fork=0.2x3", part=part)
        out[key.strip()] = value.strip()
    return out


def parse_agent(spec: str | Mapping[str, Any] | None) -> AgentShape:
    """The knobs from ``turns=6,tools=8,fork=0.2x3,tool_wait=exp:0.5,source=FILE`` (or a plan's
    mapping of the same keys); an empty spec is the defaults. Errors name the key."""
    values: dict[str, Any] = {}
    for key, raw in _pairs(spec or {}).items():
        if key not in AGENT_KEYS:
            from servecheck.errors import did_you_mean

            raise SpecError(
                "{agent} unknown key {key}" + did_you_mean(key, AGENT_KEYS) + "; keys: {keys}",
                key=key,
                keys=", ".join(AGENT_KEYS),
            )
        if key in _INT_KEYS or key in ("output_tokens", "branch_turns"):
            values[key] = _int_value(key, raw)
        elif key == "tool_wait":
            values[key] = parse_tool_wait(str(raw))
        elif key == "fork":
            values["fork"], values["branches"] = _fork(raw)
        elif key == "source":
            values["source"] = str(raw)
        else:
            if raw not in SOURCE_FORMATS:
                raise SpecError(
                    "{agent} format={raw}: one of {formats}",
                    raw=raw,
                    formats=", ".join(SOURCE_FORMATS),
                )
            values["source_format"] = str(raw)
    return AgentShape(**values)


# ------------------------------------------------------------------ the shared prefix

_TOOL_NAMES = (
    ("read_file", "Read a file of the repository and return its text with line numbers."),
    ("grep", "Search the repository for a regular expression; returns matching lines."),
    ("list_dir", "List the entries of a directory, with sizes and kinds."),
    ("edit_file", "Replace an exact string in a file with another; fails when not unique."),
    ("run_tests", "Run the project's tests, or some of them, and return the report."),
    ("git_diff", "Show the working tree's changes against a revision."),
    ("web_fetch", "Fetch a URL and return its main text, converted to Markdown."),
    ("search_symbols", "Find the definitions and references of a symbol by name."),
    ("bash", "Run a shell command in the sandbox and return stdout, stderr and the code."),
    ("todo_write", "Replace the session's task list with the given items and states."),
)


def agent_tools(n: int) -> list[dict[str, Any]]:
    """``n`` function tools with schemas of the kind coding agents send (nested objects,
    enums, arrays, required fields); the same list for every session of the run."""
    out = []
    for i in range(n):
        name, text = _TOOL_NAMES[i % len(_TOOL_NAMES)]
        if i >= len(_TOOL_NAMES):
            name = f"{name}_{i // len(_TOOL_NAMES)}"
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": text + " Use it only when the task needs it; prefer small, "
                    "targeted calls and say why in the arguments' reason field.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "path": {"type": "string", "description": "a path in the repository"},
                            "reason": {"type": "string", "description": "why this call"},
                            "options": {
                                "type": "object",
                                "properties": {
                                    "limit": {"type": "integer", "minimum": 1, "maximum": 2000},
                                    "mode": {"type": "string", "enum": ["fast", "full", "dry-run"]},
                                    "globs": {"type": "array", "items": {"type": "string"}},
                                },
                            },
                        },
                        "required": ["path", "reason"],
                    },
                },
            }
        )
    return out


def tools_tokens(tools: list[dict[str, Any]]) -> int:
    """What the tool list costs in the prompt (its JSON, estimated; templates vary)."""
    return approx_tokens(json.dumps(tools)) if tools else 0


# ------------------------------------------------------------------ sessions from a file


@dataclass(slots=True)
class ScriptTurn:
    """One turn of a recorded session: its new content (text, or a length) and limits."""

    text: str | None = None
    tokens: int = 0
    max_tokens: int | None = None
    delay_s: float = 0.0  # the wait before this turn (the tool's, or the user's)


@dataclass(slots=True)
class ScriptSession:
    sid: str
    turns: list[ScriptTurn]
    system: str | None = None


def _aiperf_turn(t: Mapping[str, Any], where: str) -> ScriptTurn:
    texts = t.get("texts")
    text = t.get("text")
    if text is None and isinstance(texts, list):
        parts = [x if isinstance(x, str) else " ".join(x.get("contents") or ()) for x in texts]
        text = " ".join(str(p) for p in parts)
    if not isinstance(text, str) or not text:
        raise UsageError(f"{where}: a turn needs a text (or texts)")
    out = t.get("output_length", t.get("max_tokens"))
    delay = t.get("delay")
    try:
        delay_s = 0.0 if delay is None else float(delay) / 1000.0
        max_tokens = None if out is None else int(out)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: delay and output_length are numbers") from None
    if delay_s < 0 or (max_tokens is not None and max_tokens < 1):
        raise UsageError(f"{where}: delay must be >= 0 and output_length >= 1")
    return ScriptTurn(text, approx_tokens(text), max_tokens, min(delay_s, MAX_TOOL_WAIT_S))


def _aiperf_sessions(lines: list[tuple[int, dict[str, Any]]], path: Path) -> list[ScriptSession]:
    """AIPerf's ``multi_turn`` custom dataset: lines of one session each (lines that share a
    ``session_id`` are one session, in file order); a leading system turn is the session's
    system prompt, as AIPerf hoists it."""
    by_id: dict[str, ScriptSession] = {}
    for n, obj in lines:
        where = f"{path}:{n}"
        turns = obj.get("turns")
        if not isinstance(turns, list) or not turns:
            raise UsageError(f"{where}: an AIPerf multi_turn line has a list of turns")
        sid = str(obj.get("session_id") or f"line{n}")
        s = by_id.setdefault(sid, ScriptSession(sid, []))
        for t in turns:
            if not isinstance(t, dict):
                raise UsageError(f"{where}: each turn is an object")
            if t.get("role") == "system" and not s.turns and s.system is None:
                s.system = str(t.get("text") or "")
                continue
            s.turns.append(_aiperf_turn(t, where))
    return [s for s in by_id.values() if s.turns]


def _servecheck_sessions(
    lines: list[tuple[int, dict[str, Any]]], path: Path
) -> list[ScriptSession]:
    """servecheck's trace format, its entries grouped by ``session_id``: each entry is a turn,
    its new content the growth of the input over the previous turn's input and output, its
    wait the gap after the previous turn's arrival. Entries without a session are left out."""
    by_id: dict[str, list[tuple[float, int, int]]] = {}
    for n, obj in lines:
        sid = obj.get("session_id")
        if sid is None:
            continue
        try:
            entry = (float(obj["t"]), int(obj["input_tokens"]), int(obj["output_tokens"]))
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"{path}:{n}: t, input_tokens and output_tokens are numbers") from None
        by_id.setdefault(str(sid), []).append(entry)
    out = []
    for sid, entries in by_id.items():
        entries.sort()
        turns = []
        for i, (t, inp, outp) in enumerate(entries):
            if i == 0:
                turns.append(ScriptTurn(None, max(1, inp), max(1, outp), 0.0))
                continue
            pt, pin, pout = entries[i - 1]
            turns.append(
                ScriptTurn(
                    None, max(8, inp - pin - pout), max(1, outp), min(t - pt, MAX_TOOL_WAIT_S)
                )
            )
        out.append(ScriptSession(sid, turns))
    return out


def load_sessions(path: str | Path, fmt: str = "auto") -> list[ScriptSession]:
    """Sessions from an agent trace file (``aiperf`` multi_turn or ``servecheck`` with
    ``session_id``; ``auto`` tells them by a line's keys). Errors name the file and line."""
    p = Path(path).expanduser()
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"agent sessions file {str(p)!r}: {exc.strerror or exc}") from None
    lines: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise UsageError(f"{p}:{n}: not a JSON object") from None
        if not isinstance(obj, dict):
            raise UsageError(f"{p}:{n}: not a JSON object")
        lines.append((n, obj))
        if len(lines) > MAX_SESSIONS * 64:
            break
    if fmt == "auto":
        fmt = "aiperf" if lines and "turns" in lines[0][1] else "servecheck"
    sessions = (_aiperf_sessions if fmt == "aiperf" else _servecheck_sessions)(lines, p)
    if not sessions:
        raise UsageError(f"{p}: no sessions ({fmt} format: lines with a session_id and turns)")
    return sessions[:MAX_SESSIONS]


# ------------------------------------------------------------------ the pool


@dataclass(slots=True)
class Fork:
    """One forking turn: its branches still open, when it forked, the parent waiting on it."""

    parent: Session
    name: str  # "<parent session>@<turn>"
    open: int
    t0: float
    results: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Session:
    """One agent (or subagent) session's state."""

    sid: str
    turns: int
    messages: list[dict[str, Any]]
    context_tokens: int  # what the next request carries before its new content
    turn: int = 0
    ready_at: float = 0.0
    wait_s: float = 0.0  # the wait before the next turn (tool think time, or a fan-out)
    after_fork: bool = False  # the next turn follows a fork: its wait was the fan-out, no tool
    branch: int | None = None
    fork: Fork | None = None  # the fork this branch belongs to
    script: ScriptSession | None = None
    root: bool = True


@dataclass(slots=True)
class AgentPool:
    """One process's agent sessions (users share it, so a fork's branches go out concurrently).

    ``system``: the shared system prompt and its tokens; ``tools``: the shared tool list;
    ``piece(key, tokens)``: seeded text of about ``tokens`` tokens (the trace corpus);
    ``sessions``: recorded sessions to replay (else generated); ``roots_cap``: how many root
    sessions a closed loop keeps open (its users)."""

    shape: AgentShape
    system: tuple[str, int]
    tools: list[dict[str, Any]]
    piece: Any
    name: str = "a"
    context_length: int | None = None
    sessions: list[ScriptSession] | None = None
    roots_cap: int = 1
    tools_cost: int | None = None  # the tool list's tokens, measured (else estimated)
    heap: list[tuple[float, int, Session]] = field(default_factory=list)
    started: int = 0
    roots_open: int = 0
    _seq: int = 0

    def _push(self, s: Session) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (s.ready_at, self._seq, s))

    def _new_root(self, rng: random.Random) -> Session:
        self.started += 1
        self.roots_open += 1
        sid = f"{self.name}-s{self.started}"
        text, tokens = self.system
        script = None
        if self.sessions:
            script = self.sessions[(self.started - 1) % len(self.sessions)]
            text, tokens = (
                (script.system, approx_tokens(script.system)) if script.system else (text, tokens)
            )
        messages = [{"role": "system", "content": text}] if text else []
        turns = len(script.turns) if script is not None else self.shape.turns
        cost = self.tools_cost if self.tools_cost is not None else tools_tokens(self.tools)
        return Session(sid, turns, messages, tokens + cost, script=script)

    def ready(self, now: float) -> bool:
        return bool(self.heap) and self.heap[0][0] <= now

    def wait_s(self, now: float) -> float:
        """Closed loop: how long a user waits before it asks for a turn (0: one is ready, or it
        may open a new session)."""
        if self.ready(now) or self.roots_open < self.roots_cap:
            return 0.0
        nxt = self.heap[0][0] - now if self.heap else POLL_S
        return max(0.0, min(nxt, POLL_S * 10))

    def checkout(self, now: float, rng: random.Random) -> PlannedRequest:
        """The next request: a ready turn (a branch, a session whose tool is done), else a new
        session."""
        s = heapq.heappop(self.heap)[2] if self.ready(now) else self._new_root(rng)
        content, new_tokens, max_tokens = self._content(s, rng)
        messages = [*s.messages, *content]
        end = self._end(s, new_tokens, max_tokens)
        fields: dict[str, Any] = {
            "session": s.sid,
            "turn": s.turn,
            "context_tokens": s.context_tokens + new_tokens,
            "tool_wait_s": round(s.wait_s, 6) if s.turn and not s.after_fork else None,
        }
        if s.fork is not None:
            fields["branch"], fields["parent"] = s.branch, s.fork.name
        if end is not None:
            fields["session_end"] = end
        return PlannedRequest(
            messages,
            max_tokens,
            "agent",
            s.context_tokens + new_tokens,
            capture=True,
            fields={k: v for k, v in fields.items() if v is not None},
            state=(s, messages, new_tokens, end),
        )

    def _content(self, s: Session, rng: random.Random) -> tuple[list[dict[str, Any]], int, int]:
        """This turn's new messages, their tokens and the answer's bound."""
        shape = self.shape
        if s.script is not None:
            st = s.script.turns[s.turn]
            text = st.text or self.piece(zlib.crc32(f"{s.sid}/{s.turn}".encode()), st.tokens)
            max_tokens = st.max_tokens or shape.output_tokens
            if s.turn == 0:
                return (
                    [{"role": "user", "content": f"Session {s.sid}. {text}"}],
                    st.tokens + 4,
                    max_tokens,
                )
            return [{"role": "user", "content": text}], st.tokens, max_tokens
        if s.turn == 0:
            task = self.piece(rng.randrange(1 << 28), shape.user_tokens)
            head = f"Task {s.sid}: " if s.root else f"Subagent {s.sid}, your part: "
            return (
                [{"role": "user", "content": head + task}],
                shape.user_tokens + 6,
                shape.output_tokens,
            )
        return [], 0, shape.output_tokens  # the tool result went into the history at checkin

    def _end(self, s: Session, new_tokens: int, max_tokens: int) -> str | None:
        """``done`` on the last planned turn; ``context`` when the next turn could not fit."""
        if s.turn + 1 >= s.turns:
            return "done"
        if self.context_length is None:
            return None
        nxt = (
            s.script.turns[s.turn + 1].tokens
            if s.script is not None
            else self.shape.tool_result_tokens
        )
        need = s.context_tokens + new_tokens + max_tokens + CALL_TOKENS + nxt + max_tokens
        return None if self._fits(need) else "context"

    def _fits(self, tokens: int) -> bool:
        """Whether a request of ``tokens`` (prompt and answer) fits the target's context. What
        a chat template adds for tool calls and results is estimated: a tenth of the context
        is kept spare (measured on llama.cpp: a 512-token context was overrun by 1-6 tokens
        without it)."""
        if self.context_length is None:
            return True
        spare = max(CHAT_TEMPLATE_TOKENS, self.context_length // 10)
        return tokens <= self.context_length - CHAT_TEMPLATE_TOKENS - spare

    def checkin(
        self,
        req: PlannedRequest,
        ok: bool,
        reply: str,
        usage: dict[str, Any] | None,
        now: float,
        rng: random.Random,
    ) -> None:
        """After a turn's reply: the session's next turn (after its tool), a fork, or its end."""
        s, messages, new_tokens, end = req.state
        if not ok or end is not None:
            self._close(s, reply if ok else "", now)
            return
        used = reported_tokens(usage)
        if s.script is not None:
            # A recorded session's turns are user turns: the answer, then the next turn's wait.
            s.messages = [*messages, {"role": "assistant", "content": reply}]
            s.context_tokens = (
                used if used is not None else s.context_tokens + new_tokens + approx_tokens(reply)
            )
            s.turn += 1
            s.wait_s = s.script.turns[s.turn].delay_s
            s.ready_at = now + s.wait_s
            self._push(s)
            return
        call_id = _call_id(s.sid, s.turn)
        tool = self.tools[s.turn % len(self.tools)]["function"]["name"] if self.tools else "tool"
        args = json.dumps({"path": f"src/{s.sid}/{s.turn}.py", "reason": "next step"})
        call = {"id": call_id, "type": "function", "function": {"name": tool, "arguments": args}}
        s.messages = [
            *messages,
            {"role": "assistant", "content": reply or None, "tool_calls": [call]},
        ]
        s.context_tokens = (
            used + CALL_TOKENS
            if used is not None
            else s.context_tokens + new_tokens + approx_tokens(reply or "x") + CALL_TOKENS
        )
        s.turn += 1
        s.after_fork = False
        if s.root and self.shape.fork > 0 and rng.random() < self.shape.fork:
            # A branch starts from this context: it forks only when the branch's turn fits.
            first = self.shape.user_tokens + 2 * self.shape.output_tokens + 16
            if self._fits(s.context_tokens + first):
                self._fork(s, call_id, now)
                return
        # The tool runs (its think time), then its result is the next turn's new content.
        s.wait_s = self.shape.tool_wait.draw(rng)
        body = self.piece(rng.randrange(1 << 28), self.shape.tool_result_tokens)
        s.messages.append({"role": "tool", "tool_call_id": call_id, "content": body})
        s.context_tokens += self.shape.tool_result_tokens
        s.ready_at = now + s.wait_s
        self._push(s)

    def _fork(self, parent: Session, call_id: str, now: float) -> None:
        """``branches`` subagents start now from the parent's context; it waits for them."""
        k = self.shape.branches
        fork = Fork(parent, f"{parent.sid}@{parent.turn - 1}", k, now)
        for b in range(k):
            child = Session(
                f"{parent.sid}.{parent.turn - 1}b{b}",
                self.shape.branch_turns,
                list(parent.messages)
                + [{"role": "tool", "tool_call_id": call_id, "content": f"Subagent {b} started."}],
                parent.context_tokens + 8,
                ready_at=now,
                branch=b,
                fork=fork,
                root=False,
            )
            self._push(child)

    def _close(self, s: Session, reply: str, now: float) -> None:
        """A session is over (done, out of context or failed): a branch may release its parent."""
        if s.root:
            self.roots_open -= 1
            return
        fork = s.fork
        if fork is None:
            return
        fork.results.append(reply[:400])
        fork.open -= 1
        if fork.open == 0:
            parent = fork.parent
            parent.wait_s = now - fork.t0  # the fan-out: fork to the last branch done
            parent.after_fork = True
            result = " | ".join(r or "(no text)" for r in fork.results)
            call = _call_id(parent.sid, parent.turn - 1)
            parent.messages.append({"role": "tool", "tool_call_id": call, "content": result})
            parent.context_tokens += approx_tokens(result)
            parent.ready_at = now
            self._push(parent)


def _call_id(sid: str, turn: int) -> str:
    return f"call_{sid}_{turn}".replace("-", "_").replace(".", "_")


# ------------------------------------------------------------------ the scenario mixin


@dataclass(slots=True)
class _Prefix:
    """What every session of a process shares: the corpus, the system prompt, the tools."""

    piece: Any
    system: tuple[str, int]
    tools: list[dict[str, Any]]
    tools_cost: int


def _shared_prefix(ctrl: Any, shape: AgentShape) -> _Prefix:
    """This process's corpus (calibrated with the target's /tokenize where it has one), and the
    system prompt and tools every session shares, kept inside the target's context with room
    for a turn: the system prompt shrinks first, then the tool list (never a sure 400)."""
    from servecheck.load.workload.prompts import make_prompt, tokenize_counter
    from servecheck.load.workload.trace import Corpus

    cfg = ctrl.cfg
    count = None
    if cfg.use_tokenize:
        root = cfg.base_url.rstrip("/").removesuffix("/v1")
        count, _ = tokenize_counter(root, cfg.model, ctrl.auth_headers())
    corpus = Corpus(cfg.seed)
    if count is not None:
        corpus.calibrate(count)

    def cost(tools: list[dict[str, Any]]) -> int:
        measured = count(json.dumps(tools)) if count is not None and tools else None
        return measured or tools_tokens(tools)

    tools = agent_tools(shape.tools)
    tokens = shape.system_tokens
    if cfg.context_length:
        room = (
            cfg.context_length
            - CHAT_TEMPLATE_TOKENS
            - (shape.user_tokens + 2 * (shape.output_tokens + shape.tool_result_tokens) + 64)
        )
        while tools and cost(tools) > room:
            tools = tools[:-1]
        tokens = max(0, min(tokens, room - cost(tools)))
    if tokens == 0:
        return _Prefix(corpus.piece, ("", 0), tools, cost(tools))
    text, n, _ = make_prompt(tokens, 2_000_003 + cfg.seed, count)
    head = "You are a coding agent working in a repository. Use the tools; be brief. "
    return _Prefix(corpus.piece, (head + text, n + approx_tokens(head)), tools, cost(tools))


class AgentMixin:
    """Agent sessions (:class:`AgentPool`): one pool per Locust process, shared by its users,
    built before the run's clock starts; the knobs come from the run config's ``agent``."""

    pool: AgentPool | None = None
    kinds: dict[str, dict[str, Any]] = {}
    rng: random.Random

    @classmethod
    def prepare_run(cls, ctrl: Any) -> None:
        """Before the run's clock starts (LLMUser.prepare_run): the shared prefix, the pool."""
        cfg = ctrl.cfg
        shape = AgentShape.from_dict(cfg.agent) if getattr(cfg, "agent", None) else AgentShape()
        prefix = _shared_prefix(ctrl, shape)
        sessions = load_sessions(shape.source, shape.source_format) if shape.source else None
        cls.kinds = {"agent": {"tools": prefix.tools}} if prefix.tools else {}
        per_process = -(-max(1, cfg.users) // max(1, cfg.workers))
        cls.pool = AgentPool(
            shape,
            prefix.system,
            prefix.tools,
            prefix.piece,
            tools_cost=prefix.tools_cost,
            name=str(ctrl.worker),
            context_length=cfg.context_length,
            sessions=sessions,
            roots_cap=per_process,
        )

    def plan_request(self, ctrl: Any) -> PlannedRequest:
        import time

        assert self.pool is not None
        return self.pool.checkout(time.perf_counter(), self.rng)

    def after_response(
        self, req: PlannedRequest, rec: Any, reply: str, usage: dict[str, Any] | None
    ) -> None:
        import time

        assert self.pool is not None
        ok = rec.error is None and not rec.abandoned
        self.pool.checkin(req, ok, reply, usage, time.perf_counter(), self.rng)

    def wait_time(self) -> float:
        """Closed loop: wait while every session is in its tool and no new one may start."""
        import time

        return 0.0 if self.pool is None else self.pool.wait_s(time.perf_counter())
