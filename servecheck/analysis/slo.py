"""SLO expressions: ``ttft_p95<=500ms``, ``error_rate<=0.5%``, ``goodput>=95%`` ...

Grammar (whitespace allowed around the operator)::

    slo      := metric [ "_" stat ] op number [ unit ]
    metric   := ttft | itl | tpot | e2e | ttft_from_intended | e2e_from_intended | lag
              | ttfr | ttfa | itl_reasoning | itl_answer    (reasoning phases, docs/metrics.md)
              | error_rate | rate_limited | goodput | throughput_tokens | throughput_requests
              | lost_requests      (requests failed or not sent in outages, analysis/outage.py)
              | session_e2e | turn_ttft   (agent sessions, analysis/agent_stats.py: a statistic)
    stat     := p50 | p90 | p95 | p99 | p99.9 | p999 | mean | min | max   (latency metrics only)
              | time_to_ready | first_ttft | first_e2e        (cold start: a time, no statistic)
              | first_ttft_ratio | first_e2e_ratio | requests_to_warm   (cold start: plain numbers)
              | drain_ok | drain_time      (a drain on shutdown: 1/0 and a time, no statistic)
              | recovery_s                   (a recovery profile: a time, no statistic)
              | swap_ttft_spike (a time) | swap_failed_requests (a count)  (a swap under load)
    op       := <= | < | >= | >
    unit     := us | ms | s            (latency, cold-start times: required; recovery_s: optional, s)
              | %                      (error_rate, rate_limited, goodput: required)
              | /s                     (throughput: optional)

Every value is normalised: latencies to milliseconds, shares to fractions, throughput to per
second. A share without ``%`` is refused, as a latency without a unit is: ``error_rate<=1`` read
as a fraction is 100 % and can never fail, and read as a percentage it is 1 %; the grammar has
one spelling for a share so that nobody has to guess which. A parse problem raises :class:`~servecheck.errors.UsageError` naming the expression,
with a "did you mean" for a misspelt metric.

The cold-start metrics are judged by ``servecheck accept`` / ``cutover`` with ``--launch`` or
``--cold-start`` (:func:`servecheck.probes.coldstart.cold_start_verdicts`), never by a load run: ``servecheck load
--slo first_ttft<=5s`` is a usage error, and a targets.yaml ``slo:`` list may hold both kinds
(each command takes the ones it measures). ``first_ttft_ratio`` is the first request's TTFT over
the warm median; ``requests_to_warm`` how many requests came before the first warm one.

The drain metrics are judged by ``servecheck drain`` and ``cutover --drain``
(:mod:`servecheck.workflows.drain`), never by a load run, as the cold-start ones are:
``drain_ok`` (alone, it means ``drain_ok>=1``) holds when the drain verdict passed,
``drain_time<=30s`` bounds the time from SIGTERM until the streams were over and the server gone.

The swap metrics are judged by ``servecheck cutover --swap ACTION`` (:mod:`servecheck.probes.swap`),
never by a load run: ``swap_failed_requests`` counts the probe's failed requests,
``swap_ttft_spike`` is the highest per-slice TTFT p95 after the swap less the p95 before it.

Goodput uses the *per-request* reading of the latency SLOs: a request is good when it succeeded
and its own ``ttft`` / ``tpot`` / ``e2e`` (and its own ITL at the SLO's statistic) meet every
latency bound. ``lag`` and ``*_from_intended`` bounds apply per request too.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from servecheck.analysis.stats import RunStats
from servecheck.errors import UsageError, did_you_mean

LATENCY = (
    "ttft",
    "itl",
    "tpot",
    "e2e",
    "ttft_from_intended",
    "e2e_from_intended",
    "lag",
    "ttfr",
    "ttfa",
    "itl_reasoning",
    "itl_answer",
)
# The per-request ITL list each ITL metric reads (itl_answer of a record without reasoning: all).
_ITL_KEYS = {"itl": "itls", "itl_reasoning": "itls_reasoning", "itl_answer": "itls_answer"}
SHARES = ("error_rate", "rate_limited", "goodput")
RATES = ("throughput_tokens", "throughput_requests")
COLD_TIMES = ("time_to_ready", "first_ttft", "first_e2e")  # cold start (coldstart.py), ms
COLD_NUMBERS = ("first_ttft_ratio", "first_e2e_ratio", "requests_to_warm")
COLD = COLD_TIMES + COLD_NUMBERS
DRAIN = ("drain_ok", "drain_time")  # a drain on shutdown (workflows/drain.py): 1/0, ms
# Judged on a load profile's own section (load/workload/phased.py), in seconds: recovery_s is the time a
# recovery profile took to get p95 TTFT back near its pre-overload value.
PROFILE_TIMES = ("recovery_s",)
SWAP_TIMES = ("swap_ttft_spike",)  # a swap under load (probes/swap.py), ms
SWAP_NUMBERS = ("swap_failed_requests",)
SWAP = SWAP_TIMES + SWAP_NUMBERS
# Counts of the whole run (never the steady window's): requests lost to outages.
COUNTS = ("lost_requests",)
# Judged on the agent section (analysis/agent_stats.py), in ms with a statistic: a root session's
# E2E (first send to last answer), and the worst turn's TTFT statistic.
AGENT = ("session_e2e", "turn_ttft")
TIMED = LATENCY + AGENT  # a time with a statistic
METRICS = LATENCY + SHARES + RATES + COLD + DRAIN + PROFILE_TIMES + SWAP + COUNTS + AGENT
STATS = ("p50", "p90", "p95", "p99", "p99.9", "mean", "min", "max")
_STAT_ALIASES = {"p999": "p99.9", "median": "p50", "avg": "mean"}
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}
_EXPR = re.compile(
    r"^\s*(?P<lhs>[A-Za-z_][A-Za-z0-9_.]*)\s*(?P<op><=|>=|<|>|==|=)\s*(?P<num>[-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>[A-Za-z%/]*)\s*$"
)
_LATENCY_UNITS = {"us": 0.001, "µs": 0.001, "ms": 1.0, "s": 1000.0}


def _names() -> list[str]:
    out = [f"{m}_{s}" for m in TIMED for s in STATS]
    return [*out, *SHARES, *RATES, *COLD, *DRAIN, *PROFILE_TIMES, *SWAP, *COUNTS]


@dataclass(slots=True, frozen=True)
class SLO:
    """One parsed SLO. ``bound`` is in ms (latency), a fraction (shares) or per second (rates)."""

    text: str
    metric: str
    stat: str | None
    op: str
    bound: float
    source: str = "cli"

    @property
    def name(self) -> str:
        return f"{self.metric}_{self.stat}" if self.stat else self.metric

    @property
    def unit(self) -> str:
        if (
            self.metric in TIMED
            or self.metric in COLD_TIMES
            or self.metric in SWAP_TIMES
            or self.metric == "drain_time"
        ):
            return "ms"
        if self.metric == "drain_ok":
            return "flag"
        if self.metric in SWAP_NUMBERS:
            return "requests"
        if self.metric in SHARES:
            return "fraction"
        if self.metric in COLD_NUMBERS or self.metric in COUNTS:
            return "x" if self.metric.endswith("_ratio") else "requests"
        if self.metric in PROFILE_TIMES:
            return "s"
        return "/s"

    @property
    def cold(self) -> bool:
        """True for the cold-start metrics (judged by accept/cutover, not by a load run)."""
        return self.metric in COLD

    @property
    def drain(self) -> bool:
        """True for the drain metrics (judged by ``servecheck drain`` / ``cutover --drain``)."""
        return self.metric in DRAIN

    @property
    def profile(self) -> bool:
        """True for the metrics a load profile's section measures (load/workload/phased.py)."""
        return self.metric in PROFILE_TIMES

    @property
    def agent(self) -> bool:
        """True for the agent-session metrics (the agent section judges them)."""
        return self.metric in AGENT

    @property
    def swap(self) -> bool:
        """True for the swap metrics (judged by cutover --swap, not by a load run)."""
        return self.metric in SWAP

    @property
    def per_request(self) -> bool:
        """True for latency SLOs: they also decide whether each request counts as good."""
        return self.metric in LATENCY

    def holds(self, value: float) -> bool:
        return _OPS[self.op](value, self.bound)


