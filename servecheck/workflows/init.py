"""``servecheck init URL``: probe an endpoint and write a commented targets.yaml entry.

What it finds, and how (each line of the entry says where its value came from):

* the base URL: ``URL`` itself when ``URL/models`` lists models, else ``URL/v1``;
* whether a key is needed: ``GET /models`` without one answers 401/403; the entry then names an
  environment variable (``api_key: ${VAR}``), never the key;
* the engine: from the routes and fields only that engine has (``owned_by`` in ``/v1/models``,
  ``/props``, ``/v1/cluster/version``, ``/get_server_info``, ``/info``, ``/api/version``,
  ``x-litellm-*`` headers), else ``generic``;
* the served models and the context length (``max_model_len``, ``meta.n_ctx``, ``/props``);
* capabilities by trying them: one small request each (streaming, usage in the stream, JSON
  object and schema modes, tools, logprobs, n, legacy completions, /tokenize, /metrics). A
  capability is ``true`` when the server accepted the request and answered in the expected shape;
  whether the answers are right is what ``servecheck check`` is for;
* reasoning by asking a question that invites a thought (``reasoning_content`` or ``reasoning``
  in the answer; ``<think>`` in content is a reasoning model the server does not separate), then
  the same with the thinking-off switch (``thinking_off: false`` where it does not stop it);
* vision by showing the model a tiny generated PNG (:mod:`servecheck.client.images`): ``true``
  only when the answer proves the image was read, i.e. the same message with the image counts
  more ``usage.prompt_tokens`` than without it (by more than the few tokens a template adds for a
  part: the margin IMAGE-REJECTED-TEXT-ONLY allows); a refusal (4xx) or no growth is ``false``.

Every request is bounded (``timeout_s`` for the whole response) and there are at most about 19
of them. A chat completion that never completes (an endless stream, headers and then silence)
is not asked again in the same mode: the capabilities it would have decided are left out of the
entry (``unknown``, so the engine's defaults apply, never a ``false`` that would switch checks
off), and :attr:`EndpointFacts.problems` says so (the command warns; ``--strict`` exits 1).

:func:`append_entry` adds the entry to an existing targets file with a round-trip YAML editor
(ruamel.yaml: the user's comments, key order and indentation stay), checks the whole result
with the targets loader, and replaces the file atomically only when it loads.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.client.http import ClientSettings, Exchange, ServeClient
from servecheck.errors import SpecError, UsageError
from servecheck.redact import redact, register


@dataclass(slots=True)
class Finding:
    """One value of the entry and where it came from (the comment after it)."""

    value: Any
    why: str


@dataclass(slots=True)
class EndpointFacts:
    """What :func:`probe_endpoint` found."""

    url: str
    base_url: str
    auth_needed: bool
    auth_why: str
    engine: Finding
    models: Finding
    context_length: Finding
    metrics_url: Finding
    capabilities: dict[str, Finding] = field(default_factory=dict)
    reasoning: Finding = field(default_factory=lambda: Finding(None, "not tried"))
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the endpoint is not usable as it is


def _client(base_url: str, key: str | None, timeout_s: float) -> ServeClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return ServeClient(
        ClientSettings.for_url(base_url, headers, timeout_s=timeout_s, connect_timeout_s=timeout_s)
    )


def _root(base_url: str) -> str:
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def _models_of(ex: Exchange) -> list[dict[str, Any]] | None:
    data = ex.json() if ex.ok else None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)]


def _find_base(url: str, key: str | None, timeout_s: float) -> tuple[str, Exchange, str | None]:
    """The base URL whose ``/models`` lists models (with the key where one is needed), its
    listing, and why a key is needed (``None``: it is not)."""
    url = url.rstrip("/")
    candidates = [url] if url.endswith("/v1") else [url, url + "/v1"]
    last: Exchange | None = None
    refused: str | None = None
    for base in candidates:
        with _client(base, None, timeout_s) as client:
            ex = client.get("/models")
        if _models_of(ex) is not None:
            return base, ex, None
        if ex.status in (401, 403):
            why = f"GET {base}/models without a key: HTTP {ex.status}"
            if key:
                with _client(base, key, timeout_s) as client:
                    keyed = client.get("/models")
                if _models_of(keyed) is not None:
                    return base, keyed, why
                refused = f"{why}; with the key: {keyed.describe(120)}"
            else:
                refused = why
        last = ex
        if ex.error in ("connect", "timeout"):
            break  # nothing listens there: the other candidate is the same host
    if refused and not key:
        raise SpecError(
            "{refused}: export the key and pass {api_key_env} VAR", refused=redact(refused)
        )
    if refused:
        raise UsageError(f"{redact(url)}: the key was refused ({redact(refused)})")
    assert last is not None
    raise UsageError(f"{redact(url)}: no OpenAI-compatible /models there ({last.describe(200)})")


def _engine(client: ServeClient, base: str, entries: list[dict[str, Any]], ex: Exchange) -> Finding:
    owned = {str(e.get("owned_by")) for e in entries}
    by_owner = {"servecheck": "reference", "vllm": "vllm", "llamacpp": "llamacpp"}
    for owner, engine in by_owner.items():
        if owner in owned:
            return Finding(engine, f'/v1/models owned_by "{owner}"')
    if any(k.startswith("x-litellm") for k in ex.response_headers):
        return Finding("litellm", "x-litellm-* response headers")
    root = _root(base)
    routes = (
        ("/v1/cluster/version", "xinference"),
        ("/get_server_info", "sglang"),
        ("/props", "llamacpp"),
        ("/api/version", "ollama"),
        ("/info", "tgi"),
    )
    for path, engine in routes:
        probe = client.get(root + path, timeout_s=3)
        if probe.ok and isinstance(probe.json(), dict):
            return Finding(engine, f"{path} answers (only {engine} has it)")
    if "api.openai.com" in base:
        return Finding("openai", "the host is api.openai.com")
    return Finding("generic", "no engine-specific route or field answered")


def _context(client: ServeClient, base: str, entry: dict[str, Any] | None) -> Finding:
    from servecheck.checks.discovery import _context_from_model_entry

    if entry is not None:
        n, where = _context_from_model_entry(entry)
        if n is not None:
            return Finding(n, where)
    props = client.get(_root(base) + "/props", timeout_s=3)
    data = props.json() if props.ok else None
    if isinstance(data, dict):
        n_ctx = (data.get("default_generation_settings") or {}).get("n_ctx") or data.get("n_ctx")
        if isinstance(n_ctx, int):
            return Finding(n_ctx, "/props n_ctx")
    return Finding(None, "not advertised: set it if you know it (CTX-* checks need it)")


def _chat(model: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "Say OK."}],
        "max_tokens": 8,
        "temperature": 0,
    }
    body.update(extra)
    return body


def _message(ex: Exchange) -> dict[str, Any] | None:
    data = ex.json() if ex.ok else None
    choices = data.get("choices") if isinstance(data, dict) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _tried(ok: bool, what: str, ex: Exchange) -> Finding:
    """``ok`` as the finding; unknown (None) when no complete answer came in time: a timeout
    says nothing about the capability, and a false would switch its checks off."""
    if ex.error == "timeout":
        return Finding(None, f"tried {what}: no complete answer ({ex.describe(80)})")
    return Finding(ok, f"tried {what}: " + ("accepted" if ok else ex.describe(80)))


def _chunks(ex: Exchange) -> list[dict[str, Any]]:
    return ex.stream.chunks if ex.stream else []


def _tool_called(ex: Exchange) -> bool:
    return bool(((_message(ex) or {}).get("message") or {}).get("tool_calls"))


def _two_choices(ex: Exchange) -> bool:
    data = ex.json() if ex.ok else None
    return isinstance(data, dict) and len(data.get("choices") or []) == 2


_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
_TOOL = {
    "type": "function",
    "function": {"name": "ping", "description": "ping", "parameters": {"type": "object"}},
}
# (capability, what was tried, the body's extra fields, streamed, accepted(exchange))
_CHAT_PROBES: tuple[tuple[str, str, dict[str, Any], bool, Callable[[Exchange], bool]], ...] = (
    ("streaming", "a streamed chat completion", {}, True, lambda ex: ex.ok and bool(_chunks(ex))),
    (
        "usage_in_stream",
        "stream_options.include_usage",
        {"stream_options": {"include_usage": True}},
        True,
        lambda ex: ex.ok and any(isinstance(c.get("usage"), dict) for c in _chunks(ex)),
    ),
    (
        "json_object",
        "response_format json_object",
        {"response_format": {"type": "json_object"}},
        False,
        lambda ex: _message(ex) is not None,
    ),
    (
        "json_schema",
        "response_format json_schema",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "probe", "schema": _SCHEMA},
            }
        },
        False,
        lambda ex: _message(ex) is not None,
    ),
    # A forced call needs room: with 8 tokens vLLM's guided call was cut before it parsed, and
    # tools read false on a server that calls them (issue 42 item 7). "required" first, then a
    # named function, which engines that predate "required" force the same way.
    (
        "tools",
        "tools with tool_choice required",
        {"tools": [_TOOL], "tool_choice": "required", "max_tokens": 64},
        False,
        _tool_called,
    ),
    (
        "tools",
        "tools with tool_choice naming the function",
        {
            "tools": [_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "ping"}},
            "max_tokens": 64,
        },
        False,
        _tool_called,
    ),
    (
        "logprobs",
        "logprobs",
        {"logprobs": True, "top_logprobs": 1},
        False,
        lambda ex: bool((_message(ex) or {}).get("logprobs")),
    ),
    # Sampled, not greedy: vLLM refuses n > 1 at temperature 0, which said nothing about n.
    ("n", "n=2 at temperature 0.7", {"n": 2, "temperature": 0.7}, False, _two_choices),
)


@dataclass(slots=True)
class _Chat:
    """The chat completion probes' one way out. A probe that timed out (no complete response
    within ``timeout_s``: an endless stream, or headers and then silence) is not followed by
    another in the same mode: each would wait its whole timeout for the same end (issue 41).
    ``never``: streamed (True) / not streamed (False) -> what the timed-out probe got."""

    client: ServeClient
    timeout_s: float
    never: dict[bool, str] = field(default_factory=dict)

    def post(self, body: dict[str, Any], stream: bool = False) -> Exchange | None:
        """The exchange, or None when this mode never completes (this time or before)."""
        if stream in self.never:
            return None
        ex = self.client.post("/chat/completions", {**body, "stream": stream}, stream=stream)
        if ex.error == "timeout":
            self.never[stream] = ex.describe(80)
            return None
        return ex

    def unknown(self, stream: bool) -> Finding:
        mode = "streamed" if stream else "non-streamed"
        return Finding(None, f"{mode} chat completions never complete within {self.timeout_s:g} s")

    def problem(self) -> str | None:
        """The warning for the user: which chat completions never complete, and what came."""
        if not self.never:
            return None
        which = {
            (True,): "streamed chat completions never complete",
            (False,): "non-streamed chat completions never complete",
            (False, True): "chat completions never complete",
        }[tuple(sorted(self.never))]
        got = "; ".join(dict.fromkeys(self.never.values()))  # each answer once
        return (
            f"{which} within {self.timeout_s:g} s ({got}): the capabilities they decide are "
            "unknown; fix the server, or raise the probes' timeout if it is only slow"
        )


VISION_SIDE = 112  # 16 patches of 28x28: a read image adds tokens no template margin explains
VISION_TEXT = "Describe the image in a few words."


def _prompt_tokens(ex: Exchange) -> int | None:
    data = ex.json() if ex.ok else None
    usage = data.get("usage") if isinstance(data, dict) else None
    n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _vision(chat: _Chat, model: str) -> Finding:
    """Whether the model reads images: the same user message with and without one tiny PNG; it
    read the image when the image's prompt tokens exceed what a template adds for a part."""
    from servecheck.checks.surfaces.image import READ_MARGIN
    from servecheck.client.images import chat_message, make_image

    image = make_image(VISION_SIDE, VISION_SIDE, seed=41)
    tried = f"a {image.describe()} image_url part"
    plain = chat.post(_chat(model, messages=[chat_message(VISION_TEXT)]))
    shown = chat.post(_chat(model, messages=[chat_message(VISION_TEXT, image)]))
    if plain is None or shown is None:
        return chat.unknown(False)
    if not shown.ok:
        return Finding(False, f"tried {tried}: {shown.describe(80)}")
    without, with_image = _prompt_tokens(plain), _prompt_tokens(shown)
    if without is None or with_image is None:
        return Finding(
            None,
            f"tried {tried}: accepted, but no usage.prompt_tokens shows whether it was read "
            "(declare vision by hand if the model reads images)",
        )
    grew = with_image - without
    if grew > READ_MARGIN:
        return Finding(True, f"tried {tried}: it added {grew} prompt tokens (the model read it)")
    return Finding(
        False, f"tried {tried}: accepted, but it added {grew} prompt tokens (left out, not read)"
    )


