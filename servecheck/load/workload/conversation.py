"""Requests that look like production chat: multi-turn conversations and shared system prompts.

Why: real chat and agent traffic resends a growing history every turn and opens with a long
system prompt that many users share, so the engine's prefix cache decides TTFT and the KV
footprint. Single-turn random prompts miss both (they defeat the cache on purpose).

* :class:`ConversationPool` keeps conversations of ``turns`` turns. Each turn sends the whole
  history built from the server's **real replies** (the reply text is read from the stream's own
  bytes, :func:`reply_text`), then a new user message from the scenario's mix. A turn whose
  request failed ends its conversation (there is no reply to continue from); a turn that would
  not fit the target's context ends it too (counted, never sent as a sure 400).
  ``think_s`` is the pause between a reply and the next turn: in a closed loop the user waits it
  out (Locust's ``wait_time``); in an open loop an arrival takes a conversation whose think time
  is over, else starts a new one.
* :class:`SharedPrefixes` makes ``groups`` system prompts of ``prefix_tokens`` tokens (sized by
  the target's /tokenize where it has one); every request opens with one of them and then its own
  user message, so the prefix can be cached and the rest cannot.

The user class (``scenarios/multi_turn.py``, ``scenarios/shared_prefix.py``) is a thin
:class:`~servecheck.load.generator.locust_user.LLMUser` that returns
:class:`~servecheck.load.workload.planned.PlannedRequest` objects from here. No locust or gevent in this module: it is unit-tested in the pytest process.

Record fields (``docs/metrics.md``): ``conversation``, ``turn`` (0-based), ``history_tokens``
(tokens this request resends before its new user message: a shared system prompt and the
earlier turns, i.e. the previous turn's server-reported prompt plus completion tokens; the
client estimate when the server sent no usage) and ``prefix_group``.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from servecheck.load.workload.dataset import configured, dataset_prompts
from servecheck.load.workload.dataset import opener as dataset_opener
from servecheck.load.workload.planned import (
    CHAT_TEMPLATE_TOKENS,
    PlannedRequest,
    reported_tokens,
)
from servecheck.load.workload.prompts import (
    APPROX_METHOD,
    Counter,
    Prompt,
    approx_tokens,
    make_prompt,
)

MAX_IDLE = 10_000  # open loop: conversations waiting out their think time, oldest dropped beyond
_CONTENT = re.compile(rb'"delta":\{"content":"((?:[^"\\]|\\.)*)"')


def reply_text(raw: bytes) -> str:
    """The assistant's content in a streamed chat completion (choice 0), from the raw SSE bytes.

    Read after the stream ended, not on the token-timing path. The common chunk (one choice,
    ``"delta":{"content":"..."}`` first in the delta) has its string cut out with a regex and
    decoded only if it holds an escape; anything else is parsed as JSON (:func:`_parsed_text`,
    which the tests hold the fast path to). CR/CRLF framing is folded to LF first. Reasoning and
    tool-call deltas are not content.
    """
    text = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if b"\r" in raw else raw
    out: list[str] = []
    for block in text.split(b"\n\n"):
        if block.startswith(b"data: {") and b"\n" not in block:
            data = block[6:]
            m = _CONTENT.search(data)
            if m is not None and data.count(b'"index"') == 1 and b'"index":0' in data:
                piece = m.group(1)
                out.append(json.loads(b'"' + piece + b'"') if b"\\" in piece else piece.decode())
                continue
        else:
            data = b"\n".join(
                line[6:] if line[5:6] == b" " else line[5:]
                for line in block.split(b"\n")
                if line.startswith(b"data:")
            )
        out.append(_parsed_text(data))
    return "".join(out)


def _parsed_text(data: bytes) -> str:
    """Choice 0's content (chat) or text (completions) of one SSE data payload, by parsing it."""
    if not data or data[:1] != b"{":
        return ""
    try:
        obj = json.loads(data)
    except ValueError:
        return ""
    out = []
    for ch in obj.get("choices") or ():
        if not isinstance(ch, dict) or ch.get("index", 0) != 0:
            continue
        delta = ch.get("delta")
        piece = delta.get("content") if isinstance(delta, dict) else ch.get("text")
        if isinstance(piece, str):
            out.append(piece)
    return "".join(out)