@dataclass(slots=True)
class Verdict:
    """An evaluated SLO: what was observed, the bound, and whether it held."""

    slo: SLO
    observed: float | None
    passed: bool
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "slo": self.slo.text,
            "source": self.slo.source,
            "metric": self.slo.name,
            "op": self.slo.op,
            "bound": self.slo.bound,
            "unit": self.slo.unit,
            "observed": None if self.observed is None else round(self.observed, 6),
            "passed": self.passed,
            "note": self.note,
        }

    def line(self) -> str:
        """One human line: ``PASS ttft_p95<=500ms  observed 103.2 ms``."""
        mark = "PASS" if self.passed else "FAIL"
        if self.observed is None:
            seen = "no data"
        elif self.slo.unit == "ms":
            seen = f"{self.observed:.1f} ms"
        elif self.slo.unit == "fraction":
            seen = f"{self.observed * 100:.2f}%"
        elif self.slo.unit == "x":
            seen = f"{self.observed:.2f}x"
        elif self.slo.unit == "requests":
            seen = f"{self.observed:g} requests"
        elif self.slo.unit == "flag":
            seen = "yes" if self.observed else "no"
        elif self.slo.unit == "s":
            seen = f"{self.observed:.1f} s"
        else:
            seen = f"{self.observed:.2f}/s"
        note = f" ({self.note})" if self.note else ""
        return f"{mark} {self.slo.text}  observed {seen}{note}  [{self.slo.source}]"


