"""Summary sections for production-like scenarios: TTFT by turn, prefix-cache hit rates.

Computed in one pass over the merged records (nothing kept but histograms per group), added to
``summary.json`` only when the records carry the fields (``turn``, ``cached_tokens``,
``prefix_group``), so plain chat runs keep their summary as it was.

* ``turns``: per 0-based turn index, request count, errors, TTFT and E2E (HDR, ms), mean prompt
  and history tokens and the cache hit rate of that turn; plus the number of conversations.
* ``prefix_cache``: the client's view from ``usage.prompt_tokens_details.cached_tokens``:
  ``hit_rate`` (cached prompt tokens / prompt tokens, over requests that reported it),
  ``requests_reporting``, ``requests_hit``, and TTFT of requests with a cached prefix vs without.
  Engines that do not report ``cached_tokens`` leave those empty; the split
  ``ttft_first_of_group_ms`` / ``ttft_later_in_group_ms`` (the first request of each prefix
  group or conversation seen by the run vs the rest) still shows what a cache did.
  ``engine``: the engine's own counters over the run (``engine-prefix-cache.json``, written by
  the load command from /metrics before and after), when it exposes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.analysis.sections import Brief, PrefixCache, TurnRow, Turns
from servecheck.analysis.stats import Histogram, add_fields, pack_fields, unpack_fields

ENGINE_FILE = "engine-prefix-cache.json"
MAX_TURN_ROWS = 64  # turns past this share the last row ("64+")


@dataclass(slots=True)
class Group:
    """Requests of one kind (a turn, cached or not, warm-up): counts, TTFT / E2E, token means."""

    count: int = 0
    errors: int = 0
    ttft: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)
    prompt_sum: int = 0
    prompt_n: int = 0
    history_sum: int = 0
    history_n: int = 0
    cached_sum: int = 0
    cached_prompt_sum: int = 0

    def add(self, r: Mapping[str, Any]) -> None:
        self.count += 1
        if r.get("error"):
            self.errors += 1
            return
        if r.get("ttft") is not None:
            self.ttft.record(float(r["ttft"]))
        if r.get("e2e") is not None and not r.get("abandoned"):
            self.e2e.record(float(r["e2e"]))
        pt = r.get("prompt_tokens")
        if isinstance(pt, int):
            self.prompt_sum += pt
            self.prompt_n += 1
            ct = r.get("cached_tokens")
            if isinstance(ct, int):
                self.cached_sum += ct
                self.cached_prompt_sum += pt
        ht = r.get("history_tokens")
        if isinstance(ht, int):
            self.history_sum += ht
            self.history_n += 1

    def merge(self, other: Group) -> None:
        add_fields(self, other, _GROUP_FIELDS)

    def state(self) -> dict[str, Any]:
        return pack_fields(self, _GROUP_FIELDS)

    @classmethod
    def from_state(cls, d: Mapping[str, Any]) -> Group:
        g = cls()
        unpack_fields(g, d, _GROUP_FIELDS)
        return g

    def row(self) -> TurnRow:
        return TurnRow(
            count=self.count,
            errors=self.errors,
            ttft_ms=_brief(self.ttft),
            e2e_ms=_brief(self.e2e),
            prompt_tokens_mean=round(self.prompt_sum / self.prompt_n, 1) if self.prompt_n else None,
            history_tokens_mean=round(self.history_sum / self.history_n, 1)
            if self.history_n
            else None,
            cache_hit_rate=round(self.cached_sum / self.cached_prompt_sum, 4)
            if self.cached_prompt_sum
            else None,
        )


_GROUP_FIELDS = (
    "count",
    "errors",
    "ttft",
    "e2e",
    "prompt_sum",
    "prompt_n",
    "history_sum",
    "history_n",
    "cached_sum",
    "cached_prompt_sum",
)


def _brief(h: Histogram) -> Brief:
    d = h.summary()
    return Brief(count=d.count, p50=d.get("p50"), p90=d.get("p90"), p99=d.get("p99"), mean=d.mean)


def scenario_sections(
    records: Iterable[Mapping[str, Any]], run_dir: str | Path | None = None
) -> tuple[Turns | None, PrefixCache | None]:
    """summary.json's ``turns`` and ``prefix_cache``, each None where the records (and the
    engine's file) do not support it."""
    turns: dict[int, Group] = {}
    conversations: set[str] = set()
    hit, miss = Group(), Group()
    first, later = Group(), Group()
    seen_groups: set[str] = set()
    reporting = hits = prompt_sum = cached_sum = 0
    grouped = False
    for r in records:
        turn = r.get("turn")
        if isinstance(turn, int):
            turns.setdefault(min(turn, MAX_TURN_ROWS), Group()).add(r)
            if r.get("conversation") or r.get("session"):  # an agent session's turns too
                conversations.add(str(r.get("conversation") or r["session"]))
        group = r.get("prefix_group")
        if group is not None:
            grouped = True
            # The first request of a prefix group (or the first turn of a conversation) cannot
            # find its prefix cached; the rest can. Time order is the merged file's (send time).
            key = str(group)
            if key in seen_groups:
                later.add(r)
            else:
                seen_groups.add(key)
                first.add(r)
        elif isinstance(turn, int):
            grouped = True
            (first if turn == 0 else later).add(r)
        ct, pt = r.get("cached_tokens"), r.get("prompt_tokens")
        if isinstance(ct, int) and not r.get("error"):
            reporting += 1
            if isinstance(pt, int):
                prompt_sum += pt
                cached_sum += ct
            if ct > 0:
                hits += 1
                hit.add(r)
            else:
                miss.add(r)
    by_turn = None
    if turns:
        by_turn = Turns(
            conversations=len(conversations),
            by_turn={
                (f"{t}+" if t == MAX_TURN_ROWS else str(t)): g.row()
                for t, g in sorted(turns.items())
            },
        )
    engine = read_engine_file(run_dir) if run_dir is not None else None
    prefix = None
    if reporting or grouped or engine:
        prefix = PrefixCache(
            requests_reporting=reporting,
            requests_hit=hits,
            hit_rate=round(cached_sum / prompt_sum, 4) if prompt_sum else None,
            ttft_cached_ms=_brief(hit.ttft),
            ttft_uncached_ms=_brief(miss.ttft),
            ttft_first_of_group_ms=_brief(first.ttft),
            ttft_later_in_group_ms=_brief(later.ttft),
            engine=engine,
        )
    return by_turn, prefix


def read_engine_file(run_dir: str | Path) -> dict[str, Any] | None:
    """The engine's prefix-cache counters over the run, if the load command could read them."""
    p = Path(run_dir) / ENGINE_FILE
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
