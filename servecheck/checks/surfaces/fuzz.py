"""FUZZ-*: generated invalid and edge-case request bodies (hypothesis).

Hypothesis runs inside the check, not as a pytest test: a bounded number of derandomized
examples (``fuzz_examples`` in targets.yaml), no example database, a wall-clock cap. A failing
body is shrunk to a small one and reported as a curl reproduction.
"""

from __future__ import annotations

import json
import time
from typing import Any

from servecheck.checks.context import CheckContext, CheckSkipped
from servecheck.checks.registry import check
from servecheck.checks.surfaces.err import ERROR_SHAPE, error_shape_problem
from servecheck.client.http import Exchange

WALL_CAP_S = 90.0  # generation and shrinking together; after it, no more requests are sent
REQUEST_CAP_FACTOR = 4  # at most this many requests per example budget (shrinking included)


class _Found(Exception):
    """A body the server mishandled: raised inside hypothesis so it shrinks the body."""

    def __init__(self, problem: str, exchange: Exchange) -> None:
        super().__init__(problem)
        self.problem = problem
        self.exchange = exchange


def _strategies(model: str) -> Any:
    from hypothesis import strategies as st

    text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
    edge_numbers = st.sampled_from(
        [0, -1, 1, 2, 17, 2**31, 2**63, -(2**63), 10**30, 0.5, -0.5, 2.5, 1e-9, 1e308, -1e308]
    )
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text
    )
    junk = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=6,
    )
    role = (
        st.sampled_from(["user", "system", "assistant", "tool", "developer", "", "USER", "wizard"])
        | junk
    )
    part = st.fixed_dictionaries(
        {
            "type": st.sampled_from(["text", "image_url", "input_audio", "nope"]) | junk,
            "text": text | junk,
        }
    )
    content = text | st.lists(part, max_size=2) | junk
    message = st.fixed_dictionaries(
        {"role": role, "content": content},
        optional={"name": text | junk, "tool_calls": junk, "tool_call_id": text | junk},
    )
    per_field: dict[str, Any] = {
        "model": st.sampled_from([model, "", model.upper(), model + " "]) | junk,
        "messages": st.lists(message, max_size=3) | junk,
        "max_tokens": edge_numbers | junk,
        "max_completion_tokens": edge_numbers | junk,
        "temperature": edge_numbers | junk,
        "top_p": edge_numbers | junk,
        "n": edge_numbers | junk,
        "seed": edge_numbers | junk,
        "stop": st.lists(
            st.sampled_from(["", " ", "\n", "###", "</s>", "\u00e9"]) | text, max_size=6
        )
        | text
        | junk,
        "stream": st.booleans() | junk,
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans() | junk}) | junk,
        "logprobs": st.booleans() | junk,
        "top_logprobs": edge_numbers | junk,
        "presence_penalty": edge_numbers | junk,
        "frequency_penalty": edge_numbers | junk,
        "logit_bias": st.dictionaries(text, edge_numbers | junk, max_size=3) | junk,
        "response_format": st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "json_object", "json_schema", "yaml"]) | junk},
            optional={"json_schema": junk},
        )
        | junk,
        "tools": st.lists(
            st.fixed_dictionaries({"type": st.just("function") | junk, "function": junk}),
            max_size=2,
        )
        | junk,
        "tool_choice": st.sampled_from(["none", "auto", "required", "any"]) | junk,
        "user": text | junk,
    }
    names = sorted(per_field)

    @st.composite
    def bodies(draw: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 4,
        }
        for _ in range(draw(st.integers(1, 4))):
            action = draw(st.sampled_from(["set", "set", "set", "delete", "extra"]))
            if action == "extra":
                body["x_" + draw(text)] = draw(junk)
                continue
            name = draw(st.sampled_from(names))
            if action == "delete":
                body.pop(name, None)
            else:
                body[name] = draw(per_field[name])
        return body

    return bodies()


def edge_corpus(model: str) -> list[tuple[str, dict[str, Any]]]:
    """Known edge cases, one field each, tried before the generated bodies (engines have crashed on each kind)."""

    def base(**fields: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": 4,
        }
        body.update(fields)
        return body

    return [
        ("stop-empty-string", base(stop=[""])),
        ("stop-five-strings", base(stop=["a", "b", "c", "d", "e"])),
        ("n-zero", base(n=0)),
        ("max-tokens-zero", base(max_tokens=0)),
        ("max-tokens-int32-overflow", base(max_tokens=2**31)),
        ("temperature-huge", base(temperature=1e308)),
        ("top-p-zero", base(top_p=0)),
        ("seed-2-64", base(seed=2**64)),
        ("logit-bias-bad-token", base(logit_bias={"999999999": 100})),
        ("content-empty-list", base(messages=[{"role": "user", "content": []}])),
        ("content-missing", base(messages=[{"role": "user"}])),
        (
            "content-nul-emoji",
            base(messages=[{"role": "user", "content": "\u0000 \U0001f600 \u202e"}]),
        ),
        ("json-schema-missing", base(response_format={"type": "json_schema"})),
        ("tools-empty-required", base(tools=[], tool_choice="required")),
        ("top-logprobs-21", base(logprobs=True, top_logprobs=21)),
        ("stream-options-without-stream", base(stream_options={"include_usage": True})),
    ]