# ------------------------------------------------------------------ multi-turn


@dataclass(slots=True)
class Conversation:
    """One conversation's state: the messages so far and what the server said they cost."""

    cid: str
    turns: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    turn: int = 0  # the next turn's index
    history_tokens: int = 0  # tokens of the earlier turns (server usage where it gave one)
    ready_at: float = 0.0  # perf time the next turn may go (think time)
    prefix_group: str | None = None
    script: list[Prompt] | None = None  # a dataset conversation's own user turns


@dataclass(slots=True)
class ConversationPool:
    """Conversations for one user (closed loop) or one process's dispatcher (open loop).

    ``pick(rng)`` gives the new user message of a turn; ``system`` (optional) gives a conversation
    its system prompt and group. ``context_length`` (when known) ends a conversation whose next
    turn would not fit instead of sending it.
    """

    turns: int
    think_s: float
    pick: Callable[[random.Random], Prompt]
    name: str = "c"
    context_length: int | None = None
    system: Callable[[random.Random], tuple[str, str, int]] | None = None
    # A dataset: each new conversation's system prompt (or None) and user turns (dataset.py).
    opener: Callable[[random.Random], tuple[str | None, list[Prompt]]] | None = None
    idle: deque[Conversation] = field(default_factory=deque)
    started: int = 0
    completed: int = 0  # reached their last turn
    ended_by_error: int = 0
    ended_by_context: int = 0

    def _new(self, rng: random.Random) -> Conversation:
        self.started += 1
        conv = Conversation(cid=f"{self.name}-{self.started}", turns=self.turns)
        if self.system is not None:
            group, text, tokens = self.system(rng)
            conv.prefix_group = group
            conv.messages.append({"role": "system", "content": text})
            conv.history_tokens = tokens
        if self.opener is not None:
            system, script = self.opener(rng)
            conv.script, conv.turns = script, min(self.turns, len(script))
            if system and self.system is None:
                conv.messages.append({"role": "system", "content": system})
                conv.history_tokens = approx_tokens(system)
        return conv

    def checkout(self, now: float, rng: random.Random) -> PlannedRequest:
        """The next turn to send: a waiting conversation whose think time is over, else a new one."""
        conv = None
        if self.idle and self.idle[0].ready_at <= now:
            conv = self.idle.popleft()
        while True:
            if conv is None:
                conv = self._new(rng)
            prompt = conv.script[conv.turn] if conv.script else self.pick(rng)
            fits = self.context_length is None or (
                conv.history_tokens + prompt.prompt_tokens + prompt.max_tokens
                <= self.context_length - CHAT_TEMPLATE_TOKENS
            )
            if fits or conv.turn == 0:
                break
            self.ended_by_context += 1
            conv = None
        text = prompt.text
        if conv.turn == 0:
            # The mix has a few prompt variants per entry: a conversation's own opening keeps two
            # conversations from sharing a cached history (only a shared system prompt may).
            text = f"Conversation {conv.cid}. {text}"
        messages = [*conv.messages, {"role": "user", "content": text}]
        fields: dict[str, Any] = {
            "conversation": conv.cid,
            "turn": conv.turn,
            "history_tokens": conv.history_tokens,
        }
        if conv.prefix_group is not None:
            fields["prefix_group"] = conv.prefix_group
        return PlannedRequest(
            messages,
            prompt.max_tokens,
            prompt.kind,
            conv.history_tokens + prompt.prompt_tokens,
            capture=True,
            fields=fields,
            state=(conv, messages, prompt),
        )

    def checkin(
        self,
        req: PlannedRequest,
        ok: bool,
        reply: str,
        usage: dict[str, Any] | None,
        now: float,
    ) -> None:
        """After a turn's reply: keep the conversation for its next turn, or end it."""
        conv, messages, prompt = req.state
        if not ok:
            self.ended_by_error += 1
            return
        conv.messages = [*messages, {"role": "assistant", "content": reply}]
        used = reported_tokens(usage)
        conv.history_tokens = (
            used
            if used is not None
            else conv.history_tokens + prompt.prompt_tokens + approx_tokens(reply)
        )
        conv.turn += 1
        if conv.turn >= conv.turns:
            self.completed += 1
            return
        conv.ready_at = now + self.think_s
        self.idle.append(conv)
        while len(self.idle) > MAX_IDLE:
            self.idle.popleft()

    def wait_s(self, now: float) -> float:
        """Closed loop: how long this user thinks before its next turn (0 for a new conversation)."""
        if not self.idle:
            return 0.0
        return max(0.0, self.idle[0].ready_at - now)

    def as_dict(self) -> dict[str, int]:
        return {
            "started": self.started,
            "completed": self.completed,
            "ended_by_error": self.ended_by_error,
            "ended_by_context": self.ended_by_context,
        }


