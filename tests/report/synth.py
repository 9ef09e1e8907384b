"""Synthetic run folders for the report tests (records.jsonl + summary.json like ``servecheck load``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from servecheck.analysis.stats import Schedule, compute_stats


def synth_records(
    n: int,
    *,
    seed: int,
    ttft_ms: float = 50.0,
    itl_ms: float = 10.0,
    tokens: int = 16,
    sigma: float = 0.25,
    rate: float = 20.0,
    error_share: float = 0.0,
    stream_sigma: float = 0.0,
) -> list[dict[str, Any]]:
    """``n`` requests sent at ``rate``/s with log-normal TTFT and ITL around the given medians.
    ``stream_sigma``: each stream's own log-normal ITL level (a stream batched with long
    prompts is slow throughout), so the ITLs of one request rise and fall together."""
    rng = np.random.default_rng(seed)
    t0 = 1_800_000_000.0
    out: list[dict[str, Any]] = []
    for i in range(n):
        sent = t0 + i / rate
        ttft = float(rng.lognormal(np.log(ttft_ms / 1000), sigma))
        level = float(rng.lognormal(0.0, stream_sigma)) if stream_sigma else 1.0
        itls = [
            level * float(x) for x in rng.lognormal(np.log(itl_ms / 1000), sigma, size=tokens - 1)
        ]
        e2e = ttft + sum(itls)
        failed = rng.random() < error_share
        out.append(
            {
                "target": "synthetic",
                "scenario": "chat",
                "kind": "chat",
                "worker": "w0",
                "seq": i + 1,
                "t_intended": sent,
                "t_sent": sent,
                "t_done": sent + e2e,
                "ttft": None if failed else ttft,
                "e2e": None if failed else e2e,
                "tpot": None if failed else sum(itls) / len(itls),
                "itls": [] if failed else itls,
                "output_tokens": None if failed else tokens,
                "output_tokens_client": 0 if failed else tokens,
                "prompt_tokens": 20,
                "status": 503 if failed else 200,
                "error": "http-503" if failed else None,
                "error_message": "",
            }
        )
    return out


def write_load_run(
    path: Path,
    records: list[dict[str, Any]],
    *,
    target: str = "synthetic",
    users: int | None = 4,
    verdict: str = "pass",
    slo: list[dict[str, Any]] | None = None,
) -> Path:
    """A run folder that the report and compare code read exactly like a ``servecheck load`` run."""
    path.mkdir(parents=True, exist_ok=True)
    with (path / "records.jsonl").open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    stats = compute_stats(records, Schedule(mode="closed"))
    summary = {
        "schema_version": 1,
        "run_id": path.name,
        "target": target,
        "model": "m",
        "scenario": "chat",
        "mode": "closed",
        "users": users,
        "rate": None,
        **stats.as_dict(),
        "slo": slo or [],
        "verdict": verdict,
        "reasons": [],
        "exit_code": 0 if verdict == "pass" else 1,
    }
    (path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return path


def write_check_run(
    path: Path,
    outcomes: dict[str, str],
    *,
    target: str = "t",
    model: str = "m",
    version: str = "1.0",
    messages: dict[str, str] | None = None,
) -> Path:
    """A conformance run folder (results.jsonl + summary.json) with the given check outcomes."""
    path.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "check": c,
            "target": target,
            "model": model,
            "outcome": o,
            "duration_s": 0.01,
            "nodeid": f"x[{target}/{model}/{c}]",
            "message": (messages or {}).get(
                c, f"{c}: failed\n  Expected: a\n  Received: b" if o == "failed" else ""
            ),
        }
        for c, o in outcomes.items()
    ]
    (path / "results.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    counts: dict[str, int] = {}
    for o in outcomes.values():
        counts[o] = counts.get(o, 0) + 1
    summary = {
        "kind": "conformance",
        "exit_status": 1 if "failed" in counts else 0,
        "counts": counts,
        "targets": {target: {"version": version, "models": [model]}},
        "failed": [],
    }
    (path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return path
