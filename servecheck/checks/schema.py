"""The strict schema profile: every success body and stream chunk a check received, validated
against the SDKs' own generated types.

The openai package generates its pydantic models from OpenAI's published spec, so they are the
spec in executable form. Each route a check calls maps to the type of its answer (and of its
stream chunks); :class:`SchemaFindings` validates with pydantic in strict mode:

* a required field must be present;
* an enum value (``finish_reason``, ``object``, ``role``, an event ``type``) must be one the type
  allows;
* a JSON type must be exact: no number sent as a string, no float for an integer, no string for
  a boolean;
* unknown fields are allowed (the SDK's models use ``extra="allow"``): engines add their own.

A violation is a :class:`Finding`. The runner (``checks/runner.py``) turns a check that passes but
has findings into NON-STRICT, or a failure in strict mode (the commands' strict option, the
plugin's ``--sc-strict``, a target's ``strict: true``). Error answers (non-2xx) are not
validated against success types.

The types are named as ``"module:Name"`` and imported on first use: the openai package's for the
OpenAI routes, the anthropic package's for ``/v1/messages`` (a route whose package is not
installed is simply not validated).
"""

from __future__ import annotations

import functools
import importlib
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from servecheck.redact import redact

if TYPE_CHECKING:
    from servecheck.client.http import Exchange

# Findings kept per check: the first distinct (route, path, rule) ones; more are only counted.
MAX_FINDINGS = 5
VALUE_LIMIT = 60  # characters of a received value shown in a finding
ALLOWED_LIMIT = 160  # characters of an enum's allowed values shown (event types run long)


@dataclass(frozen=True, slots=True)
class Exemption:
    """Where an SDK type is narrower than the API it types: an error at ``path`` (``*``: any
    list index) is accepted when the received value has the JSON type ``value`` (``"null"``,
    ``"string"``) and, if set, only in stream chunks (``chunk``) or when the request carried
    ``request`` (key, value). ``why`` says what the API does there."""

    path: str
    value: str
    why: str
    chunk: bool = False
    request: tuple[str, Any] | None = None

    def covers(self, error: dict[str, Any], request: Any, chunk: bool) -> bool:
        if error["type"] == "missing" or (self.chunk and not chunk):
            return False
        if self.request is not None:
            key, want = self.request
            if not isinstance(request, dict) or request.get(key) != want:
                return False
        return _json_type(error.get("input")) == self.value and _pattern_matches(
            self.path, tuple(error["loc"])
        )


@dataclass(frozen=True, slots=True)
class Shape:
    """The SDK types a route's success answers must validate as: ``body`` the non-streamed
    answer, ``chunk`` each ``data:`` chunk of a streamed one (None: the route does not stream),
    ``exempt`` the places where the API legally sends what the type does not allow."""

    body: str | None
    chunk: str | None = None
    exempt: tuple[Exemption, ...] = ()


