"""``servecheck soak --mix``: cycles take turns over the members of a mix, and a leak names the
member whose own cycles leak (issue 45 item 3).

The proof is the reference server's ``error-path-leak`` fault: every request it refuses with a
4xx keeps one KV block for good, and nothing else leaks. ``--mix chat,errors`` against it is a
LEAK on ``kv_usage`` named on ``errors`` and not on ``chat`` (exit 1); against the clean server
it passes (exit 0). Tiny plans (tests/soak/support.py); no timing is asserted.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servecheck.commands.soak import add_arguments, plan_from_args
from servecheck.config.model import Target
from servecheck.errors import UsageError
from servecheck.load.soak import SoakPlan
from servecheck.load.workload.soak_mix import MEMBERS, MixContext, parse_mix
from servecheck.reference.inprocess import RunningServer
from servecheck.telemetry.attribution import attribute
from servecheck.telemetry.leak import Cycle, LeakVerdict, Phases
from tests.soak.support import TINY, run_soak, soak, write_targets
from tests.soak.test_soak_junit import read_cases

# 512 blocks: a cycle of 3 chat streams holds ~20 of them (kv_usage ~0.04, above the 0.02
# tolerance), and the ~45 refusals of an errors cycle (paced 0.1 s a worker) leak ~45: five
# errors cycles stay well below the ceiling, so the leak shows as a trend, not saturation.
SERVER = {"kv_blocks": 512, "ttft_ms": 5, "itl_ms": 5}
# A member is judged on the step of each of its cycles, and a drain window with fewer than 3
# samples costs two steps (its own and the next cycle's): 1.1 s windows at 0.1 s keep every step
# readable on a busy machine, where TINY's 0.6 s once lost one.
MIX = ["--mix", "chat,errors", "--no-rss", "--idle", "1.5s"]


def _plan(*argv: str, target: Target | None = None) -> SoakPlan:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--cycles", "5", "--cycle", "2s", "--idle", "2s", "--interval", "0.1s", "--no-rss", *argv]
    )
    target = target or Target(name="t", base_url="http://127.0.0.1:9/v1", context_length=512)
    return plan_from_args(args, target, "m")


def test_a_mix_gives_every_member_its_cycles_and_the_plan_grows_with_it() -> None:
    alone, mixed = _plan(), _plan("--mix", "chat,errors,cancel")
    assert alone.mix == ("chat",) and alone.total_cycles == 5
    assert mixed.mix == ("chat", "errors", "cancel") and mixed.total_cycles == 15
    assert [mixed.member_of(i) for i in range(1, 7)] == ["chat", "errors", "cancel"] * 2
    # baseline 2 s + cycles x (2 s load + 2 s idle): three members, three times the cycles
    assert (alone.planned_s(), mixed.planned_s()) == (2 + 5 * 4, 2 + 15 * 4)
    with pytest.raises(UsageError, match=r"the plan takes 62 s, more than max_total_s 30 s"):
        _plan("--mix", "chat,errors,cancel", "--max-total", "30s")


@pytest.mark.parametrize(
    "argv,message",
    [
        pytest.param(
            ["--mix", "chat,bogus"], "--mix: unknown member 'bogus' (members: chat, ", id="unknown"
        ),
        pytest.param(["--mix", "chat,chat"], "--mix 'chat,chat': a member named twice", id="twice"),
        pytest.param(["--mix", "chat,"], "--mix 'chat,': name members separated", id="empty"),
        pytest.param(
            ["--mix", "chat,cancel", "--abandon"],
            "--mix member `cancel` drops streams in cycles of its own; --abandon drops",
            id="cancel-and-abandon",
        ),
    ],
)
def test_a_bad_mix_is_a_usage_error_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    targets = write_targets(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9")
    code = soak(targets, *TINY, "--model", "m", "--no-rss", *argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"servecheck soak: error: {message}"), err
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    "member,target,why",
    [
        pytest.param(
            "tools",
            {"capabilities": {"tools": False}},
            "member `tools` (a forced tool call) cannot run: the target declares "
            "capabilities.tools: false (no tool calls)",
            id="tools-declared-off",
        ),
        pytest.param(
            "json",
            {"capabilities": {"json_schema": False}},
            "member `json` (a JSON-schema response_format) cannot run: the target declares "
            "capabilities.json_schema: false",
            id="json-declared-off",
        ),
        pytest.param(
            "images",
            {},
            "member `images` (a generated PNG in each request) cannot run: the target does not "
            "declare capabilities.vision: true",
            id="images-without-vision",
        ),
        pytest.param(
            "reasoning",
            {},
            "member `reasoning` (the chat on a reasoning model) cannot run: the target has no "
            "reasoning block",
            id="reasoning-without-block",
        ),
        pytest.param(
            "errors",
            {"context_length": 10_000_000},
            "member `errors` (over-long prompts and malformed requests, each refused with a 4xx) "
            "cannot run: its context of 10000000 tokens is above 262144",
            id="errors-huge-context",
        ),
    ],
)
def test_a_member_the_target_cannot_serve_is_refused_up_front(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    member: str,
    target: dict[str, Any],
    why: str,
) -> None:
    """The command exits 2 with one line naming the member and why, before any request (the
    target's port 9 has nothing listening)."""
    more = "".join(f"    {k}: {json.dumps(v)}\n" for k, v in target.items())
    targets = write_targets(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9", more)
    code = soak(targets, *TINY, "--mix", f"chat,{member}", "--model", "m", "--no-rss")
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(f"servecheck soak: error: --mix: {why}"), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_every_member_makes_a_body_and_the_errors_member_both_kinds() -> None:
    ctx = MixContext("m", 16, 10, {}, context_length=100, thinking_on={"think": True})
    for name, member in MEMBERS.items():
        body = member.body(ctx, 0)
        assert body["model"] == "m" and body["stream"] is True, name
    over, malformed = MEMBERS["errors"].body(ctx, 0), MEMBERS["errors"].body(ctx, 1)
    assert len(over["messages"][0]["content"].split()) > 100  # a word is at least a token
    assert not isinstance(malformed["messages"], list)
    assert MEMBERS["tools"].body(ctx, 0)["tool_choice"]["function"]["name"] == "get_weather"
    assert MEMBERS["json"].body(ctx, 0)["response_format"]["type"] == "json_schema"
    assert MEMBERS["reasoning"].body(ctx, 0)["think"] is True
    assert parse_mix(None) == ("chat",) and parse_mix(["errors"]) == ("errors",)


def _frame(levels: list[float], per_cycle: int = 6) -> tuple[Any, Phases]:
    """A kv_usage series: a baseline at 0, then per cycle a load spike and a drain at its level."""
    import pandas as pd

    rows, cycles, t = [], [], 0.0
    rows += [{"t": t + k, "value": 0.0, "metric": "kv_usage", "kind": "sample"} for k in range(5)]
    t = 5.0
    for level in levels:
        start = t
        rows += [
            {"t": t + k, "value": 0.5, "metric": "kv_usage", "kind": "sample"} for k in range(3)
        ]
        end = t + 3
        rows += [
            {"t": end + k, "value": level, "metric": "kv_usage", "kind": "sample"}
            for k in range(per_cycle)
        ]
        cycles.append(Cycle(start, end, end + per_cycle - 1, end + 1))
        t = end + per_cycle
    return pd.DataFrame(rows), Phases((0.0, 4.0), cycles)


def test_attribution_names_the_member_whose_steps_rise_not_the_one_that_carries_them() -> None:
    """errors adds 0.05 each of its cycles; chat's cycles carry what errors left (their levels
    rise too) but add nothing: only errors is named."""
    levels, level = [], 0.0
    members = ["chat", "errors"] * 5
    for m in members:
        level += 0.05 if m == "errors" else 0.0
        levels.append(level)
    frame, phases = _frame(levels)
    verdict = LeakVerdict("leak", "kv_usage", "LEAK", 0.02, baseline=0.0, floor=0.005)
    shares = {s.member: s for s in attribute(frame, phases, verdict, members)}
    assert shares["errors"].status == "leak" and shares["chat"].status == "ok", shares
    assert shares["errors"].steps == pytest.approx([0.05] * 5)
    assert shares["chat"].steps == pytest.approx([0.0] * 5)
    assert shares["errors"].p is not None and shares["errors"].p < 0.05
    # The same steps under a run verdict that is not a leak name no member.
    verdict.status = "ok"
    assert all(s.status == "ok" for s in attribute(frame, phases, verdict, members))
    # A drain window without samples (cycle 3, chat's) loses its step and the next (errors')
    # one: four steps cannot reach p < 0.05, so errors is insufficient data, not clean.
    verdict.status = "leak"
    drain3 = phases.cycles[2]
    sparse = frame[~frame["t"].between(drain3.end, drain3.drain_end)]
    shares = {s.member: s for s in attribute(sparse, phases, verdict, members)}
    assert shares["errors"].status == "insufficient_data" and len(shares["errors"].steps) == 4
    assert shares["errors"].message == "4 cycle(s) of `errors` with a step (need 5)"


@pytest.mark.slow
def test_a_leak_on_the_error_path_is_named_on_errors_and_not_on_chat(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference("error-path-leak", **SERVER)
    code, run_dir = run_soak(server, tmp_path, "mixleak", *TINY, *MIX)
    out = " ".join(capsys.readouterr().out.split())
    data = json.loads((run_dir / "soak.json").read_text())
    assert code == 1 and data["verdict"] == "fail", data["failures"]
    assert data["leak"]["kv_usage"]["status"] == "leak", data["leak"]["kv_usage"]["message"]
    reason = "kv_usage: leak on member `errors`"
    members = {m["member"]: m for m in data["members"]}
    assert reason in data["failures"], (data["failures"], members, data["leak"]["kv_usage"])
    assert members["errors"]["leak"]["kv_usage"]["status"] == "leak", members["errors"]
    assert members["chat"]["leak"]["kv_usage"]["status"] == "ok", members["chat"]
    assert members["errors"]["refused"] > 0 and members["errors"]["failed"] == 0, members
    assert members["chat"]["ok"] > 0 and members["chat"]["failed"] == 0, members
    assert [c["member"] for c in data["cycles"]] == ["chat", "errors"] * 5
    # One verdict everywhere: the console, soak.json, junit.xml, report.html and summary.md.
    assert re.search(r"kv_usage LEAK on member `errors`: \+0\.\d+ per cycle over its 5 cycles", out)
    assert "kv_usage ok on member `chat`" in out and f"FAIL {reason}" in out, out
    _, cases = read_cases(run_dir)
    failure = cases["leak kv_usage"].find("failure")
    assert failure is not None and failure.get("message") == reason
    page = " ".join(re.sub(r"<[^>]+>", " ", (run_dir / "report.html").read_text()).split())
    md = (run_dir / "summary.md").read_text()
    assert "| 1 chat | " in md and "| 2 errors | " in md, md  # each cycle's row names its member
    for text in (page, md):
        assert "kv_usage LEAK on member `errors`: +" in text
        assert "kv_usage ok on member `chat`" in text and "LEAK on member `chat`" not in text


@pytest.mark.slow
def test_a_mix_on_the_clean_server_passes(
    make_reference: Callable[..., RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = make_reference(**SERVER)
    code, run_dir = run_soak(server, tmp_path, "mixclean", *TINY, *MIX)
    out = capsys.readouterr().out
    data = json.loads((run_dir / "soak.json").read_text())
    assert code == 0 and data["verdict"] == "pass", (data["failures"], out)
    assert data["leak"]["kv_usage"]["status"] == "ok", data["leak"]["kv_usage"]["message"]
    members = {m["member"]: m for m in data["members"]}
    assert members["errors"]["refused"] > 0 and members["errors"]["failed"] == 0, members
    assert all(m["leak"]["kv_usage"]["status"] == "ok" for m in members.values()), members
    assert "LEAK" not in out, out


def _mix_doc_commands() -> list[list[str]]:
    """The commands of docs/telemetry.md's "Soak mixes" block (past ``servecheck soak``)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "telemetry.md").read_text()
    section = text.split("### Soak mixes", 1)[1].split("\n### ", 1)[0]
    block = section.split("```", 2)[1].replace("\\\n", " ")
    return [
        shlex.split(line)[2:] for line in block.splitlines() if line.startswith("servecheck soak")
    ]


@pytest.mark.parametrize("argv", _mix_doc_commands())
def test_documented_mix_commands_make_valid_plans(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(argv)
    target = Target(name="t", base_url="http://127.0.0.1:9/v1", context_length=512)
    plan = plan_from_args(args, target, "m")
    assert len(plan.mix) > 1 and plan.total_cycles == plan.cycles * len(plan.mix)


def test_the_error_paths_cycles_do_not_count_against_the_load_moving_the_gauge() -> None:
    """A refused request never runs, so an errors cycle leaves kv_usage at baseline by design;
    counted, its load samples halved the share that moved the gauge (a clean chat,errors soak on
    vLLM CPU read 11 of 135, 8 %, under the 10 % the verdict needs, and was INCONCLUSIVE)."""
    import pandas as pd

    from servecheck.load.soak import leak_verdicts

    rows: list[dict[str, Any]] = []
    cycles, t = [], 10.0

    def sample(at: float, value: float) -> None:
        rows.append(
            {
                "t": at,
                "value": value,
                "metric": "kv_usage",
                "kind": "sample",
                "source": "prometheus",
            }
        )

    for k in range(10):
        sample(float(k), 0.0)  # the baseline
    for i in range(10):
        # chat cycles (odd): 2 of 11 load samples (the window holds both ends) show the batch;
        # errors cycles (even): none
        for k in range(10):
            sample(t + k, 0.3 if i % 2 == 0 and k in (3, 4) else 0.0)
        end = t + 10
        for k in range(5):
            sample(end + k, 0.0)
        cycles.append(Cycle(t, end, end + 4, end + 1))
        t = end + 5
    frame, phases = pd.DataFrame(rows), Phases((0.0, 9.0), cycles)
    alone = SoakPlan("m", 10, 10, 5, 9, 1, 2)  # ten chat cycles with these samples
    mixed = SoakPlan("m", 5, 10, 5, 9, 1, 2, mix=("chat", "errors"))
    before, _, _ = leak_verdicts(frame, phases, alone, None)
    after, _, _ = leak_verdicts(frame, phases, mixed, None)
    assert before["kv_usage"].status == "inconclusive", before["kv_usage"].message
    assert "in only 10 of 110 samples under load" in before["kv_usage"].message
    assert after["kv_usage"].status == "ok", after["kv_usage"].message
    assert (after["kv_usage"].moved_samples, after["kv_usage"].load_samples) == (10, 55)