def _capabilities(chat: _Chat, base: str, model: str) -> dict[str, Finding]:
    caps: dict[str, Finding] = {}
    for cap, what, extra, stream, accepted in _CHAT_PROBES:
        if caps.get(cap) is not None and caps[cap].value is True:
            continue  # a second way of asking, tried only when the first said no
        ex = chat.post(_chat(model, **extra), stream)
        caps[cap] = chat.unknown(stream) if ex is None else _tried(accepted(ex), what, ex)
    caps["vision"] = _vision(chat, model)
    client = chat.client
    ex = client.post("/completions", {"model": model, "prompt": "Say OK.", "max_tokens": 4})
    caps["completions"] = _tried(_message(ex) is not None, "/v1/completions", ex)
    ex = client.post(_root(base) + "/tokenize", {"model": model, "prompt": "hello"})
    caps["tokenize"] = _tried(ex.ok and isinstance(ex.json(), dict), "/tokenize", ex)
    return caps


REASONING_ASK = "What is 17 + 25? Think it through step by step, then answer."
REASONING_TOKENS = 96  # room for a reasoning model's opening thought before the cut
REASONING_FIELDS = ("reasoning_content", "reasoning")


def _reasoning_text(ex: Exchange | None) -> tuple[str | None, str]:
    """(the reasoning field that carries text, or None; the answer's content)."""
    message = ((_message(ex) or {}).get("message") or {}) if ex is not None else {}
    raw = message.get("content")
    content = raw if isinstance(raw, str) else ""
    for name in REASONING_FIELDS:
        text = message.get(name)
        if isinstance(text, str) and text.strip():
            return name, content
    return None, content


