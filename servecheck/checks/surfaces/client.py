"""CLIENT-*: the official ``openai`` Python SDK, end to end, as users' code calls it.

servecheck's own client reads raw bytes on purpose; these checks use the SDK's own HTTP stack,
SSE decoder and typed models, so that defects only a real client notices (a stale
``Content-Encoding``, events the SDK cannot decode, chunks its types cannot carry) show up. A
failure names the SDK exception and, when useful, carries a raw reproduction of the same request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

from servecheck.checks.context import CheckContext, CheckFailed
from servecheck.checks.registry import check
from servecheck.checks.surfaces.chat import FINISH_REASONS
from servecheck.client.http import Exchange
from servecheck.redact import redact

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI

PROMPT = "Say hello."
PARSE_PROMPT = "Give the name and population of a city as JSON."
_NO_KEY = "servecheck-no-key"  # the SDK insists on a key; servers without auth ignore it


def _sdk_options(ctx: CheckContext) -> dict[str, Any]:
    target = ctx.target
    auth = target.auth_headers()
    key = _NO_KEY
    headers = dict(target.headers)
    for name, value in auth.items():
        if name.lower() == "authorization":
            key = value[7:] if value.lower().startswith("bearer ") else value
        else:
            headers[name] = value  # x-api-key / api-key: sent as the target declares
            key = value
    return {
        "base_url": target.base_url,
        "api_key": key,
        "max_retries": 0,
        "timeout": target.timeout_s,
        "default_headers": headers or None,
    }


def _sdk_httpx(client_class: type) -> ModuleType:
    """The httpx module the SDK's client class is built on (``httpx``, or the ``httpx2`` fork)."""
    base = next(c for c in client_class.__mro__ if c.__name__ in ("Client", "AsyncClient"))
    return importlib.import_module(base.__module__.split(".")[0])


def sdk_client(ctx: CheckContext) -> OpenAI:
    """An ``openai.OpenAI`` for the target: its base_url and key, no retries, the target's timeout
    for every read and for each whole response (the SDK's own timeout is per read only, so an
    endless stream or a giant line would hang the check), and servecheck's size bound."""
    import openai

    options = _sdk_options(ctx)
    options["http_client"] = sdk_http_client(ctx)
    return openai.OpenAI(**options)


def sdk_http_client(ctx: CheckContext) -> Any:
    """The openai SDK's httpx client over servecheck's bounded transport (a whole-response
    deadline of the target's timeout, the size bound, the shared stall verdict): for any client
    built on the SDK (the SDK itself, LangChain's ChatOpenAI)."""
    import openai

    from servecheck.client.bounded import bounded_transport

    transport = bounded_transport(
        _sdk_httpx(openai.DefaultHttpxClient),
        ctx.target.timeout_s,
        verify=ctx.target.verify_tls,
        guard=ctx.client.settings.stall_guard,
    )
    return openai.DefaultHttpxClient(transport=transport)


def async_sdk_client(ctx: CheckContext) -> AsyncOpenAI:
    """The asynchronous twin of :func:`sdk_client`, with the same bounds."""
    import openai

    from servecheck.client.bounded import async_bounded_transport

    options = _sdk_options(ctx)
    transport = async_bounded_transport(
        _sdk_httpx(openai.DefaultAsyncHttpxClient),
        ctx.target.timeout_s,
        verify=ctx.target.verify_tls,
        guard=ctx.client.settings.stall_guard,
    )
    options["http_client"] = openai.DefaultAsyncHttpxClient(transport=transport)
    return openai.AsyncOpenAI(**options)


