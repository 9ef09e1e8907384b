"""summary.json as types: one dataclass per section, :class:`Summary` the whole file.

``Summary.to_json()`` gives exactly the keys and values the file has always had (schema
:data:`SCHEMA_VERSION`; tests/load/test_summary_shape.py holds a real run's file against the
shape the untyped code wrote); ``Summary.from_json()`` reads a file back for the report;
:func:`summary_schema` is the JSON Schema the package ships (summary.schema.json), generated
from these types (servecheck/analysis/typed_json.py); after changing a type, regenerate it with
``python -m servecheck.analysis.sections`` (a test holds the shipped file to the types).

Every section is a dataclass. ``dict[str, X]`` is left where the keys are data (turns, image
sizes, TTFT phases, gauges by name) and ``JSONObject`` where a part is another file's or
another module's own object, described as "an object" (the engine's prefix-cache file, drain.json,
a profile's params, the server's reconciliation, decomposition, findings and counters). The
record sections, the timings, cancel and outages are built as these types where they are made;
the profile and the server section are still made as dicts (phased.py and its profile kinds,
server_truth.py) and read into their types by the summary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.host import HostLoad
from servecheck.analysis.typed_json import FLATTEN, OMIT, document_schema, from_json, to_json

SCHEMA_VERSION = 1
SCHEMA_FILE = "summary.schema.json"

JSONObject = dict[str, Any]
# A distribution in ms: count, min, mean, p50 ... p99.9, max (None where nothing was measured).
Percentiles = dict[str, float | None]


@dataclass(slots=True)
class LengthsAsked:
    """--input-tokens / --output-tokens as asked, and how the output length was held."""

    input_tokens: str | None
    output_tokens: str | None
    output_length: str | None
    draws: int


@dataclass(slots=True)
class Head:
    """What ran, against what, how, when (the file's first keys)."""

    schema_version: int
    run_id: str
    target: str
    base_url: str
    model: str | None
    scenario: str
    api: str
    mode: str
    users: int | None
    rate: float | None
    burstiness: float | None  # gamma arrivals' shape, else null
    lengths: LengthsAsked | None
    seed: int | None
    duration_s: float | None
    max_requests: int | None
    workers: int
    started_at: str
    ended_at: str
    prompt_method: str | None
    engine: str | None = None  # targets.yaml's engine
    engine_version: str | None = None  # what the engine reported before the run (None: nothing)


@dataclass(slots=True)
class RecordsKept:
    """The run's record files: merged lines, per worker, what was kept (--records)."""

    merged: int
    bad_lines: int
    per_worker: dict[str, int]
    kept: JSONObject
    transport: JSONObject | None = field(default=None, metadata=OMIT)  # the master's ledger


@dataclass(slots=True)
class Requests:
    total: int
    ok: int
    failed: int
    error_rate: float
    rate_limited: int
    rate_limited_rate: float
    errors: dict[str, int]
    abandoned: int
    cancelled: int


@dataclass(slots=True)
class Throughput:
    requests_per_s: float
    attempted_per_s: float
    output_tokens_per_s: float


@dataclass(slots=True)
class Tokens:
    output: int
    output_usage: int
    output_client: int
    usage_missing: int
    discrepant_requests: int
    reasoning: int
    answer: int
    reasoning_requests: int
    reasoning_usage_zero: int


@dataclass(slots=True)
class ScheduleSection:
    """The arrival schedule and how far the generator fell behind it."""

    mode: str
    planned: int | None
    sent: int
    lag_ms: Percentiles
    loop_lag_ms: Percentiles
    max_lag_ms: float | None
    behind: bool
    reasons: list[str]
    notes: list[str] = field(default_factory=list)  # lateness that did not cost a figure


@dataclass(slots=True)
class SloResult:
    """One SLO's verdict."""

    slo: str
    source: str
    metric: str
    op: str
    bound: float
    unit: str
    observed: float | None
    passed: bool
    note: str


@dataclass(slots=True)
class ErrorBudget:
    """The share of requests that may fail, where that rule came from, and whether it held."""

    max_error_rate: float | None
    source: str  # "slo", "cli", ... or "off"
    slo: str | None
    passed: bool | None


@dataclass(slots=True)
class ReaderThread:
    """The native reader threads' own cost (their CPU is inside the generator's too)."""

    reads: int
    passes: int
    cpu_s: float
    us_per_read: float | None
    reads_per_pass: float | None
    # the short scheduler slice every reader thread got (Linux 6.12+), None where any ran on the
    # kernel's default: then a busy core can hold a woken reader for milliseconds
    slice_us: float | None = None
    late_reads: int = 0  # reads taken more than 10 ms after their bytes arrived
    # the native lane's slots (closed loop): time spent waiting for the generator's next request,
    # and time spent in exchanges (None where no lane ran)
    held_s: float | None = None
    busy_s: float | None = None
    # the lane's passes that took its long pause (its streams' tokens came far enough apart that
    # a longer pause merges none: fewer passes, less CPU), None where no lane ran
    long_passes: int | None = None


@dataclass(slots=True)
class Reader:
    """How tokens were timed: kernel receive stamps, the reader's clock, or both."""

    kinds: list[str]
    clock: str | None
    kernel_stamps: int
    reader_stamps: int
    thread: ReaderThread | None = field(default=None, metadata=OMIT)


@dataclass(slots=True)
class Generator:
    """The load generator's own cost and reader."""

    cpu_s: float
    tokens_streamed: int
    cpu_s_per_10k_tokens: float | None
    locust_rc: int | None
    reader: Reader
    host: HostLoad | None = None  # its CPU against the machine's, for the cause of any lag


@dataclass(slots=True)
class Steady:
    """The window the SLOs judged: asked, where it lay, why, and its figures (when applied)."""

    FLAT_KEYS = {"figures": ("requests", "window_s", "throughput", "latency_ms", "goodput")}

    asked: str
    applied: bool
    start_s: float | None
    end_s: float | None
    how: str
    figures: JSONObject | None = field(default=None, metadata=FLATTEN)


@dataclass(slots=True)
class Slices:
    """The run in fixed time slices (t0: the wall clock of start_s 0, the server series')."""

    slice_s: float
    t0: float | None
    rows: list[JSONObject]


@dataclass(slots=True)
class WarmupSection:
    """The warm-up's own figures (--warmup, --warmup-requests): counted in nothing else."""

    seconds: float | None
    requests_asked: int | None
    requests: int
    errors: int
    span_s: float
    ttft_ms: Percentiles
    e2e_ms: Percentiles


@dataclass(slots=True)
class Brief:
    """A distribution in ms, briefly: count, p50, p90, p99, mean (None where nothing was timed)."""

    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None


@dataclass(slots=True)
class TurnRow:
    """One conversation turn (or a kind of request): counts, TTFT / E2E, token means."""

    count: int
    errors: int
    ttft_ms: Brief
    e2e_ms: Brief
    prompt_tokens_mean: float | None
    history_tokens_mean: float | None
    cache_hit_rate: float | None


@dataclass(slots=True)
class Turns:
    """TTFT by conversation turn (analysis/breakdown.py); ``by_turn``'s keys are turn indexes."""

    conversations: int
    by_turn: dict[str, TurnRow]


@dataclass(slots=True)
class PrefixCache:
    """The client's view of the prefix cache (usage.cached_tokens), the TTFT of a group's
    first request vs the rest, and the engine's own counters (``engine``: its file, as read)."""

    requests_reporting: int
    requests_hit: int
    hit_rate: float | None
    ttft_cached_ms: Brief
    ttft_uncached_ms: Brief
    ttft_first_of_group_ms: Brief
    ttft_later_in_group_ms: Brief
    engine: JSONObject | None


@dataclass(slots=True)
class ImageTtft:
    count: int
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(slots=True)
class ImageSize:
    """Requests of one image count and size: TTFT, prompt tokens, tokens per image (medians)."""

    count: int
    errors: int
    ttft_ms: ImageTtft
    prompt_tokens_p50: float | None
    tokens_per_image_p50: float | None
    requests_with_usage: int


@dataclass(slots=True)
class Images:
    """--images (analysis/image_stats.py); ``by_size``'s keys are ``COUNTxWxH``."""

    requests: int
    by_size: dict[str, ImageSize]


@dataclass(slots=True)
class Connections:
    new: int
    reused: int


@dataclass(slots=True)
class PhaseMs:
    """One TTFT phase over the stamped requests, in ms."""

    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    mean: float | None


@dataclass(slots=True)
class SlowRequest:
    """One slow request: what finds it in the engine's log, and its stamps (ms from t0)."""

    request_id: str | None
    request_id_echo: str | None
    response_id: str | None
    worker: str | None
    t_sent: float | None
    ttft_ms: float | None
    e2e_ms: float | None
    new_conn: bool | None
    stamps: dict[str, float] | None


@dataclass(slots=True)
class Slowest:
    by_ttft: list[SlowRequest]
    by_e2e: list[SlowRequest]


@dataclass(slots=True)
class ServerCheck:
    """One per-request server-timing check (analysis/server_timings.py's CHECKS): over how many
    requests it could be made, and on how many the engine's numbers broke it."""

    id: str
    description: str
    checked: int
    violated: int


@dataclass(slots=True)
class ServerTimings:
    """Per-request server timings (llama.cpp's ``timings``, vLLM's ``metrics``): how many
    requests carried them, and the checks that hold them against the client's record."""

    requests: int
    checks: list[ServerCheck]


@dataclass(slots=True)
class TimingsSection:
    """The TTFT decomposition (analysis/timings.py): connections, the request id's echo, the
    phases (keys: the measured ones of its PHASES) and the slowest requests; ``server`` where
    the engine sent per-request timings."""

    request_id_header: str | None
    requests_stamped: int
    connections: Connections
    request_id_echoed: int
    request_id_echo_differs: int
    response_ids: int
    request_id_in_body: int
    phases_ms: dict[str, PhaseMs]
    slowest: Slowest
    server: ServerTimings | None = field(default=None, metadata=OMIT)


@dataclass(slots=True)
class CancelSection:
    """--cancel: the rule, how many requests it cancelled, and the engine's drain verdict
    (``drain``: drain.json as the telemetry wrote it, None without one)."""

    rule: str
    cancelled: int
    drain: JSONObject | None


@dataclass(slots=True)
class OutageWindow:
    """One outage, in seconds from the run's start (end None: not over by the run's end)."""

    start_s: float
    end_s: float | None
    recovered: bool
    recover_s: float | None
    resolution_s: float | None
    failures: dict[str, int]  # by error class
    lost_requests: int
    workers: int


@dataclass(slots=True)
class BreakerSettings:
    """The generator's circuit breaker as this run had it."""

    open_after: int
    probe_first_s: float
    probe_max_s: float


@dataclass(slots=True)
class Outages:
    """The windows in which the target was away (analysis/outage.py); none is news too."""

    count: int
    lost_requests: int
    down_s: float
    windows: list[OutageWindow]
    breaker: BreakerSettings


@dataclass(slots=True)
class PhasePcts:
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(slots=True)
class ProfilePhase:
    """One phase of a load profile: its window, offered rate and what it measured."""

    name: str
    start_s: float
    end_s: float
    offered_rate: float | None
    count: int
    errors: int
    ttft_ms: PhasePcts
    e2e_ms: PhasePcts


@dataclass(slots=True)
class Recovery:
    """A recovery profile's figures: the pre-overload p95 TTFT, the bound, and when the p95
    came back within it for ``sustain_slices`` consecutive slices (``never_left``: it was never
    above the bound for that many in a row, ``recovery_s`` 0; ``after_slices``: [seconds after
    the overload, p95 ms] per slice)."""

    overload_s: list[float]
    within: float
    sustain_slices: int
    pre_overload_ttft_p95_ms: float | None
    bound_ms: float | None
    recovered: bool | None
    never_left: bool | None
    recovery_s: float | None
    after_slices: list[list[float]]
    note: str | None = field(default=None, metadata=OMIT)


@dataclass(slots=True)
class Churn:
    """A churn profile's figures: what setting up a connection cost (``setup_ms``: the connect
    and tls phases the run measured)."""

    connections: Connections
    setup_ms: dict[str, PhaseMs]
    setup_mean_ms: float
    setup_share: float | None


@dataclass(slots=True)
class ProfileSection:
    """--profile (load/workload/phased.py): the profile as asked (``params``: its kind's own
    keys), its phases, and recovery's or churn's figures."""

    name: str
    text: str
    params: JSONObject
    duration_s: float
    slice_s: float
    phases: list[ProfilePhase]
    recovery: Recovery | None = field(default=None, metadata=OMIT)
    churn: Churn | None = field(default=None, metadata=OMIT)


@dataclass(slots=True)
class ServerWindow:
    """The two scrapes' wall clocks and the seconds between them."""

    start: float
    end: float
    s: float


@dataclass(slots=True)
class AgentRow:
    """Agent requests of one turn index or one context-length bucket (analysis/agent_stats.py):
    TTFT and E2E in ms, mean context tokens, the prefix-cache hit rate and where it came from."""

    count: int
    errors: int
    ttft_ms: Percentiles
    e2e_ms: Percentiles
    context_tokens_mean: float | None
    cache_hit_rate: float | None
    cache_source: str | None


@dataclass(slots=True)
class AgentSection:
    """Agent sessions as load (load/workload/agent.py): sessions and how they ended, TTFT by
    turn and by context length, the prefix-cache hit rate per turn (``cache_note``: why it was
    not measured), the tool's think time against the server's time, per-session E2E, subagent
    forks and their fan-out (fork to the last branch done)."""

    sessions: int
    completed: int
    ended_by_context: int
    ended_by_error: int
    open_at_end: int
    branches: int
    forks: int
    by_turn: dict[str, AgentRow]
    by_context: dict[str, AgentRow]
    cache_note: str | None
    engine_hit_rate: float | None
    tool_wait_s: float
    server_s: float
    tool_share: float | None
    tool_wait_ms: Percentiles
    session_e2e_ms: Percentiles
    fanout_ms: Percentiles


@dataclass(slots=True)
class ServerSection:
    """The engine's own /metrics over the run (analysis/server_truth.py, server_gauges.py):
    the source, the sampled series' summaries, the reconciliation with the client's counts,
    the TTFT decomposition, the findings (an id, a severity, a message and the finding's own
    facts), the gauges and counters by name. Unavailable: ``note`` says why, and no figures."""

    metrics_url: str
    engine: str
    sampled: list[JSONObject] | None = field(default=None, metadata=OMIT)
    available: bool = False
    note: str | None = field(default=None, metadata=OMIT)
    window: ServerWindow | None = field(default=None, metadata=OMIT)
    reconciliation: list[JSONObject] | None = field(default=None, metadata=OMIT)
    decomposition: JSONObject | None = field(default=None, metadata=OMIT)
    findings: list[JSONObject] = field(default_factory=list)
    gauges: dict[str, JSONObject] | None = field(default=None, metadata=OMIT)
    counters: JSONObject | None = field(default=None, metadata=OMIT)
    voided_by_outage: bool | None = field(default=None, metadata=OMIT)  # counters not reconciled
    notes: list[str] | None = field(default=None, metadata=OMIT)  # the recorder's own


@dataclass(slots=True)
class AggregateSource:
    """Where the figures came from: the workers' aggregates or the records rebuilt."""

    source: str
    samples: JSONObject


@dataclass(slots=True)
class Summary:
    """A load run's summary.json."""

    head: Head = field(metadata=FLATTEN)
    records: RecordsKept
    requests: Requests
    window_s: float
    throughput: Throughput
    tokens: Tokens
    latency_ms: dict[str, Percentiles]
    goodput: float | None
    goodput_requests: int | None
    schedule: ScheduleSection
    slo: list[SloResult]
    error_budget: ErrorBudget
    verdict: str
    partial: bool
    reasons: list[str]
    exit_code: int
    generator: Generator
    files: list[str]
    steady: Steady
    slices: Slices
    # Made from the records (analysis/breakdown.py, analysis/image_stats.py) when they carry it.
    turns: Turns | None = field(default=None, metadata=OMIT)
    prefix_cache: PrefixCache | None = field(default=None, metadata=OMIT)
    images: Images | None = field(default=None, metadata=OMIT)
    agent: AgentSection | None = field(default=None, metadata=OMIT)  # analysis/agent_stats.py
    # load/faults.py: --cancel and its drain, outages.
    cancel: CancelSection | None = field(default=None, metadata=OMIT)
    outages: Outages | None = field(default=None, metadata=OMIT)
    timings: TimingsSection | None = field(default=None, metadata=OMIT)  # analysis/timings.py
    profile: ProfileSection | None = field(default=None, metadata=OMIT)  # load/workload/phased.py
    server: ServerSection | None = field(default=None, metadata=OMIT)  # load/server_watch.py
    warmup: WarmupSection | None = field(default=None, metadata=OMIT)  # analysis/warmup.py
    aggregate: AggregateSource | None = field(default=None, metadata=OMIT)
    # The hung-but-healthy finding that stopped the run, with its evidence (analysis/hung.py).
    hung: JSONObject | None = field(default=None, metadata=OMIT)

    def to_json(self) -> JSONObject:
        """summary.json's object, its keys in the file's order."""
        out: JSONObject = to_json(self)
        return out

    @classmethod
    def from_json(cls, doc: JSONObject) -> Summary:
        """A summary.json read back; a key an older file lacks reads as None."""
        return from_json(cls, doc)


def summary_schema() -> JSONObject:
    """summary.json's JSON Schema, generated from :class:`Summary`."""
    return document_schema(Summary, "servecheck load summary.json")


def schema_text() -> str:
    """The schema as the package ships it (servecheck/analysis/summary.schema.json)."""
    return json.dumps(summary_schema(), indent=2) + "\n"


def shipped_schema_path() -> Path:
    return Path(__file__).with_name(SCHEMA_FILE)


if __name__ == "__main__":  # regenerate the shipped file after changing a section's type
    shipped_schema_path().write_text(schema_text(), encoding="utf-8")


__all__ = [
    "SCHEMA_FILE",
    "SCHEMA_VERSION",
    "AgentRow",
    "AgentSection",
    "AggregateSource",
    "BreakerSettings",
    "Brief",
    "CancelSection",
    "Churn",
    "Connections",
    "ErrorBudget",
    "Generator",
    "Head",
    "ImageSize",
    "ImageTtft",
    "Images",
    "LengthsAsked",
    "OutageWindow",
    "Outages",
    "PhaseMs",
    "PhasePcts",
    "PrefixCache",
    "ProfilePhase",
    "ProfileSection",
    "Recovery",
    "Reader",
    "ReaderThread",
    "RecordsKept",
    "Requests",
    "ScheduleSection",
    "ServerSection",
    "ServerWindow",
    "Slices",
    "SloResult",
    "SlowRequest",
    "Slowest",
    "Steady",
    "Summary",
    "Throughput",
    "TimingsSection",
    "Tokens",
    "TurnRow",
    "Turns",
    "WarmupSection",
    "schema_text",
    "shipped_schema_path",
    "summary_schema",
]