# ------------------------------------------------------------------ shared prefix


@dataclass(slots=True)
class SharedPrefixes:
    """``groups`` distinct system prompts of about ``prefix_tokens`` tokens each.

    Distinct from the first word on (each group's text has its own seed), so no two groups share
    a cacheable block; a request picks its group uniformly at random.
    """

    prefix_tokens: int
    groups: int
    texts: list[tuple[str, int]] = field(default_factory=list)
    method: str = APPROX_METHOD
    sent: int = 0

    @classmethod
    def build(
        cls, prefix_tokens: int, groups: int, seed: int = 0, count: Counter | None = None
    ) -> SharedPrefixes:
        sp = cls(prefix_tokens, groups)
        methods = set()
        for g in range(groups):
            text, n, method = make_prompt(prefix_tokens, 1_000_003 + seed * 31 + g, count)
            sp.texts.append(("You are assistant number " + str(g) + ". " + text, n + 6))
            methods.add(method)
        sp.method = "tokenize" if methods == {"tokenize"} else APPROX_METHOD
        return sp

    def choose(self, rng: random.Random) -> tuple[str, str, int]:
        """``(group name, system prompt, its tokens)``."""
        g = rng.randrange(self.groups)
        text, n = self.texts[g]
        return f"g{g}", text, n

    def request(self, prompt: Prompt, rng: random.Random) -> PlannedRequest:
        """A single-turn request: a group's system prompt, then this request's own message."""
        group, text, n = self.choose(rng)
        self.sent += 1
        # A number of its own first: only the system prompt is shared, never the user message
        # (the mix has a few variants per entry, which a cache would otherwise serve too).
        own = f"Request {self.sent}. {prompt.text}"
        return PlannedRequest(
            [{"role": "system", "content": text}, {"role": "user", "content": own}],
            prompt.max_tokens,
            prompt.kind,
            n + prompt.prompt_tokens,
            fields={"prefix_group": group, "history_tokens": n},
        )


# ------------------------------------------------------------------ scenario mixins
#
# Mixed into an LLMUser by a locustfile (``class U(MultiTurnMixin, LLMUser)``); they use only the
# controller's public parts (prompts, cfg, auth_headers, worker), so this module stays free of
# locust. Per process the shared prompts are built once, before the first request.

_SHARED: dict[str, SharedPrefixes] = {}
_SHARED_LOCK = threading.Lock()  # gevent-patched in a Locust process: users wait, one builds
_POOLS = [0]


def shared_prefixes(ctrl: Any, prefix_tokens: int, groups: int) -> SharedPrefixes:
    """This process's shared system prompts, sized with the target's /tokenize where it has one
    and kept inside its context next to the largest prompt of the mix."""
    key = f"{prefix_tokens}/{groups}"
    sp = _SHARED.get(key)
    if sp is not None:
        return sp
    with _SHARED_LOCK:
        sp = _SHARED.get(key)
        if sp is None:
            sp = _SHARED[key] = _build_shared(ctrl, prefix_tokens, groups)
    return sp