def parse_slo(text: str, source: str = "cli") -> SLO:
    """Parse one SLO expression; raise :class:`UsageError` with a hint when it is wrong."""
    if text.strip() == "drain_ok":  # a flag: alone it is the bound that it holds
        return SLO(text="drain_ok", metric="drain_ok", stat=None, op=">=", bound=1.0, source=source)
    m = _EXPR.match(text)
    if not m:
        raise UsageError(
            f"SLO {text!r}: cannot parse; write METRIC[_STAT] OP NUMBER[UNIT], e.g. ttft_p95<=500ms or error_rate<=0.5%"
        )
    lhs, op, num, unit = m.group("lhs"), m.group("op"), float(m.group("num")), m.group("unit")
    if op in ("==", "="):
        raise UsageError(
            f"SLO {text!r}: use one of <=, <, >=, > (an SLO is a bound, not an equality)"
        )
    metric, stat = _split(lhs, text)
    if metric in TIMED or metric in COLD_TIMES or metric in SWAP_TIMES or metric == "drain_time":
        if unit not in _LATENCY_UNITS:
            hint = (
                "add a unit: us, ms or s"
                if not unit
                else f"unit {unit!r} is not a time unit (us, ms, s)"
            )
            raise UsageError(f"SLO {text!r}: {hint}")
        bound = num * _LATENCY_UNITS[unit]
    elif metric in SHARES:
        if not unit:
            raise UsageError(f"SLO {text!r}: {_share_hint(lhs, op, num)}")
        if unit != "%":
            raise UsageError(f"SLO {text!r}: {metric} takes a percentage (0.5%), not {unit!r}")
        bound = num / 100.0
        if not 0.0 <= bound <= 1.0:
            raise UsageError(f"SLO {text!r}: {metric} must be between 0% and 100%")
    elif metric in COUNTS:
        if unit not in ("", "requests") or num != int(num):
            raise UsageError(
                f"SLO {text!r}: {metric} is a whole number of requests; write e.g. {metric}<=50"
            )
        bound = num
    elif metric == "drain_ok":
        if unit or num not in (0.0, 1.0):
            raise UsageError(f"SLO {text!r}: drain_ok is 1 or 0; write drain_ok (or drain_ok>=1)")
        bound = num
    elif metric in PROFILE_TIMES:  # the name says seconds: a bare number is seconds
        if unit not in ("", *_LATENCY_UNITS):
            raise UsageError(f"SLO {text!r}: {metric} is a time; write e.g. {metric}<=30s")
        bound = num * _LATENCY_UNITS.get(unit or "s", 1000.0) / 1000.0
    elif metric in SWAP_NUMBERS:
        if unit != "":
            raise UsageError(f"SLO {text!r}: {metric} is a count; write e.g. {metric}<=0")
        bound = num
    elif metric in COLD_NUMBERS:
        if unit not in ("", "x"):
            raise UsageError(
                f"SLO {text!r}: {metric} is a plain number; write e.g. "
                f"{metric}<={'10' if metric.endswith('_ratio') else '5'}"
            )
        bound = num
    else:
        if unit not in ("", "/s"):
            raise UsageError(f"SLO {text!r}: {metric} is per second; write e.g. {metric}>=100/s")
        bound = num
    if bound < 0 or math.isnan(bound):
        raise UsageError(f"SLO {text!r}: the bound must not be negative")
    return SLO(text=text.strip(), metric=metric, stat=stat, op=op, bound=bound, source=source)