def describe_exception(exc: BaseException) -> str:
    """``Class: message`` for an SDK exception and its cause chain, key masked."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 4:
        status = getattr(seen, "status_code", None)
        parts.append(
            f"{type(seen).__module__.split('.')[0]}.{type(seen).__name__}"
            f"{f' (HTTP {status})' if status else ''}: {str(seen)[:400] or '(no message)'}"
        )
        seen = seen.__cause__ or seen.__context__
    return redact(" <- caused by ".join(parts))


def _hint_for(exc: BaseException) -> str:
    import openai

    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 6:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    names = " ".join(type(e).__name__ for e in chain)
    text = " ".join(str(e) for e in chain).lower()
    if "JSONDecodeError" in names:
        return "the SDK json-decodes every data: event and JSON body; each must be a JSON object (or data: [DONE])"
    if "LengthFinishReasonError" in names:
        return "the structured output hit max_tokens before the JSON was complete; the engine must keep it short or stop it"
    if "ValidationError" in names:
        return (
            "message.content is not bare JSON valid for the schema (a markdown fence, prose or a schema the engine "
            "ignored); the engine must constrain the output to response_format.json_schema"
        )
    if "DecodingError" in names or "decompress" in text or "incorrect header check" in text:
        return (
            "the response's Content-Encoding does not match its body: a proxy that decompresses upstream answers must "
            "drop the Content-Encoding header (or re-compress)"
        )
    if isinstance(exc, openai.APITimeoutError) or "servecheck's bound" in text:
        return "the server did not finish the response within the target's timeout_s"
    if "servecheck's size bound" in text:
        return "the response passed servecheck's size bound (an endless body or one giant SSE line)"
    if isinstance(exc, openai.APIConnectionError):
        return "the SDK's HTTP client could not complete the exchange (connection, TLS, encoding or framing)"
    if isinstance(exc, openai.APIStatusError):
        return "the server refused a request the SDK considers valid; see the error body"
    return "the SDK cannot consume this answer; compare the raw reproduction with the OpenAI API reference"


def _run_async(coro: Any) -> Any:
    """``asyncio.run``, also when the caller already runs an event loop (then on a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _raw(ctx: CheckContext, body: dict[str, Any]) -> Exchange:
    """The same request through servecheck's raw client, for the curl line and the raw answer."""
    return ctx.post("/chat/completions", body, stream=bool(body.get("stream")))


def _sdk_failed(ctx: CheckContext, call: str, exc: BaseException, body: dict[str, Any]) -> NoReturn:
    raw = _raw(ctx, body)
    ctx.fail(
        f"the openai SDK failed on {call}: {type(exc).__name__}",
        expected=f"{call} returns a result",
        received=f"{describe_exception(exc)}; raw answer: {raw.describe(300)}",
        exchange=raw,
        hint=_hint_for(exc),
    )


def _check_completion(ctx: CheckContext, result: Any, call: str, body: dict[str, Any]) -> str:
    """The text of an SDK ChatCompletion, or a failure saying why the object is unusable."""
    from openai.types.chat import ChatCompletion

    if not isinstance(result, ChatCompletion):
        raw = _raw(ctx, body)
        ctx.fail(
            f"{call} returned {type(result).__name__}, not a ChatCompletion",
            expected="a ChatCompletion object",
            received=f"{type(result).__name__}: {redact(str(result))[:300]}",
            exchange=raw,
            hint="the SDK returns the raw text when the body is not JSON: check the Content-Type and the body",
        )
    choices = result.choices
    ok = (
        isinstance(choices, list)
        and len(choices) > 0
        and getattr(choices[0], "message", None) is not None
    )
    content = getattr(choices[0].message, "content", None) if ok else None
    finish = getattr(choices[0], "finish_reason", None) if ok else None
    if not (ok and isinstance(content, str) and finish in FINISH_REASONS):
        raw = _raw(ctx, body)
        ctx.fail(
            f"{call} returned a ChatCompletion users' code cannot read",
            expected="choices[0].message.content as a string and choices[0].finish_reason from the OpenAI set",
            received=redact(f"choices={str(choices)[:300]}"),
            exchange=raw,
        )
    return str(content)


@check(
    "CLIENT-SDK-SYNC",
    "openai.OpenAI chat.completions.create works",
    "the official openai SDK (OpenAI(base_url, api_key, max_retries=0)) gets a ChatCompletion whose "
    "choices[0].message.content is a string and finish_reason is an OpenAI value",
)
def client_sdk_sync(ctx: CheckContext) -> None:
    body = ctx.chat_body(PROMPT, max_tokens=16, temperature=0)
    with sdk_client(ctx) as client:
        try:
            result = client.chat.completions.create(
                model=ctx.model, messages=body["messages"], max_tokens=16, temperature=0
            )
        except Exception as exc:  # noqa: BLE001 - every SDK failure is the finding
            _sdk_failed(ctx, "chat.completions.create", exc, body)
        _check_completion(ctx, result, "chat.completions.create", body)


@check(
    "CLIENT-SDK-ASYNC",
    "openai.AsyncOpenAI works, also with two requests at once",
    "two concurrent AsyncOpenAI chat.completions.create calls both return a readable ChatCompletion",
)
def client_sdk_async(ctx: CheckContext) -> None:
    body = ctx.chat_body(PROMPT, max_tokens=16, temperature=0)

    async def main() -> list[Any]:
        client = async_sdk_client(ctx)
        try:
            calls = [
                client.chat.completions.create(
                    model=ctx.model, messages=body["messages"], max_tokens=16, temperature=0
                )
                for _ in range(2)
            ]
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await client.close()

    for result in _run_async(main()):
        if isinstance(result, BaseException):
            _sdk_failed(ctx, "AsyncOpenAI chat.completions.create", result, body)
        _check_completion(ctx, result, "AsyncOpenAI chat.completions.create", body)


@check(
    "CLIENT-SDK-STREAM",
    "the SDK's stream=True iteration works",
    "iterating chat.completions.create(stream=True) raises nothing, every chunk has a choices list whose items carry a "
    "delta object, the pieces reassemble the same text servecheck's raw parser reads from the same temperature-0 "
    "request, and the last choice-bearing chunk has a finish_reason",
)
def client_sdk_stream(ctx: CheckContext) -> None:
    body = ctx.chat_body(PROMPT, stream=True, max_tokens=16, temperature=0)
    pieces: list[str] = []
    finishes: list[Any] = []
    with sdk_client(ctx) as client:
        try:
            stream = client.chat.completions.create(
                model=ctx.model,
                messages=body["messages"],
                max_tokens=16,
                temperature=0,
                stream=True,
            )
            for k, chunk in enumerate(stream):
                choices = chunk.choices
                if not isinstance(choices, list):
                    raw = _raw(ctx, body)
                    ctx.fail(
                        "the SDK yielded a chunk whose choices is not a list",
                        expected="chunk.choices: list",
                        received=redact(f"chunk {k}: choices={str(choices)[:200]}"),
                        exchange=raw,
                        hint="users' code `chunk.choices[0]` breaks; choices must be a JSON array",
                    )
                for choice in choices:
                    delta = getattr(choice, "delta", None)
                    if delta is None:
                        raw = _raw(ctx, body)
                        ctx.fail(
                            "the SDK yielded a chunk whose choice has no delta object",
                            expected="every streamed choice carries a delta object ({} when empty)",
                            received=redact(f"chunk {k}: {str(choice)[:300]}"),
                            exchange=raw,
                            hint="users' code `chunk.choices[0].delta.content` raises AttributeError on this chunk",
                        )
                    if getattr(delta, "content", None):
                        pieces.append(delta.content)
                    finishes.append(getattr(choice, "finish_reason", None))
        except CheckFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - every SDK failure is the finding
            _sdk_failed(ctx, "chat.completions.create(stream=True) iteration", exc, body)
    text = "".join(pieces)
    raw = ctx.stream_chat(PROMPT, usage=False, max_tokens=16, temperature=0)
    raw_text = raw.stream.text(0) if raw.stream is not None else ""
    ctx.expect(
        bool(finishes) and finishes[-1] in FINISH_REASONS,
        "the SDK stream's last choice has no finish_reason",
        expected=f"finish_reason from {sorted(FINISH_REASONS)} on the last choice-bearing chunk",
        received=f"finish_reasons seen: {finishes[-5:]!r}",
        exchange=raw,
    )
    ctx.expect(
        text == raw_text,
        "the SDK reassembles a different text than the raw stream carries",
        expected=f"{raw_text!r} (raw SSE parse of the same temperature-0 request)",
        received=f"{text!r} (SDK)",
        exchange=raw,
        hint="if STREAM-EQUALS-NONSTREAM fails too, temperature 0 is not deterministic; otherwise the SDK decodes these "
        "events differently (multi-line data:, event: fields, encoding)",
    )


@check(
    "CLIENT-SDK-PARSE",
    "structured outputs through the SDK's parse() work",
    "chat.completions.parse with a small pydantic model (name: str <= 20 chars, population: int) as response_format "
    "returns message.parsed as that model, without refusal, LengthFinishReasonError or validation error",
    requires=("json_schema",),
)
def client_sdk_parse(ctx: CheckContext) -> None:
    from pydantic import BaseModel, Field

    class City(BaseModel):
        name: str = Field(max_length=20)
        population: int = Field(ge=0, le=100_000_000)

    messages: list[Any] = [{"role": "user", "content": PARSE_PROMPT}]
    with sdk_client(ctx) as client:
        completions = client.chat.completions
        parse = getattr(completions, "parse", None) or client.beta.chat.completions.parse
        try:
            result = parse(
                model=ctx.model,
                messages=messages,
                response_format=City,
                max_tokens=128,
                temperature=0,
            )
        except Exception as exc:  # noqa: BLE001 - every SDK failure is the finding
            import openai.lib._pydantic as sdk_pydantic

            schema = sdk_pydantic.to_strict_json_schema(City)
            body = ctx.chat_body(
                messages,
                max_tokens=128,
                temperature=0,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "City", "schema": schema, "strict": True},
                },
            )
            _sdk_failed(ctx, "chat.completions.parse(response_format=City)", exc, body)
    message = result.choices[0].message if result.choices else None
    parsed = getattr(message, "parsed", None)
    ctx.expect(
        isinstance(parsed, City),
        "parse() returned no parsed object",
        expected="choices[0].message.parsed is a City",
        received=redact(f"message={str(message)[:300]}"),
        hint="the answer was refused or empty; the engine must constrain output to the json_schema",
    )