def _build_shared(ctrl: Any, prefix_tokens: int, groups: int) -> SharedPrefixes:
    cfg = ctrl.cfg
    tokens = prefix_tokens
    if cfg.context_length:
        biggest = max((p.prompt_tokens + p.max_tokens for p in ctrl.prompts.prompts), default=0)
        tokens = max(16, min(tokens, cfg.context_length - CHAT_TEMPLATE_TOKENS - biggest - 16))
    count = None
    if cfg.use_tokenize:
        from servecheck.load.workload.prompts import tokenize_counter

        root = cfg.base_url.rstrip("/").removesuffix("/v1")
        count, _ = tokenize_counter(root, cfg.model, ctrl.auth_headers())
    return SharedPrefixes.build(tokens, groups, seed=cfg.seed, count=count)


class MultiTurnMixin:
    """Conversations of ``turns`` turns with ``think_s`` between them (a scenario's knobs,
    servecheck/scenarios/_options.py); with ``prefix_tokens`` > 0  each conversation
    opens with one of ``prefix_groups`` shared system prompts."""

    turns: int = 4
    think_s: float = 0.0
    prefix_tokens: int = 0
    prefix_groups: int = 4
    _pool: ConversationPool | None = None
    rng: random.Random

    def _conversations(self, ctrl: Any) -> ConversationPool:
        if self._pool is None:
            _POOLS[0] += 1
            system = None
            if self.prefix_tokens > 0:
                system = shared_prefixes(ctrl, self.prefix_tokens, self.prefix_groups).choose
            opener = dataset_opener(ctrl) if configured(ctrl.cfg) else None
            self._pool = ConversationPool(
                opener=opener,
                turns=self.turns,
                think_s=self.think_s,
                pick=ctrl.prompts.pick,
                name=f"{ctrl.worker}-u{_POOLS[0]}",
                context_length=ctrl.cfg.context_length,
                system=system,
            )
        return self._pool

    @classmethod
    def prepare_run(cls, ctrl: Any) -> None:
        """Before the run's clock starts (LLMUser.prepare_run): the shared prompts are built."""
        if cls.prefix_tokens > 0:
            shared_prefixes(ctrl, cls.prefix_tokens, cls.prefix_groups)
        if configured(ctrl.cfg):
            dataset_prompts(ctrl)

    def plan_request(self, ctrl: Any) -> PlannedRequest:
        import time

        return self._conversations(ctrl).checkout(time.perf_counter(), self.rng)

    def after_response(
        self, req: PlannedRequest, rec: Any, reply: str, usage: dict[str, Any] | None
    ) -> None:
        import time

        assert self._pool is not None
        self._pool.checkin(
            req, rec.error is None and not rec.abandoned, reply, usage, time.perf_counter()
        )

    def wait_time(self) -> float:
        """Closed loop: think time before the next turn of this user's conversation."""
        import time

        return 0.0 if self._pool is None else self._pool.wait_s(time.perf_counter())


class SharedPrefixMixin:
    """Single-turn requests that open with one of ``prefix_groups`` shared system prompts of
    ``prefix_tokens`` tokens (servecheck/scenarios/_options.py)."""

    prefix_tokens: int = 256
    prefix_groups: int = 4
    rng: random.Random

    @classmethod
    def prepare_run(cls, ctrl: Any) -> None:
        """Before the run's clock starts (LLMUser.prepare_run): the shared prompts are built."""
        shared_prefixes(ctrl, cls.prefix_tokens, cls.prefix_groups)

    def plan_request(self, ctrl: Any) -> PlannedRequest:
        sp = shared_prefixes(ctrl, self.prefix_tokens, self.prefix_groups)
        return sp.request(ctrl.prompts.pick(self.rng), self.rng)