def _reasoning(chat: _Chat, model: str) -> Finding:
    """Whether the model reasons, where the reasoning arrives, and whether the thinking-off
    switch (``chat_template_kwargs.enable_thinking: false``) stops it: one question that invites
    a thought, then the same with the switch. A thought in ``content`` behind ``<think>`` is a
    reasoning model whose server separates nothing: declared, so the REASON checks say so."""
    from servecheck.config.model import DEFAULT_THINKING_OFF

    ask = [{"role": "user", "content": REASONING_ASK}]
    ex = chat.post(_chat(model, messages=ask, max_tokens=REASONING_TOKENS))
    if ex is None:
        return Finding(None, "chat completions never complete, so reasoning was not tried")
    if not ex.ok:
        return Finding(None, f"tried a {REASONING_TOKENS}-token question: {ex.describe(80)}")
    name, content = _reasoning_text(ex)
    if name is None:
        if "<think>" in content or "</think>" in content:
            return Finding(
                "auto",
                "the answer's content holds <think> markers and no reasoning field: a reasoning "
                "model the server does not separate (start it with a reasoning parser); the "
                "REASON checks will fail until it does",
            )
        return Finding(
            None, f"no reasoning field and no <think> in a {REASONING_TOKENS}-token answer"
        )
    off = chat.post(_chat(model, messages=ask, max_tokens=REASONING_TOKENS, **DEFAULT_THINKING_OFF))
    found = f"the answer carried `{name}`"
    if off is not None and off.ok and _reasoning_text(off)[0] is None:
        return Finding(
            {"field": name}, f"{found}; chat_template_kwargs.enable_thinking false stops it"
        )
    why = "refused" if off is not None and not off.ok else "did not stop it"
    return Finding(
        {"field": name, "thinking_off": False},
        f"{found}; chat_template_kwargs.enable_thinking false {why}, so the checks give the "
        "reasoning room instead",
    )


