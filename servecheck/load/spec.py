"""What one load run is asked to do: :class:`LoadSpec`, parsed and typed.

``servecheck load`` (``servecheck/commands/load``) and the workflows (accept, capacity, cutover,
repeat) build one and hand it to :func:`servecheck.load.run.run_load`. It lives apart from run.py
so the modules run.py calls (summary, faults, server_watch) can name it without importing
run.py back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.budget import DEFAULT_ERROR_BUDGET
from servecheck.analysis.down import DownRule
from servecheck.analysis.hung import HungRule
from servecheck.analysis.slo import SLO, as_slos
from servecheck.analysis.steady import DEFAULT_SLICE_S, SteadyWindow
from servecheck.config.model import Target
from servecheck.load.workload.agent import AgentShape
from servecheck.load.workload.cancel import DRAIN_BOUND_S, CancelRule
from servecheck.load.workload.lengths import Lengths
from servecheck.load.workload.phased import Profile
from servecheck.load.workload.schedule import StageShape

__all__ = ["LoadSpec"]


@dataclass(slots=True)
class LoadSpec:
    """What to run. Exactly one of ``users``, ``rate`` or ``shape``; at least one bound.

    ``slos`` are parsed SLOs (expressions given here are parsed once, when the spec is made);
    the target's ``slo`` list from targets.yaml is added to them. ``error_budget`` is the share
    of failed requests the run may have (``analysis/budget.py``; None: no budget); an ``error_rate``
    SLO replaces it.
    ``role`` is ``local`` (default; with ``processes`` > 1 Locust forks workers), ``master`` or
    ``worker`` (``expect_workers`` is the number of workers in both of the latter).
    """

    target: Target
    scenario: str = "chat"
    users: int | None = None
    rate: float | None = None
    poisson: bool = False
    # Gamma-distributed gaps of this shape (vllm bench serve's --burstiness); None: not gamma.
    burstiness: float | None = None
    # Lengths instead of the scenario's (load/workload/lengths.py): mean and standard deviation in tokens.
    input_tokens: Lengths | None = None
    output_tokens: Lengths | None = None
    seed: int = 0
    shape: StageShape | None = None
    duration_s: float | None = None
    max_requests: int | None = None
    slos: list[SLO] = field(default_factory=list)
    error_budget: float | None = DEFAULT_ERROR_BUDGET
    model: str | None = None
    processes: int | None = None
    role: str = "local"  # local | master | worker
    expect_workers: int = 1
    master_host: str = "127.0.0.1"
    master_port: int = 5557
    out_dir: Path = Path("reports")
    run_id: str | None = None
    max_lag_ms: float = 25.0
    max_inflight: int = 1024
    drain_s: float | None = None
    retry_after_max_s: float = 0.0  # > 0: closed-loop users wait Retry-After (capped) after a 429
    extra_body: dict[str, Any] = field(default_factory=dict)
    use_tokenize: bool = True
    # The header each request's id goes out in (servers log it; vLLM echoes it); None: not sent.
    request_id_header: str | None = "X-Request-Id"
    cpus: str | None = None  # taskset CPU list for the generator, e.g. "0"
    progress: bool = True
    allow_lag: bool = False  # do not fail the run when the generator fell behind
    trace: str | None = None  # replay this trace file on its schedule (mode "trace")
    trace_format: str = "auto"
    trace_speed: float = 1.0  # 2.0 replays twice as fast
    warmup_s: float | None = None  # sent on top of the bounds, kept out of the statistics
    warmup_requests: int | None = None
    dataset: str | None = (
        None  # prompts from this local file (JSONL / ShareGPT, load/workload/dataset.py)
    )
    dataset_format: str = "auto"
    # Stop early when the target goes down mid-run (analysis/down.py); DownRule(0) turns it off.
    down_after: DownRule = field(default_factory=DownRule)
    # Stop and fail when the target answers its health check but generates nothing (analysis/hung.py).
    hung: HungRule = field(default_factory=HungRule)
    # Cancel a share of the requests at a point; the engine must drain after (load/workload/cancel.py).
    cancel: CancelRule | None = None
    cancel_drain_s: float = DRAIN_BOUND_S  # how long the engine has to come back down after
    api: str | None = None  # chat | messages; None: the scenario's (load/generator/apis.py)
    images: str | None = None  # sizes (1x512x512,2x256x256) or a folder (load/workload/images.py)
    # Traffic split across models by weight (load/workload/mix.py); empty: every request names `model`.
    model_mix: list[tuple[str, float]] = field(default_factory=list)
    # The engine's /metrics sampled beside the run and reconciled after it (load/server_watch.py)
    server_metrics: bool = True
    metrics_interval_s: float | None = None  # None: the target's telemetry.interval_s, else 1 s
    # The part of the run the SLOs judge, and the width of summary.json's slices (analysis/steady.py).
    steady_window: SteadyWindow = field(default_factory=SteadyWindow)
    slice_s: float = DEFAULT_SLICE_S
    # Per-request records kept on disk: auto | all | sample:N | none (analysis/aggregate.py); the
    # summary never needs them (each worker's aggregate holds it), the notebook and compare do.
    records: str = "auto"
    # A phased load profile (load/workload/phased.py): burst, zigzag, microburst, step, recovery, churn.
    profile: Profile | None = None
    # The live view (load/generator/live.py): Locust's web UI with an LLM tab at [HOST:]PORT (loopback by
    # default; beyond it, web_auth USER:PASS is required), an OpenMetrics endpoint at [HOST:]PORT.
    web: str | None = None
    web_auth: str | None = None
    metrics_port: str | None = None
    otlp: str | None = None  # push the live view as OTLP/HTTP metrics here (the otlp extra)
    # Agent sessions' knobs (load/workload/agent.py): the agent scenario's; None: its defaults.
    agent: AgentShape | None = None

    def __post_init__(self) -> None:
        self.slos = as_slos(self.slos)