def _anthropic_options(ctx: CheckContext) -> dict[str, Any]:
    """The anthropic SDK's options for the target: its root (the SDK adds ``/v1/messages``), the
    key the way the target sends it (Bearer as ``auth_token``, else ``api_key``: x-api-key), no
    retries, the target's timeout."""
    target = ctx.target
    root = target.base_url.removesuffix("/v1")
    options: dict[str, Any] = {
        "base_url": root,
        "max_retries": 0,
        "timeout": target.timeout_s,
        "api_key": None,
        "auth_token": None,
    }
    headers = dict(target.headers)
    for name, value in target.auth_headers().items():
        if name.lower() == "authorization":
            options["auth_token"] = value[7:] if value.lower().startswith("bearer ") else value
        elif name.lower() == "x-api-key":
            options["api_key"] = value
        else:
            headers[name] = value
    if options["api_key"] is None and options["auth_token"] is None:
        options["api_key"] = _NO_KEY
    options["default_headers"] = headers or None
    return options


def anthropic_client(ctx: CheckContext) -> Any:
    """An ``anthropic.Anthropic`` for the target, bounded like :func:`sdk_client` (the SDK's own
    timeout is per read; an endless stream would hang the check)."""
    import anthropic

    from servecheck.client.bounded import bounded_transport

    transport = bounded_transport(
        _sdk_httpx(anthropic.DefaultHttpxClient),
        ctx.target.timeout_s,
        verify=ctx.target.verify_tls,
        guard=ctx.client.settings.stall_guard,
    )
    options = _anthropic_options(ctx)
    options["http_client"] = anthropic.DefaultHttpxClient(transport=transport)
    return anthropic.Anthropic(**options)


