"""What a check sees (:class:`CheckContext`) and how it reports (:class:`CheckFailed`).

A failure always carries what was expected, what was received and, when a request was
involved, a curl reproduction with the key masked. Checks never use bare ``assert``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypedDict, Unpack

from servecheck.checks.discovery import TargetInfo
from servecheck.checks.registry import matches
from servecheck.checks.schema import SchemaFindings
from servecheck.client.http import AsyncServeClient, Exchange, ServeClient
from servecheck.config.model import Target
from servecheck.engines.spec import EngineProfile
from servecheck.redact import redact


class FailureExtras(TypedDict, total=False):
    """What a failure may carry besides its summary, expected and received: the ``exchange`` to
    show (and reproduce with curl), the ``deviation`` an engine profile may allow, and a ``hint``
    that names the fix. One declaration for :class:`CheckFailed`, ``fail`` and ``expect``."""

    exchange: Exchange | None
    deviation: str | None
    hint: str


class CheckFailed(Exception):
    """A check found a defect. ``deviation`` names it when an engine profile may allow it."""

    def __init__(
        self,
        check_id: str,
        summary: str,
        *,
        expected: str,
        received: str,
        **extras: Unpack[FailureExtras],
    ) -> None:
        self.check_id = check_id
        self.summary = summary
        self.expected = expected
        self.received = received
        self.exchange = extras.get("exchange")
        self.deviation = extras.get("deviation")
        self.hint = extras.get("hint", "")
        self.notes: list[str] = []
        super().__init__(self.render())

    def note(self, text: str) -> None:
        """Add a line to the message (the schema findings of a check that failed on its own)."""
        self.notes.append(text)
        self.args = (self.render(),)

    def render(self) -> str:
        lines = [
            f"{self.check_id}: {self.summary}",
            f"  Expected: {self.expected}",
            f"  Received: {self.received}",
        ]
        if self.hint:
            lines.append(f"  Hint: {self.hint}")
        lines.extend(f"  {note}" for note in self.notes)
        if self.exchange is not None:
            lines.append(f"  Reproduce: {self.exchange.curl()}")
        return redact("\n".join(lines))


class NonStrict(Exception):
    """A legal engine difference (from the profile or the target's ``allow``), with its reason;
    or, with ``kind="schema"``, answers that break the SDK's types (checks/schema.py), which
    strict mode makes a failure."""

    def __init__(self, check_id: str, reason: str, failure: CheckFailed, *, kind: str = "") -> None:
        self.check_id = check_id
        self.reason = reason
        self.failure = failure
        self.kind = kind
        label = f"non-strict ({kind})" if kind else "non-strict"
        would = "would fail in strict mode" if kind == "schema" else "would fail"
        super().__init__(redact(f"{check_id}: {label}: {reason}\n  ({would}: {failure.summary})"))


class CheckSkipped(Exception):
    """The check cannot run here (a capability probe said no); reported as skipped with the reason."""


# Room a reasoning model gets over the answer a check needs, where the target declares no switch
# that turns thinking off: enough for the short thoughts of the tiny CI models and the reference
# server's longest mode, capped at half the context so the prompt still fits.
REASONING_ROOM = 256
REASONING_FIELDS = ("reasoning_content", "reasoning")
# The check that judges a target's thinking-off switch; known to fail there, the switch is not used.
THINKING_OFF_CHECK = "REASON-THINKING-OFF"


# How servers word "the prompt does not fit the context" (vLLM, llama.cpp, the reference, and
# LiteLLM wrapping them: "litellm.ContextWindowExceededError: ..."): the checks that replay or
# generate large requests (CLIENT-SHAPE-*, the grid's client shapes, AGENT-SIZED-*) read a 4xx
# in these words as a context too small, not as a refused request.
CONTEXT_REFUSALS = (
    "maximum context length",
    "prompt is too long",
    "exceed_context_size",
    "exceeds the available context size",
    "contextwindowexceedederror",
)


def body_snippet(obj: Any, limit: int = 600) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    return redact(text if len(text) <= limit else text[:limit] + "...")


def cut_in_reasoning(choice: Any) -> bool:
    """A non-streamed choice cut by its budget while reasoning: finish_reason ``length``, no
    content and no tool call, and text in a reasoning field."""
    if not isinstance(choice, dict) or choice.get("finish_reason") != "length":
        return False
    message = choice.get("message")
    if not isinstance(message, dict) or message.get("tool_calls"):
        return False
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        return False
    return any(isinstance(message.get(f), str) and message[f] for f in REASONING_FIELDS)


@dataclass(frozen=True, slots=True)
class Trials:
    """A model-dependent check run ``runs`` times (``--trials``): how many passed, how many had
    to (its threshold), and the first failure's summary when one failed."""

    passed: int
    runs: int
    threshold: int
    first_failure: str = ""

    @property
    def ok(self) -> bool:
        return self.passed >= self.threshold

    def rate(self) -> str:
        return f"{self.passed}/{self.runs}"

    def phrase(self) -> str:
        return f"passed {self.rate()} trials (threshold {self.threshold}/{self.runs})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "runs": self.runs,
            "threshold": self.threshold,
            "first_failure": self.first_failure,
        }