def _model_list() -> Any:
    """``GET /v1/models``: the SDK pages it (``SyncPage[Model]``) and has no model for the
    envelope, so one is built here from the spec's ListModelsResponse: object "list", data."""
    from typing import Literal

    import pydantic
    from openai.types import Model

    class ModelList(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        object: Literal["list"]
        data: list[Model]

    return ModelList


# (method, route relative to the target's base_url) -> the types its answers must validate as.
# A route segment ``{id}`` matches any one segment.
ROUTES: dict[tuple[str, str], Shape] = {
    ("POST", "/chat/completions"): Shape(
        "openai.types.chat:ChatCompletion", "openai.types.chat:ChatCompletionChunk"
    ),
    ("POST", "/completions"): Shape(
        "openai.types:Completion",
        "openai.types:Completion",
        exempt=(
            Exemption(
                "choices.*.finish_reason",
                "null",
                "the SDK types the legacy stream's chunks with the non-streamed Completion, whose "
                "finish_reason is required; the API sends null in every chunk before the last",
                chunk=True,
            ),
            *(
                Exemption(
                    f"choices.*.logprobs.{field}.0",
                    "null",
                    "with echo the first prompt token has no logprob (nothing comes before it): "
                    "the API sends null there, where the SDK's list holds numbers and objects",
                    request=("echo", True),
                )
                for field in ("token_logprobs", "top_logprobs")
            ),
        ),
    ),
    ("POST", "/embeddings"): Shape(
        "openai.types:CreateEmbeddingResponse",
        exempt=(
            Exemption(
                "data.*.embedding",
                "string",
                "with encoding_format base64 the API sends each embedding as a base64 string; "
                "the SDK's type is the list of floats it decodes that string into",
                request=("encoding_format", "base64"),
            ),
        ),
    ),
    ("POST", "/responses"): Shape(
        "openai.types.responses:Response", "openai.types.responses:ResponseStreamEvent"
    ),
    ("GET", "/responses/{id}"): Shape("openai.types.responses:Response"),
    ("GET", "/models"): Shape("ModelList"),
    ("GET", "/models/{id}"): Shape("openai.types:Model"),
    # The Anthropic Messages API, typed by the anthropic SDK (a dependency since MESSAGES-*).
    ("POST", "/messages"): Shape("anthropic.types:Message", "MessagesStreamEvent"),
    ("POST", "/messages/count_tokens"): Shape("anthropic.types:MessageTokensCount"),
}


def route_of(url: str, base_url: str) -> str | None:
    """The route of ``url`` relative to ``base_url`` (``/chat/completions``), or None when the
    URL is elsewhere (``/tokenize`` on the server root, another host)."""
    url = url.split("?", 1)[0].split("#", 1)[0]
    base = base_url.rstrip("/")
    if not url.startswith(base + "/"):
        return None
    return url[len(base) :].rstrip("/") or None


def shape_for(method: str, route: str) -> Shape | None:
    """The :class:`Shape` of ``method route``, matching ``{id}`` segments."""
    exact = ROUTES.get((method, route))
    if exact is not None:
        return exact
    parts = route.strip("/").split("/")
    for (m, pattern), shape in ROUTES.items():
        want = pattern.strip("/").split("/")
        if (
            m == method
            and len(want) == len(parts)
            and all(w == p or (w == "{id}" and p) for w, p in zip(want, parts, strict=True))
        ):
            return shape
    return None


def _messages_stream_event() -> Any:
    """A ``/v1/messages`` stream event: the SDK's ``RawMessageStreamEvent`` union, or the
    ``ping`` event the API sends between them (the SDK's decoder skips it, so it has no type)."""
    from typing import Annotated, Literal

    import pydantic
    from anthropic.types import RawMessageStreamEvent

    class PingEvent(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")
        type: Literal["ping"]

    members = (*typing.get_args(typing.get_args(RawMessageStreamEvent)[0]), PingEvent)
    return Annotated[typing.Union[members], pydantic.Field(discriminator="type")]  # noqa: UP007


# Types the SDK does not define, built here on first use (a spec without "module:"), and what
# each is, for docs/checks.md.
BUILT: dict[str, Callable[[], Any]] = {
    "ModelList": _model_list,
    "MessagesStreamEvent": _messages_stream_event,
}
BUILT_NOTES = {
    "ModelList": 'object "list" and data of `openai.types:Model` (the SDK pages the list and '
    "has no type for it)",
    "MessagesStreamEvent": "`anthropic.types:RawMessageStreamEvent` or a `ping` event (the API "
    "sends pings; the SDK's decoder skips them and has no type for them)",
}


@functools.cache
def adapter(spec: str) -> Any:
    """A cached pydantic ``TypeAdapter`` for ``"module:Name"`` (or a name in :data:`BUILT`),
    or None when its package is not installed."""
    import pydantic

    if ":" not in spec:
        return pydantic.TypeAdapter(BUILT[spec]())
    module, _, name = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError:
        return None
    return pydantic.TypeAdapter(obj)


@dataclass(frozen=True, slots=True)
class Finding:
    """One field of one answer that breaks its SDK type."""

    route: str
    where: str  # "body", or "chunk 3" of a stream
    path: str  # choices[0].finish_reason
    rule: str  # required | enum | type | other pydantic error types
    value: str  # the received value, redacted and snipped ("" when missing)
    message: str  # pydantic's sentence: Input should be 'stop', 'length' ...
    sdk_type: str
    json_type: str = ""  # of the received value, with its article: "a string", "null"

    def describe(self) -> str:
        """``choices[0].finish_reason "eos" is not one of 'stop', ... [route where]``."""
        if self.rule == "required":
            what = f"{self.path} is missing (required by {self.sdk_type})"
        elif self.rule == "enum":
            allowed = self.message.removeprefix("Input should be ")
            if len(allowed) > ALLOWED_LIMIT:
                allowed = allowed[:ALLOWED_LIMIT] + "..."
            what = f"{self.path} {self.value} is not one of {allowed}"
        elif self.rule == "type":
            what = f"{self.path} {self.value} is {self.json_type}; {_lower_first(self.message)}"
        else:
            what = f"{self.path} {self.value}: {_lower_first(self.message)} ({self.rule})"
        return f"{what} [{self.route} {self.where}]"

    def to_dict(self) -> dict[str, str]:
        return {
            "route": self.route,
            "where": self.where,
            "path": self.path,
            "rule": self.rule,
            "value": self.value,
            "message": self.message,
            "sdk_type": self.sdk_type,
            "json_type": self.json_type,
        }


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _rule(error_type: str) -> str:
    if error_type == "missing":
        return "required"
    if error_type in ("literal_error", "enum", "union_tag_invalid"):
        return "enum"
    if error_type.endswith("_type") or error_type in ("int_from_float", "model_attributes_type"):
        return "type"
    return error_type


_SCALAR_LABELS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "literal"})