def _severe(ex: Exchange, timeout_s: float) -> str | None:
    if ex.error == "timeout":
        return f"no answer within {timeout_s:.0f} s (the server hangs on this body)"
    if ex.error:
        return f"the exchange broke: {ex.describe(200)}"
    if ex.status is not None and ex.status >= 500:
        return ex.describe(300)
    return None


@check(
    "FUZZ-NO-5XX",
    "generated invalid and edge-case bodies never crash the server",
    "for a corpus of known edge cases and `fuzz_examples` (default 40) hypothesis-generated chat bodies (wrong types, huge and negative numbers, "
    "unicode, nested junk, missing and extra fields) the server answers within the timeout, never with a 5xx, and "
    "every 4xx carries an OpenAI error object",
    requires=("route-accepts:/chat/completions",),
)
def fuzz_no_5xx(ctx: CheckContext) -> None:
    from hypothesis import HealthCheck, Phase, Verbosity, example, given, settings

    examples = ctx.target.fuzz_examples
    if examples <= 0:
        raise CheckSkipped("FUZZ-NO-5XX: fuzz_examples is 0 for this target")
    timeout_s = min(ctx.target.timeout_s, 30.0)
    deadline = time.monotonic() + WALL_CAP_S
    budget = examples * REQUEST_CAP_FACTOR
    seen: dict[
        str, str | None
    ] = {}  # body -> severe problem; replays never re-send (keeps shrinking deterministic)
    shape_problems: list[tuple[str, str | None, Exchange]] = []
    exchanges: dict[str, Exchange] = {}
    sent = 0

    slow_is_fine = [
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
    ]

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        verbosity=Verbosity.quiet,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=slow_is_fine,
        report_multiple_bugs=False,
    )
    @given(_strategies(ctx.model))
    def probe(body: dict[str, Any]) -> None:
        nonlocal sent
        key = json.dumps(body, sort_keys=True, ensure_ascii=False)
        if key not in seen:
            if sent >= budget or time.monotonic() > deadline:
                return  # out of budget: unseen bodies count as passing
            sent += 1
            ex = ctx.client.post("/chat/completions", body, timeout_s=timeout_s)
            exchanges[key] = ex
            seen[key] = _severe(ex, timeout_s)
            if seen[key] is None and ex.status is not None and 400 <= ex.status < 500:
                problem, deviation = error_shape_problem(ex)
                if problem is not None:
                    shape_problems.append((problem, deviation, ex))
        if seen[key] is not None:
            raise _Found(seen[key] or "", exchanges[key])

    baseline = ctx.post(
        "/chat/completions", ctx.chat_body("Say hello.", max_tokens=4), timeout_s=timeout_s
    )
    ctx.expect(
        baseline.ok,
        "the server does not answer a valid request, so generated bodies cannot be judged",
        expected="HTTP 200 for the unmutated body",
        received=baseline.describe(300),
        exchange=baseline,
        hint="fix the CHAT-* and HEALTH-* failures first",
    )
    corpus = edge_corpus(ctx.model)
    names = {json.dumps(body, sort_keys=True, ensure_ascii=False): name for name, body in corpus}
    for _, body in reversed(corpus):
        probe = example(body)(probe)
    started = time.monotonic()
    try:
        probe()
    except _Found as found:
        ctx.exchanges.append(found.exchange)
        body = found.exchange.request_body
        key = json.dumps(body, sort_keys=True, ensure_ascii=False)
        origin = (
            f"the edge case {names[key]!r}"
            if key in names
            else f"a generated body (shrunk; {sent} bodies sent)"
        )
        what = f"HTTP {found.exchange.status}" if found.exchange.status else "no answer"
        ctx.fail(
            f"{origin} got {what}",
            expected="a 4xx with an error object (or a 2xx) for every body, within the timeout",
            received=f"{found.problem}; body: {json.dumps(body, ensure_ascii=False)[:600]}",
            exchange=found.exchange,
            hint="validate every field's type and range before using it; an unexpected value must be a 400, not "
            "a crash (run the curl below to reproduce)",
        )
    if shape_problems:
        problem, deviation, ex = shape_problems[0]
        ctx.exchanges.append(ex)
        deviations = {d for _, d, _ in shape_problems}
        ctx.fail(
            f"{len(shape_problems)} of {sent} generated bodies got a 4xx without an OpenAI error object",
            expected=ERROR_SHAPE,
            received=f"first: HTTP {ex.status}: {problem}",
            exchange=ex,
            deviation=deviation if len(deviations) == 1 else None,
            hint='answer every client error as {"error": {"message", "type", ...}}',
        )
    if sent == 0:
        raise CheckSkipped(
            f"FUZZ-NO-5XX: no request was sent within {time.monotonic() - started:.0f} s"
        )
