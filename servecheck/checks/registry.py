"""The check registry: every conformance check is a named thing.

A check is a plain function taking a :class:`~servecheck.checks.context.CheckContext`,
registered with :func:`check` under a stable id (``STREAM-DONE``), a one-line description and an
expectation, like an Autobahn|Testsuite case. The id is what users grep for in reports, put in
``exclude``/``allow`` in targets.yaml, and find in docs/checks.md (generated from this registry).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servecheck.checks.preconditions import ROUTE_ACCEPTS, known

if TYPE_CHECKING:
    from servecheck.checks.context import CheckContext

SURFACES: dict[str, str] = {
    "HEALTH": "health and readiness",
    "MODELS": "/v1/models and served names",
    "CHAT": "chat completions (non-streaming)",
    "STREAM": "server-sent-event streaming",
    "LOGPROBS": "chat logprobs: tokens that spell the answer, log-probability values, streamed",
    "JSON": "JSON mode and JSON schema",
    "TOOLS": "tool calls",
    "REQ": "legal request shapes real clients send: accepted and answered properly",
    "CTX": "long context: rejection, truncation, max_tokens room",
    "ERR": "errors for bad requests",
    "AUTH": "API keys",
    "CONC": "concurrency and robustness",
    "FUZZ": "generated invalid and edge-case bodies",
    "CLIENT": "the official openai and anthropic SDKs end to end",
    "EMBED": "/v1/embeddings",
    "RERANK": "/v1/rerank (or /rerank)",
    "CACHE": "prompt (prefix) cache usage and counters",
    "TEXT": "text integrity: multilingual answers, tokenizer round trips",
    "RESPONSES": "the Responses API, /v1/responses",
    "MESSAGES": "the Anthropic Messages API, /v1/messages",
    "OVERLOAD": "bursts above capacity: shed with 429/503, never crash",
    "REASON": "reasoning models: reasoning separated from the answer",
    "COMPL": "legacy /v1/completions: batches, token-id prompts, echo, usage, legacy logprobs",
    "IMAGE": "image input on chat completions: read by a vision model, refused by a text-only one",
    "LORA": "runtime LoRA adapters: loaded, listed, applied, unloaded (vLLM's endpoints)",
    "GRID": "invariants x request variants: each declared invariant on every variant it applies to",
    "AGENT": "agent-sized requests: dozens of multi-kB tools, a 20k-token system prompt, caching",
}
# The share of a model-dependent check's trials that must pass (``servecheck check --trials K``):
# 4 of 5, as OpenAI's gpt-oss compatibility test runs each case 5 times and a real model misses
# now and then; a check whose outcome the protocol alone decides must pass every trial.
MODEL_DEPENDENT_SHARE = 0.8
MAX_TRIALS = 50

# The suite file's stem where it is not the surface's id in lower case: REASON's predates the
# rule, and renaming it would change its pytest node ids.
_SUITE_STEMS: dict[str, str] = {"REASON": "reasoning"}


def suite_file(surface: str) -> str:
    """The packaged suite module that runs ``surface`` (``servecheck/suites/<this>``): written
    by ``python -m servecheck.docs`` from :data:`SURFACES`, like the checkout's shim."""
    return f"test_{_SUITE_STEMS.get(surface, surface.lower())}.py"