@dataclass(slots=True)
class CheckContext:
    check_id: str
    target: Target
    model: str
    profile: EngineProfile
    capabilities: dict[str, bool]
    info: TargetInfo
    client: ServeClient
    exchanges: list[Exchange] = field(default_factory=list)
    # (target, model, route) -> why the route refused a good request (None: it served it);
    # the pytest plugin shares one dict per session, so each precondition is probed once.
    preconditions: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    # Strict mode (the plugin's --sc-strict): schema findings (checks/schema.py) fail the check
    # instead of making it non-strict; a target's ``strict: true`` turns it on for that target.
    strict: bool = False
    schema: SchemaFindings = field(default_factory=SchemaFindings)
    # ``--trials K``: how often a model-dependent check runs; its tally once it has run K > 1.
    trials: int = 1
    trial_result: Trials | None = None

    # ---- requests -----------------------------------------------------------------------
    def post(self, path: str, body: Any = None, **kw: Any) -> Exchange:
        ex = self.client.post(path, body, **kw)
        self.exchanges.append(ex)
        return ex

    def get(self, path: str, **kw: Any) -> Exchange:
        ex = self.client.get(path, **kw)
        self.exchanges.append(ex)
        return ex

    def chat_body(
        self, messages: list[dict[str, Any]] | str | None = None, **params: Any
    ) -> dict[str, Any]:
        if messages is None:
            messages = "Say hello."
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        body.update(params)
        return body

    def chat(self, messages: list[dict[str, Any]] | str | None = None, **params: Any) -> Exchange:
        """POST /chat/completions (non-streaming) with this check's model."""
        return self.post("/chat/completions", self.chat_body(messages, **params))

    def stream_chat(
        self,
        messages: list[dict[str, Any]] | str | None = None,
        *,
        usage: bool | None = None,
        **params: Any,
    ) -> Exchange:
        """POST /chat/completions with ``stream: true`` (and include_usage when supported)."""
        body = self.chat_body(messages, stream=True, **params)
        if usage is None:
            usage = self.capabilities.get("usage_in_stream", False)
        if usage:
            body["stream_options"] = {"include_usage": True}
        return self.post("/chat/completions", body, stream=True)

    # ---- answers from reasoning models ----------------------------------------------------
    def answer_budget(
        self, tokens: int, *, key: str = "max_tokens", grow: bool = True
    ) -> dict[str, Any]:
        """The request fields of a check that needs ``tokens`` of answer text (``key``: the
        limit's name). On a reasoning target the budget would be spent thinking, so: the
        target's ``thinking_off`` switch where it declares one, else (``grow``) the budget with
        :data:`REASONING_ROOM` more. A target whose engine thinks only when asked
        (``thinking_on``), a target that does not reason and the REASON checks get the budget
        as it is. Merge it
        first (``{**ctx.answer_budget(8), **case}``) so a case's own fields win."""
        declared = self.target.reasoning
        # REASON-* judge the reasoning itself and size their own budgets; a helper they share
        # with other surfaces (tools.tool_request) must not turn thinking off under them.
        if declared is None or declared.thinking_on or self.check_id.startswith("REASON-"):
            return {key: tokens}
        if declared.thinking_off and not self.thinking_off_known_broken:
            return {key: tokens, **declared.thinking_off}
        if not grow:
            return {key: tokens}
        room = REASONING_ROOM
        context = self.info.context_length or self.target.context_length
        if context:
            room = max(0, min(room, context // 2 - tokens))
        return {key: tokens + room}

    @property
    def thinking_off_known_broken(self) -> bool:
        """The target records REASON-THINKING-OFF as a known failure: its switch is declared but
        measured not to hold (vLLM's non-streamed deepseek_r1 parser files the whole answer as
        reasoning), so the checks ask with room for the reasoning instead of through it."""
        return matches(THINKING_OFF_CHECK, self.target.known_failures) is not None

    def not_judged_if_thinking(self, choice: Any, what: str, ex: Exchange | None = None) -> None:
        """Skip, as not judged, when a non-streamed ``choice`` has no answer because its budget
        ran out while the model was reasoning (finish_reason ``length``, empty content, text in
        a reasoning field): that answer is correct, and says nothing about what the check asks."""
        if cut_in_reasoning(choice):
            body = ex.request_body if ex is not None else None
            body = body if isinstance(body, dict) else {}
            self.not_judged_cut(what, body.get("max_completion_tokens") or body.get("max_tokens"))

    def not_judged_cut(self, what: str, budget: int | None = None) -> NoReturn:
        """Skip, as not judged: ``what`` got no answer because its budget ran out in reasoning."""
        tokens = f" of {budget} tokens" if budget else ""
        declared = self.target.reasoning
        if declared is None or not declared.thinking_off:
            advice = (
                "declare the engine's thinking switch in targets.yaml (reasoning: {thinking_off: "
                "{chat_template_kwargs: {enable_thinking: false}}} or {reasoning_effort: ...}) "
                "so the check can ask without reasoning"
            )
        elif self.thinking_off_known_broken:
            advice = (
                f"the target's thinking switch is a known failure ({THINKING_OFF_CHECK}), so the "
                "check asked with room for the reasoning, which the model outgrew; a longer "
                "context gives it more"
            )
        else:
            # The switch went with the request, so the engine ignored it or its parser filed the
            # answer as reasoning: REASON-THINKING-OFF is the check that judges that.
            advice = (
                f"the request carried the thinking switch {declared.thinking_off}, which did not "
                f"hold ({THINKING_OFF_CHECK} judges it); with reasoning.thinking_off: false the "
                "checks ask with room for the reasoning instead"
            )
        raise CheckSkipped(
            f"{self.check_id}: not judged: {what}: the budget{tokens} ran out while the model "
            f"was reasoning (finish_reason 'length', empty content, text in the reasoning "
            f"field); {advice}"
        )

    def async_client(self) -> AsyncServeClient:
        return AsyncServeClient(self.client.settings)

    @property
    def server_root(self) -> str:
        return self.target.server_root

    def schema_findings(self) -> SchemaFindings:
        """Validate every answer received since the last call against its SDK type
        (checks/schema.py) and return the findings so far. Everything a check received lands in
        ``exchanges`` (``post``, ``get``, and the bursts checks add), so this is the one place."""
        for ex in self.exchanges[self.schema.seen :]:
            self.schema.observe(ex, self.client.settings.base_url)
        self.schema.seen = len(self.exchanges)
        return self.schema

    @property
    def strict_schema(self) -> bool:
        return self.strict or self.target.strict

    # ---- verdicts -----------------------------------------------------------------------
    def fail(
        self,
        summary: str,
        *,
        expected: str,
        received: str,
        **extras: Unpack[FailureExtras],
    ) -> NoReturn:
        raise CheckFailed(self.check_id, summary, expected=expected, received=received, **extras)

    def expect(
        self,
        condition: bool,
        summary: str,
        *,
        expected: str,
        received: Any,
        **extras: Unpack[FailureExtras],
    ) -> None:
        if not condition:
            self.fail(
                summary,
                expected=expected,
                received=received if isinstance(received, str) else body_snippet(received),
                **extras,
            )

    def ok_json(self, ex: Exchange, what: str) -> dict[str, Any]:
        """The JSON object of a 2xx answer, or a failure that says what came back instead."""
        if ex.error:
            self.fail(
                f"{what}: the request did not complete",
                expected="a 2xx response",
                received=ex.describe(),
                exchange=ex,
            )
        if not ex.ok:
            self.fail(
                f"{what}: the server refused a valid request",
                expected="HTTP 200",
                received=ex.describe(),
                exchange=ex,
            )
        data = ex.json()
        if not isinstance(data, dict):
            self.fail(
                f"{what}: the body is not a JSON object",
                expected="a JSON object",
                received=ex.describe(),
                exchange=ex,
            )
        return data

    def ok_stream(self, ex: Exchange, what: str) -> Exchange:
        """A completed 200 event stream, or a failure naming what broke (transport, status, SSE)."""
        if ex.error:
            self.fail(
                f"{what}: the stream did not complete",
                expected="a complete event stream within the timeout",
                received=ex.describe(),
                exchange=ex,
            )
        if ex.status != 200 or ex.stream is None:
            self.fail(
                f"{what}: the server refused a valid streaming request",
                expected="HTTP 200 text/event-stream",
                received=ex.describe(),
                exchange=ex,
            )
        return ex
