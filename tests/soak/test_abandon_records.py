"""A stream the soak drops on purpose is stored the way a load run stores one: ``abandoned``
true and no error class, so stats, the down watch and the report read one form."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from pathlib import Path

from servecheck.load.soak import SoakPlan, load_cycle
from servecheck.records.record import RecordWriter, to_dataframe
from servecheck.reference.inprocess import RunningServer
from tests.support import target_for


def test_soak_cycle_stores_a_dropped_stream_as_abandoned_not_as_an_error(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=2, itl_ms=2)
    plan = SoakPlan(
        model="ref-tiny",
        cycles=5,
        cycle_s=0.5,
        idle_s=0.0,
        baseline_s=0.0,
        settle_s=0.0,
        concurrency=2,
        max_tokens=40,
        abandon=True,
        abandon_share=0.5,
        abandon_chunks=2,
    )
    path = tmp_path / "records.jsonl"
    with RecordWriter(path) as writer:
        stats = asyncio.run(load_cycle(target_for(server), plan, 0, writer, itertools.count()))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    dropped = [r for r in rows if r["kind"] == "abandon"]
    assert dropped and stats.abandoned == len(dropped), (stats, rows[:3])
    assert all(r["abandoned"] is True and r["error"] is None for r in dropped), dropped[:3]
    frame = to_dataframe(path)
    assert not frame[frame["kind"] == "abandon"]["ok"].any(), "a dropped stream counted as ok"
