"""The calibration server's ``GET /metrics``: a few of vLLM's families, so that a load run's engine
truth (``load/server_watch.py``: the scrapes, the sampler, the reconciliation) runs against it too
and a benchmark can measure what that sampling costs the generator (``benchmarks/bench_server_metrics.py``).

Exposed, under vLLM's names and labels (``engine="0",model_name="truth"``): the running and
waiting gauges, the request-success, prompt-token and generation-token counters, and the TTFT and
e2e histograms (the reference server's buckets, ``reference/engine_metrics.py``). Counted once per
request (never per token, so the hot loop pays nothing per chunk): TTFT when its first token
leaves, the rest when its last one does; a stream whose client hung up counts nowhere. The page
has a fixed set of lines, whatever the traffic (bounded).
"""

from __future__ import annotations

from bisect import bisect_left

from servecheck.reference.engine_metrics import BUCKETS

LABELS = 'engine="0",model_name="truth"'


class _Hist:
    __slots__ = ("counts", "n", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last one: above every bound (+Inf only)
        self.n = 0
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.counts[bisect_left(BUCKETS, seconds)] += 1
        self.n += 1
        self.total += seconds

    def lines(self, family: str, doc: str) -> list[str]:
        out = [f"# HELP {family} {doc}", f"# TYPE {family} histogram"]
        running = 0
        for bound, n in zip(BUCKETS, self.counts, strict=False):
            running += n
            out.append(f'{family}_bucket{{{LABELS},le="{bound}"}} {running}')
        out += [
            f'{family}_bucket{{{LABELS},le="+Inf"}} {self.n}',
            f"{family}_sum{{{LABELS}}} {self.total:.6f}",
            f"{family}_count{{{LABELS}}} {self.n}",
        ]
        return out


class FastMetrics:
    """Counters of the requests the calibration server answered in full."""

    __slots__ = ("e2e", "generation", "prompt", "success", "ttft")

    def __init__(self) -> None:
        self.success = 0
        self.prompt = 0
        self.generation = 0
        self.ttft = _Hist()
        self.e2e = _Hist()

    def first_token(self, ttft_s: float) -> None:
        self.ttft.observe(ttft_s)

    def finished(self, prompt_tokens: int, generation_tokens: int, e2e_s: float) -> None:
        self.success += 1
        self.prompt += prompt_tokens
        self.generation += generation_tokens
        self.e2e.observe(e2e_s)

    def page(self, running: int) -> bytes:
        """The exposition text; ``running``: requests in progress now."""

        def scalar(family: str, kind: str, doc: str, value: int) -> list[str]:
            return [
                f"# HELP {family} {doc}",
                f"# TYPE {family} {kind}",
                f"{family}{{{LABELS}}} {value}",
            ]

        lines = [
            *scalar("vllm:num_requests_running", "gauge", "Requests in progress.", running),
            *scalar("vllm:num_requests_waiting", "gauge", "Requests waiting (none here).", 0),
            *scalar(
                "vllm:request_success_total", "counter", "Requests answered in full.", self.success
            ),
            *scalar("vllm:prompt_tokens_total", "counter", "Prompt tokens.", self.prompt),
            *scalar(
                "vllm:generation_tokens_total", "counter", "Generated tokens.", self.generation
            ),
            *self.ttft.lines("vllm:time_to_first_token_seconds", "Time to first token."),
            *self.e2e.lines("vllm:e2e_request_latency_seconds", "End to end request latency."),
        ]
        return ("\n".join(lines) + "\n").encode()