def _is_label(part: Any) -> bool:
    """Whether a location part names a union member (pydantic puts it in the location: a class
    name, ``str``, ``list[...]``, ``function-after[...]``) rather than a JSON field."""
    return isinstance(part, str) and (
        part[:1].isupper() or "[" in part or part.split("[")[0] in _SCALAR_LABELS
    )


def _wrong_tag(errors: list[dict[str, Any]], type_loc: tuple[Any, ...]) -> bool:
    """Whether a union member's errors say the value's ``type`` is not the member's literal."""
    return any(tuple(x["loc"]) == type_loc and x["type"] == "literal_error" for x in errors)


def _narrow(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep, at each union, only the errors of the member the value meant to be.

    pydantic validates a union against every member and, when none fits, reports the errors of
    all of them (fifty stream event classes for one bad event). The SDK's unions are tagged by
    ``type``: the members whose ``type`` literal the value does not match are dropped; no member
    left means the tag itself is unknown (one ``enum`` error); of several left, the one with the
    fewest errors is the closest fit. The member's label is removed from the location."""
    out: list[dict[str, Any]] = []
    groups: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for e in errors:
        loc = tuple(e["loc"])
        i = next((k for k, part in enumerate(loc) if _is_label(part)), None)
        if i is None:
            out.append(e)
        else:
            groups.setdefault(loc[:i], {}).setdefault(loc[i], []).append(e)
    for prefix, members in groups.items():
        keep = [
            (label, errs)
            for label, errs in members.items()
            if not _wrong_tag(errs, (*prefix, label, "type"))
        ]
        if not keep:
            tags = [
                x["msg"].removeprefix("Input should be ")
                for errs in members.values()
                for x in errs
                if tuple(x["loc"])[-1:] == ("type",) and x["type"] == "literal_error"
            ]
            sample = next(iter(members.values()))[-1]
            out.append(
                {
                    "loc": (*prefix, "type"),
                    "type": "union_tag_invalid",
                    "msg": "Input should be " + ", ".join(tags),
                    "input": sample.get("input"),
                }
            )
            continue
        _label, errs = min(keep, key=lambda member: len(member[1]))
        depth = len(prefix)
        out.extend(_narrow([{**x, "loc": (*prefix, *tuple(x["loc"])[depth + 1 :])} for x in errs]))
    return out


def _path(loc: tuple[Any, ...]) -> str:
    """``("choices", 0, "finish_reason")`` -> ``choices[0].finish_reason``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(body)"


def _snip(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > VALUE_LIMIT:
        text = text[:VALUE_LIMIT] + "..."
    return redact(text)


def _pattern_matches(pattern: str, path: tuple[Any, ...]) -> bool:
    want = pattern.split(".")
    return len(want) == len(path) and all(
        w == "*" and isinstance(p, int) or w == str(p) for w, p in zip(want, path, strict=True)
    )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    names: dict[type, str] = {str: "string", list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)


def _with_article(json_type: str) -> str:
    return (
        json_type
        if json_type == "null"
        else f"an {json_type}"
        if json_type[:1] in "aeiou"
        else f"a {json_type}"
    )


def validate(
    spec: str,
    data: Any,
    *,
    exempt: tuple[Exemption, ...] = (),
    request: Any = None,
    chunk: bool = False,
) -> list[dict[str, Any]]:
    """pydantic's errors for ``data`` as the type ``spec`` in strict mode, one union member
    each (empty: it validates), less those an :class:`Exemption` covers for this request."""
    import pydantic

    ta = adapter(spec)
    if ta is None:
        return []
    try:
        ta.validate_python(data, strict=True)
    except pydantic.ValidationError as exc:
        errors = _narrow([dict(e) for e in exc.errors(include_url=False, include_context=False)])
        return [e for e in errors if not any(x.covers(e, request, chunk) for x in exempt)]
    return []


def _type_name(spec: str) -> str:
    return spec.rpartition(":")[2]


def findings_for(
    spec: str, data: Any, route: str, where: str, *, shape: Shape | None = None, request: Any = None
) -> list[Finding]:
    """The :class:`Finding` list of one body or chunk (``where``: "body" or "chunk N")."""
    out = []
    exempt = shape.exempt if shape is not None else ()
    chunk = where.startswith("chunk")
    for e in validate(spec, data, exempt=exempt, request=request, chunk=chunk):
        rule = _rule(e["type"])
        out.append(
            Finding(
                route=route,
                where=where,
                path=_path(tuple(e["loc"])),
                rule=rule,
                value="" if rule == "required" else _snip(e.get("input")),
                message=str(e.get("msg", "")),
                sdk_type=_type_name(spec),
                json_type="" if rule == "required" else _with_article(_json_type(e.get("input"))),
            )
        )
    return out


@dataclass(slots=True)
class SchemaFindings:
    """What one check's answers broke, accumulated over its exchanges; bounded: the first
    :data:`MAX_FINDINGS` distinct (route, path, rule) kept, the rest counted in ``more``."""

    findings: list[Finding] = field(default_factory=list)
    more: int = 0
    seen: int = 0  # exchanges of the context already validated
    exchange: Exchange | None = None  # the first exchange with a finding (for its curl)
    _keys: set[tuple[str, str, str]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.findings)

    def add(self, found: list[Finding], ex: Exchange) -> None:
        for f in found:
            key = (f.route, f.path, f.rule)
            if key in self._keys:
                continue
            self._keys.add(key)
            if len(self.findings) >= MAX_FINDINGS:
                self.more += 1
                continue
            self.findings.append(f)
            if self.exchange is None:
                self.exchange = ex

    def observe(self, ex: Exchange, base_url: str) -> None:
        """Validate one exchange's answer when its route is mapped and it succeeded (2xx)."""
        if not ex.ok or ex.status == 204:
            return
        route = route_of(ex.url, base_url)
        shape = shape_for(ex.method, route) if route else None
        if shape is None or route is None:
            return
        request = ex.request_body
        if ex.stream is not None:
            if shape.chunk is None or "text/event-stream" not in ex.content_type:
                return  # a JSON answer to a stream request: the check says so
            for i, chunk in enumerate(ex.stream.chunks):
                where = f"chunk {i}"
                found = findings_for(shape.chunk, chunk, route, where, shape=shape, request=request)
                self.add(found, ex)
        elif shape.body is not None:
            data = ex.json()
            if data is not None:
                self.add(
                    findings_for(shape.body, data, route, "body", shape=shape, request=request), ex
                )

    def summary(self) -> str:
        """``path value: rule [route where]; ...`` for a message (the first findings)."""
        text = "; ".join(f.describe() for f in self.findings)
        if self.more:
            text += f"; and {self.more} more distinct finding(s)"
        return text

    def to_list(self) -> list[dict[str, str]]:
        return [f.to_dict() for f in self.findings]
