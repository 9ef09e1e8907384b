"""Issue 28 part 5 against the real vLLM CPU with runtime LoRA (``local-vllm-lora``, port 8018).

* The LORA surface: every check passes (each loads ``lora-b`` under a name of its own and
  unloads it).
* ``servecheck cutover --swap lora-load:lora-b=PATH`` under a streamed probe split between the
  base model and ``lora-a`` (loaded at start), then ``lora-unload:lora-b``: each swap's own
  request succeeds and no probe request fails (the swap SLO ``swap_failed_requests<=0``). The
  TTFT spike is measured and recorded, not bounded here (a shared 2-core machine).

An engine that is not up skips with the command that starts it, unless CI listed ``vllm-lora``
in ``SERVECHECK_REQUIRE_ENGINES``: then it fails.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from servecheck.config import load_targets
from tests.engines.test_catalogue import OUT, ROOT, _outcomes, _reachable, _run, _unexpected

ENGINE, TARGET = "vllm-lora", "local-vllm-lora"


@pytest.mark.slow
@pytest.mark.engine(ENGINE)
def test_lora_surface_against_vllm() -> None:
    _reachable(TARGET, ENGINE)
    code, run_dir, output = _run(TARGET, "--surface", "lora")
    outcomes = _outcomes(run_dir)
    assert code == 0 and not _unexpected(outcomes), f"{TARGET}: {outcomes}\n{output}"
    passed = sorted(cid for cid, o in outcomes.items() if o == "passed")
    assert passed == ["LORA-DIFFERS", "LORA-LISTED", "LORA-LOAD-BAD-PATH", "LORA-UNLOAD-404"], (
        outcomes
    )


def _cutover(action: str, run_id: str) -> dict:
    cmd = [sys.executable, "-m", "servecheck", "cutover", "--via", TARGET, "--swap", action]
    cmd += ["--swap-at", "4s", "--duration", "10s", "--rate", "4/s"]
    cmd += ["--probe-model", "servecheck-tiny=1", "--probe-model", "lora-a=1"]
    cmd += ["--swap-slo", "swap_failed_requests<=0", "--max-gap", "5s"]
    cmd += ["--out", str(OUT), "--run-id", run_id]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    data = json.loads((OUT / run_id / "cutover.json").read_text())
    assert proc.returncode == 0, f"{action}: {data.get('reasons')}\n{proc.stderr[-3000:]}"
    return data["parts"]["swap_impact"]


@pytest.mark.slow
@pytest.mark.engine(ENGINE)
def test_lora_swap_under_load_on_vllm() -> None:
    _reachable(TARGET, ENGINE)
    target = load_targets(ROOT / "targets.yaml").get(TARGET)
    adapter = target.lora_adapter
    assert adapter is not None
    # A run that died between its load and its unload left the adapter loaded: unload it first.
    httpx.post(
        target.base_url + "/unload_lora_adapter", json={"lora_name": adapter.name}, timeout=30
    )
    loaded = _cutover(f"lora-load:{adapter.name}={adapter.path}", "vllm-lora-swap-load")
    unloaded = _cutover(f"lora-unload:{adapter.name}", "vllm-lora-swap-unload")
    for part in (loaded, unloaded):
        assert part["outcome"]["ok"] and part["failed"] == 0, part
        assert part["ttft_spike_ms"] is not None, part  # measured (streamed answers both sides)
        assert all(row["failed"] == 0 for row in part["by_model"].values()), part["by_model"]