@dataclass(frozen=True, slots=True)
class Check:
    id: str
    description: str
    expectation: str
    requires: tuple[str, ...]
    func: Callable[[CheckContext], None]
    needs_api_key: bool = False
    # What the model writes decides it (a tool call, JSON for a schema, reasoning kept apart, a
    # stop string): run ``--trials`` times and judged by the share that passed.
    model_dependent: bool = False
    pass_share: float = 1.0

    def threshold(self, trials: int) -> int:
        """How many of ``trials`` runs must pass: all of them for a check the protocol decides,
        ``pass_share`` of them (rounded up, at least one) for a model-dependent one."""
        share = self.pass_share if self.model_dependent else 1.0
        return max(1, min(trials, math.ceil(share * trials - 1e-9)))

    @property
    def surface(self) -> str:
        return self.id.split("-", 1)[0]

    @property
    def capabilities(self) -> tuple[str, ...]:
        """The capabilities the target must declare (else the check is skipped)."""
        return tuple(r for r in self.requires if not r.startswith(ROUTE_ACCEPTS))

    @property
    def preconditions(self) -> tuple[str, ...]:
        """What the target must show before the verdict means anything (``route-accepts:/...``,
        see :mod:`servecheck.checks.preconditions`); unmet, the check is an error."""
        return tuple(r for r in self.requires if r.startswith(ROUTE_ACCEPTS))


REGISTRY: dict[str, Check] = {}


def check(
    id: str,
    description: str,
    expectation: str,
    *,
    requires: Iterable[str] = (),
    needs_api_key: bool = False,
    model_dependent: bool = False,
    pass_share: float = MODEL_DEPENDENT_SHARE,
) -> Callable[[Callable[[CheckContext], None]], Callable[[CheckContext], None]]:
    """Register a check function under a stable id. ``requires`` names capabilities and
    preconditions (``route-accepts:/chat/completions``: the route must serve a good request
    first, else the check is an error naming why). ``model_dependent``: its outcome depends on
    what the model writes, so ``--trials K`` runs it K times and it passes when ``pass_share``
    of them do."""
    if not 0 < pass_share <= 1:
        raise ValueError(f"check {id!r}: pass_share must be in (0, 1], got {pass_share}")
    surface = id.split("-", 1)[0]
    if surface not in SURFACES:
        raise ValueError(f"check id {id!r} must start with one of {', '.join(SURFACES)}")
    for requirement in requires:
        if requirement.startswith(ROUTE_ACCEPTS) and not known(requirement):
            raise ValueError(f"check {id!r}: unknown precondition {requirement!r}")

    def decorate(func: Callable[[CheckContext], None]) -> Callable[[CheckContext], None]:
        if id in REGISTRY and REGISTRY[id].func is not func:
            raise ValueError(f"duplicate check id {id!r}")
        REGISTRY[id] = Check(
            id,
            description,
            expectation,
            tuple(requires),
            func,
            needs_api_key,
            model_dependent,
            pass_share if model_dependent else 1.0,
        )
        return func

    return decorate


def load_all() -> dict[str, Check]:
    """Import every surface module so that its checks register; return the registry."""
    from servecheck.checks import surfaces  # noqa: F401

    return REGISTRY


def by_surface(surface: str) -> list[Check]:
    return [c for c in load_all().values() if c.surface == surface]


def matches(check_id: str, patterns: Iterable[str]) -> str | None:
    """The first glob in ``patterns`` that matches ``check_id`` (case-insensitive), else None.
    A pattern equal to the id matches before globbing: a derived id's brackets
    (``GRID-USAGE[chat,plain,n=2]``) would otherwise read as a character class."""
    for pattern in patterns:
        if pattern.upper() == check_id.upper() or fnmatch.fnmatchcase(
            check_id.upper(), pattern.upper()
        ):
            return pattern
    return None