ANTHROPIC_STOP_REASONS = ("end_turn", "max_tokens", "stop_sequence", "tool_use")


def _anthropic_failed(ctx: CheckContext, call: str, exc: BaseException) -> NoReturn:
    from servecheck.checks.surfaces.messages import request_body, send

    raw = send(
        ctx,
        request_body(ctx, PROMPT, max_tokens=16, stream="stream" in call),
        stream="stream" in call,
    )
    ctx.fail(
        f"the anthropic SDK failed on {call}: {type(exc).__name__}",
        expected=f"{call} returns a Message",
        received=f"{describe_exception(exc)}; raw answer: {raw.describe(300)}",
        exchange=raw,
        hint="the SDK decodes named SSE events (event: message_start ...) and Anthropic's error "
        "object; compare the raw reproduction with the Messages API reference",
    )


def _message_text(message: Any) -> str:
    return "".join(
        str(getattr(b, "text", "")) for b in message.content if getattr(b, "type", "") == "text"
    )


@check(
    "CLIENT-ANTHROPIC",
    "the official anthropic SDK works end to end on /v1/messages",
    "anthropic.Anthropic(base_url, key, max_retries=0): messages.create returns a Message with a "
    "text block and a stop_reason from the API's set, and messages.stream on the same "
    "temperature-0 request yields a final message with the same text and stop_reason",
    requires=("messages", "route-accepts:/messages"),
)
def client_anthropic(ctx: CheckContext) -> None:
    params: dict[str, Any] = {
        "model": ctx.model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": PROMPT}],
        "extra_body": {"temperature": 0},  # the SDK's create() has no temperature argument
    }
    with anthropic_client(ctx) as client:
        try:
            message = client.messages.create(**params)
        except Exception as exc:  # noqa: BLE001 - every SDK failure is the finding
            _anthropic_failed(ctx, "messages.create", exc)
        try:
            with client.messages.stream(**params) as events:
                final = events.get_final_message()
        except Exception as exc:  # noqa: BLE001
            _anthropic_failed(ctx, "messages.stream", exc)
    text = _message_text(message)
    ctx.expect(
        bool(text) and message.stop_reason in ANTHROPIC_STOP_REASONS,
        "messages.create returned a Message users' code cannot read",
        expected="a text block and stop_reason end_turn / max_tokens / stop_sequence / tool_use",
        received=redact(
            f"content={str(message.content)[:300]}, stop_reason={message.stop_reason!r}"
        ),
    )
    streamed = _message_text(final)
    ctx.expect(
        streamed == text and final.stop_reason == message.stop_reason,
        "messages.stream builds a different message than messages.create",
        expected=f"text {text!r}, stop_reason {message.stop_reason!r} (messages.create, temperature 0)",
        received=redact(f"text {streamed!r}, stop_reason {final.stop_reason!r} (messages.stream)"),
        hint="if MESSAGES-STREAM-ORDER fails too, the events lack their event: names or come out "
        "of order; the SDK's MessageStream only reads named events",
    )