def _share_hint(metric: str, op: str, num: float) -> str:
    """What to write for a share given as a bare number: both readings where both are possible."""
    pct = f"{metric}{op}{num:.10g}%"
    if num > 1:  # no fraction is above 1: it can only be a percentage
        return f"a share needs %: write {pct}"
    return (
        f"a share needs %: write {pct}, or {metric}{op}{num * 100:.10g}% "
        f"if {num:.10g} was a fraction"
    )


def _split(lhs: str, text: str) -> tuple[str, str | None]:
    if lhs in SHARES + RATES + COLD + DRAIN + PROFILE_TIMES + SWAP + COUNTS:
        return lhs, None
    if lhs in TIMED:
        raise UsageError(
            f"SLO {text!r}: {lhs} needs a statistic, e.g. {lhs}_p95 (one of {', '.join(STATS)})"
        )
    metric, _, stat = lhs.rpartition("_")
    stat = _STAT_ALIASES.get(stat, stat)
    if metric in TIMED and stat in STATS:
        return metric, stat
    if metric in TIMED:
        raise UsageError(
            f"SLO {text!r}: unknown statistic {stat!r}{did_you_mean(stat, STATS)}; use one of {', '.join(STATS)}"
        )
    if metric in COLD or metric in DRAIN:
        what = "one cold start" if metric in COLD else "one drain"
        raise UsageError(f"SLO {text!r}: {metric} takes no statistic ({what}, one value)")
    if metric in SWAP:
        raise UsageError(f"SLO {text!r}: {metric} takes no statistic (one swap, one value)")
    if metric in SHARES or metric in RATES:
        raise UsageError(
            f"SLO {text!r}: {metric} takes no statistic; write e.g. {metric}{'<=0.5%' if metric in ('error_rate', 'rate_limited') else '>=95%' if metric == 'goodput' else '>=100/s'}"
        )
    # 'tfft_p95': the metric is 'tfft'; 'first_tft': no statistic there, the whole name is.
    base = metric if metric and stat in STATS else lhs
    guess = did_you_mean(lhs, _names()) or did_you_mean(base, METRICS)
    raise UsageError(f"SLO {text!r}: unknown metric {base!r}{guess}; metrics: {', '.join(METRICS)}")


def parse_slos(texts: Iterable[str], source: str = "cli") -> list[SLO]:
    """Parse several expressions; a comma inside one argument also separates SLOs."""
    out: list[SLO] = []
    for text in texts:
        for part in str(text).split(","):
            if part.strip():
                out.append(parse_slo(part, source))
    return out


def as_slos(items: Iterable[SLO | str], source: str = "cli") -> list[SLO]:
    """SLOs as a spec holds them: parsed ones kept, expressions parsed here, once."""
    out: list[SLO] = []
    for item in items:
        out += [item] if isinstance(item, SLO) else parse_slos([item], source)
    return out