def catalogue_markdown() -> str:
    """docs/checks.md, generated so it cannot drift from the code."""
    from servecheck.config.model import CAPABILITIES
    from servecheck.reference.faults import FAULTS

    caught_by: dict[str, list[str]] = {}
    for fault in FAULTS.values():
        for cid in fault.catches:
            caught_by.setdefault(cid, []).append(fault.name)
    checks = load_all()
    lines = [
        "# Conformance check catalogue",
        "",
        "Generated from `servecheck/checks/` by `servecheck checks --markdown`; do not edit by hand.",
        "Every check has a fault in the reference server that makes it fail (`servecheck reference-server",
        "--fault NAME`); `tests/test_fault_matrix.py` proves each pair.",
        "",
        f"{len(checks)} checks.",
        "",
    ]
    for surface, title in SURFACES.items():
        members = [c for c in checks.values() if c.surface == surface]
        if not members:
            continue
        lines += [
            f"## {surface}: {title}",
            "",
            "| id | description | expectation | needs | proven by fault |",
            "| --- | --- | --- | --- | --- |",
        ]
        for c in members:
            needs = ", ".join(f"`{r}`" for r in c.requires) + (
                " an API key" if c.needs_api_key else ""
            )
            faults = ", ".join(f"`{f}`" for f in caught_by.get(c.id, [])) or "(none)"
            lines.append(
                f"| `{c.id}` | {c.description} | {c.expectation} | {needs.strip() or '-'} | {faults} |"
            )
        lines.append("")
    lines += _trials_markdown(checks)
    lines += _schema_profile_markdown(FAULTS)
    lines += ["## Capabilities", "", "| capability | meaning |", "| --- | --- |"]
    lines += [f"| `{k}` | {v} |" for k, v in CAPABILITIES.items()]
    return "\n".join(lines) + "\n"


def _trials_markdown(checks: dict[str, Check]) -> list[str]:
    """The repeated-trials section of docs/checks.md: the model-dependent checks and the share
    of ``--trials K`` runs each must pass."""
    marked = [c for c in checks.values() if c.model_dependent]
    lines = [
        "## Repeated trials",
        "",
        "`servecheck check` with K trials (its trials option, default 1) runs each model-dependent check K times and",
        "reports k/K passed (results.jsonl and summary.json `trials`, a `servecheck_trials`",
        "property in junit.xml, a table in report.html). It passes when at least the threshold",
        "passed: the share below of K, rounded up; every other check runs once and must pass.",
        "",
        "| check | passes with | at K=5 |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{c.id}` | {c.pass_share:.0%} of K | {c.threshold(5)}/5 |" for c in marked]
    return [*lines, ""]


def _schema_profile_markdown(faults: dict[str, Any]) -> list[str]:
    """The strict schema profile's section of docs/checks.md: routes, types, exemptions, proof."""
    from servecheck.checks.schema import BUILT_NOTES, ROUTES

    proof = [
        f"`{f.name}` ({', '.join(f'`{c}`' for c in f.strict)})" for f in faults.values() if f.strict
    ]
    lines = [
        "## The strict schema profile",
        "",
        "Not a check: every 2xx body and stream chunk that a check receives through its context is",
        "validated strictly against the openai SDK's generated types (`servecheck/checks/schema.py`):",
        "required fields present, enum values from the allowed set, exact JSON types (no number as a",
        "string), unknown fields allowed. A check that passes with findings is NON-STRICT (schema);",
        "with `servecheck check --strict` (`accept --strict`, `--sc-strict`, a target's",
        "`strict: true`) it fails. Error answers are not validated. Proven by fault "
        + (", ".join(proof) or "(none)")
        + ".",
        "",
        "| method | route | body type | stream chunk type |",
        "| --- | --- | --- | --- |",
    ]
    for (method, route), shape in ROUTES.items():
        chunk = f"`{shape.chunk}`" if shape.chunk else "-"
        note = f": {BUILT_NOTES[shape.body]}" if shape.body in BUILT_NOTES else ""
        lines.append(f"| {method} | `{route}` | `{shape.body}`{note} | {chunk} |")
    lines += [
        "",
        "Where the SDK's type is narrower than the API it types, the API's value is accepted:",
        "",
        "| route | field | accepted | why |",
        "| --- | --- | --- | --- |",
    ]
    for (_method, route), shape in ROUTES.items():
        for x in shape.exempt:
            where = " in stream chunks" if x.chunk else ""
            asked = f" when the request has {x.request[0]}: {x.request[1]}" if x.request else ""
            lines.append(f"| `{route}` | `{x.path}` | {x.value}{where}{asked} | {x.why} |")
    return [*lines, ""]