def _flow(value: Any) -> str:
    """A finding's value as one YAML flow line."""
    if isinstance(value, dict):
        inner = ", ".join(f"{k}: {_flow(v)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _metrics(client: ServeClient, base: str) -> Finding:
    url = _root(base) + "/metrics"
    ex = client.get(url, timeout_s=5)
    if ex.ok and ("# TYPE" in ex.text or "# HELP" in ex.text):
        return Finding(url, "answers with Prometheus text")
    return Finding(None, f"{url}: {ex.describe(60)}")


def probe_endpoint(url: str, api_key: str | None = None, timeout_s: float = 20.0) -> EndpointFacts:
    """Probe ``url`` (with ``api_key`` when given); raises :class:`UsageError` when nothing
    OpenAI-compatible answers there."""
    if api_key:
        register(api_key)
    base, listing, auth_why = _find_base(url, api_key, timeout_s)
    auth_needed = auth_why is not None
    notes: list[str] = []
    entries = _models_of(listing) or []
    ids = [str(e["id"]) for e in entries]
    with _client(base, api_key if auth_needed else None, timeout_s) as client:
        engine = _engine(client, base, entries, listing)
        context = _context(client, base, entries[0] if entries else None)
        metrics = _metrics(client, base)
        caps: dict[str, Finding] = {}
        chat = _Chat(client, timeout_s)
        reasoning = Finding(None, "no model listed")
        if ids:
            caps = _capabilities(chat, base, ids[0])
            reasoning = _reasoning(chat, ids[0])
        else:
            notes.append("no model listed: capabilities were not tried; name models by hand")
    problem = chat.problem()
    caps["metrics"] = Finding(metrics.value is not None, f"GET /metrics: {metrics.why}")
    models = Finding(
        ids[:1], f"served: {', '.join(ids) or 'none'} (/v1/models); the first is checked"
    )
    return EndpointFacts(
        url,
        base,
        auth_needed,
        auth_why or f"GET {base}/models answered without a key",
        engine,
        models,
        context,
        metrics,
        caps,
        reasoning,
        notes,
        [problem] if problem else [],
    )


def render_entry(facts: EndpointFacts, name: str, key_env: str | None) -> str:
    """The commented YAML entry (a list item for ``targets:``). No secret is written: the key
    is named as ``${VAR}``."""

    def line(indent: str, key: str, value: str, why: str) -> str:
        return f"{indent}{key}: {value}  # {redact(why)}"

    out = [
        f"  # `servecheck init {redact(facts.url)}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"  - name: {name}",
        f"    base_url: {redact(facts.base_url)}",
        line("    ", "engine", str(facts.engine.value), facts.engine.why),
    ]
    if facts.auth_needed:
        out.append(line("    ", "api_key", "${" + str(key_env) + "}", facts.auth_why))
    else:
        out.append(f"    # no api_key: {facts.auth_why}")
    models = facts.models.value
    out.append(line("    ", "models", "[" + ", ".join(models) + "]", facts.models.why))
    if facts.context_length.value is not None:
        out.append(
            line(
                "    ", "context_length", str(facts.context_length.value), facts.context_length.why
            )
        )
    else:
        out.append(f"    # context_length: unknown ({facts.context_length.why})")
    if facts.metrics_url.value:
        out.append(line("    ", "metrics_url", str(facts.metrics_url.value), facts.metrics_url.why))
    if any(found.value is not None for found in facts.capabilities.values()):
        out.append("    capabilities:")
    for cap, found in facts.capabilities.items():
        if found.value is None:  # unknown: left to the engine's default, never a false "no"
            out.append(f"      # {cap}: unknown ({redact(found.why)})")
        else:
            out.append(line("      ", cap, "true" if found.value else "false", found.why))
    if facts.reasoning.value is None:
        out.append(f"    # reasoning: none found ({redact(facts.reasoning.why)})")
    else:
        out.append(line("    ", "reasoning", _flow(facts.reasoning.value), facts.reasoning.why))
    out += [f"    # note: {redact(n)}" for n in facts.notes]
    out += [f"    # warning: {redact(p)}" for p in facts.problems]
    return "\n".join(out) + "\n"


def _yaml() -> Any:
    from ruamel.yaml import YAML

    rt = YAML(typ="rt")
    rt.preserve_quotes = True
    rt.width = 4096  # never fold a long comment or URL onto a second line
    return rt


def _shifted(entry: str, offset: int) -> str:
    """``entry`` (written with its dash at column 2) moved to the file's dash column."""
    if offset >= 2:
        return "".join(" " * (offset - 2) + ln for ln in entry.splitlines(keepends=True))
    cut = 2 - offset
    return "".join(ln[cut:] if ln[:cut].isspace() else ln for ln in entry.splitlines(True))


def _tail_slot(node: Any) -> tuple[Any, Any, int] | None:
    """Where ruamel keeps the comment after ``node``'s last scalar: (container, key, slot)."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    while True:
        if isinstance(node, CommentedMap) and node:
            key, slot = list(node)[-1], 2
        elif isinstance(node, CommentedSeq) and node:
            key, slot = len(node) - 1, 0
        else:
            return None
        child = node[key]
        if isinstance(child, CommentedMap | CommentedSeq) and child:
            node = child
            continue
        return node, key, slot


def _move_trailing_comments(old: Any, new: Any) -> None:
    """Comment lines after the old last target (those before the next top-level key, which
    ruamel keeps with that target's last value) move below the new last target, so they still
    sit where the user put them: just before the key that follows ``targets:``."""
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    src, dst = _tail_slot(old), _tail_slot(new)
    if src is None or dst is None:
        return
    holder, key, slot = src
    tokens = holder.ca.items.get(key)
    token = tokens[slot] if tokens and len(tokens) > slot else None
    if token is None or "\n" not in token.value:
        return
    cut = token.value.index("\n") + 1
    rest = token.value[cut:]
    if not rest.strip():
        return
    token.value = token.value[:cut]
    holder, key, slot = dst
    tokens = holder.ca.items.setdefault(key, [None, None, None, None])
    if tokens[slot] is None:
        tokens[slot] = CommentToken("\n" + rest, CommentMark(0), None)
    else:
        tokens[slot].value = tokens[slot].value.rstrip("\n") + "\n" + rest


def _merged_text(text: str, entry: str, name: str, where: Path) -> str:
    """``text`` (a targets file) with ``entry`` added at the end of its ``targets:`` list."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.util import load_yaml_guess_indent

    try:
        _, seq_indent, offset = load_yaml_guess_indent(text) if text.strip() else (None, 4, 2)
        rt = _yaml()
        doc = rt.load(text) if text.strip() else CommentedMap()
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark else str(where)
        raise UsageError(
            f"{at}: invalid YAML ({getattr(exc, 'problem', exc)}); not changed"
        ) from None
    offset = offset or 0
    seq_indent = seq_indent or offset + 2
    rt.indent(mapping=max(seq_indent - offset, 2), sequence=seq_indent, offset=offset)
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise UsageError(f"{where}: not a mapping with a 'targets' list; not changed")
    targets = doc.get("targets")
    if targets is None:
        targets = doc["targets"] = CommentedSeq()
    if not isinstance(targets, CommentedSeq):
        raise UsageError(f"{where}: 'targets' is not a list; not changed")
    names = [t.get("name") for t in targets if isinstance(t, Mapping)]
    if name in names:
        raise SpecError(
            "{where}: a target named {taken!r} exists; pass {name}", where=where, taken=name
        )
    head, _, body = _shifted(entry, offset).partition("\n")
    parsed = rt.load("targets:\n" + body)
    if targets:
        _move_trailing_comments(targets[-1], parsed["targets"][0])
    targets.append(parsed["targets"][0])
    targets.yaml_set_comment_before_after_key(
        len(targets) - 1, before=head.strip().removeprefix("# "), indent=offset
    )
    out = io.StringIO()
    rt.dump(doc, out)
    return out.getvalue()


def append_entry(
    path: str | os.PathLike[str], entry: str, name: str, env: Mapping[str, str] | None = None
) -> None:
    """Add ``entry`` (from :func:`render_entry`) to the targets file ``path`` (created when
    missing). The whole result must load with :func:`servecheck.config.load_targets` (``env``:
    the variables its ``${VAR}`` name, ``os.environ`` by default) and hold ``name``; otherwise
    nothing is written and :class:`UsageError` says why in one line. The file is replaced by a
    rename, so a reader never sees half of it."""
    from servecheck.config import ConfigError, load_targets

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8") if file.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{file}: cannot read it ({exc}); not changed") from None
    merged = _merged_text(text, entry, name, file)
    fd, tmp = tempfile.mkstemp(prefix=f".{file.name}.", suffix=".tmp", dir=file.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(merged)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            loaded = load_targets(tmp, env=os.environ if env is None else env)
        except ConfigError as exc:
            first = exc.problems[0].replace(tmp, str(file))
            more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
            raise UsageError(
                f"{file}: not changed: the result would not load: {first}{more}"
            ) from None
        if name not in loaded.targets:
            why = "; ".join(loaded.broken.get(name, ["it is missing"])).replace(tmp, str(file))
            raise UsageError(f"{file}: not changed: the new target {name!r} would not load: {why}")
        if file.exists():
            os.chmod(tmp, file.stat().st_mode & 0o7777)
        else:  # mkstemp's 0600, widened as a plain open() would create it
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, file)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


__all__ = ["EndpointFacts", "Finding", "append_entry", "probe_endpoint", "render_entry"]