def reject_cold(slos: Iterable[SLO], where: str = "servecheck load") -> None:
    """A cold-start SLO given to a command that does not measure a cold start: a usage error."""
    for slo in slos:
        if slo.drain and slo.source == "cli":
            raise UsageError(
                f"SLO {slo.text!r}: a drain SLO, which {where} does not measure; give it to "
                "servecheck drain (or a cutover with its drain step) as a drain SLO"
            )
        if slo.cold and slo.source == "cli":
            raise UsageError(
                f"SLO {slo.text!r}: a cold-start SLO, which {where} does not measure; give it to "
                "servecheck accept / cutover as --cold-start-slo with --launch CMD or --cold-start"
            )
        if slo.swap and slo.source == "cli":
            raise UsageError(
                f"SLO {slo.text!r}: a swap SLO, which {where} does not measure; servecheck "
                "cutover judges it, with a swap of its own to do"
            )


def observed(slo: SLO, stats: RunStats) -> float | None:
    """The value of ``slo``'s metric in ``stats`` (ms, fraction or per second); None for the
    cold-start, drain, swap and profile metrics, which the run's statistics do not hold (a
    profile's section, drain and cutover judge those)."""
    if slo.cold or slo.swap or slo.drain or slo.profile or slo.agent:
        return None
    if slo.metric in LATENCY:
        dist = stats.latency.get(slo.metric)
        return None if dist is None or not dist.count else dist.get(slo.stat or "p50")
    if slo.metric == "error_rate":
        return stats.error_rate if stats.total else None
    if slo.metric == "rate_limited":  # shed requests (429 / 503 + Retry-After), not in error_rate
        return stats.rate_limited_rate if stats.total else None
    if slo.metric == "goodput":
        return stats.goodput
    if slo.metric == "lost_requests":  # outages (analysis/outage.py); 0 without one
        return float(stats.lost_requests)
    if slo.metric == "throughput_tokens":
        return stats.tokens_per_s if stats.window_s > 0 else None
    return stats.requests_per_s if stats.window_s > 0 else None


def evaluate(slos: Iterable[SLO], stats: RunStats) -> list[Verdict]:
    """Evaluate each SLO against the run's statistics. Missing data fails the SLO."""
    verdicts: list[Verdict] = []
    for slo in slos:
        value = observed(slo, stats)
        if value is None:
            verdicts.append(Verdict(slo, None, False, "no successful request measured this"))
        else:
            verdicts.append(Verdict(slo, value, slo.holds(value)))
    return verdicts


def _request_value(slo: SLO, rec: Mapping[str, Any]) -> float | None:
    m = slo.metric
    lag = float(rec.get("t_sent", 0.0)) - float(rec.get("t_intended", rec.get("t_sent", 0.0)))
    if m == "lag":
        return lag * 1000.0
    if m in _ITL_KEYS:
        key = _ITL_KEYS[m]
        if key == "itls_answer" and key not in rec:
            key = "itls"  # no reasoning: every ITL is an answer ITL
        itls = sorted(rec.get(key) or ())
        if not itls:
            return None
        if slo.stat == "mean":
            return 1000.0 * sum(itls) / len(itls)
        if slo.stat == "min":
            return 1000.0 * itls[0]
        if slo.stat == "max":
            return 1000.0 * itls[-1]
        q = float((slo.stat or "p50")[1:]) / 100.0
        return 1000.0 * itls[max(0, math.ceil(q * len(itls)) - 1)]
    base = m.removesuffix("_from_intended")
    v = rec.get(base)
    if m == "ttfa" and v is None:
        if "itls_reasoning" in rec or rec.get("ttfr") is not None:
            return math.inf  # it reasoned and never answered: no TTFA bound is met
        v = rec.get("ttft")  # a record without reasoning (or from before ttfa): its TTFT
    if v is None:
        return None
    return 1000.0 * (float(v) + (lag if m.endswith("_from_intended") else 0.0))


def request_predicate(slos: Iterable[SLO]) -> Callable[[Mapping[str, Any]], bool] | None:
    """A function telling whether one record meets every per-request (latency) SLO.

    A request with no value for a bounded metric (e.g. no ITL for a one-token answer) is not held
    against that bound. Returns None when no SLO is per-request (goodput = success share).
    """
    latency = [s for s in slos if s.per_request]
    if not latency:
        return None

    def good(rec: Mapping[str, Any]) -> bool:
        for slo in latency:
            v = _request_value(slo, rec)
            if v is not None and not slo.holds(v):
                return False
        return True

    return good
