"""User datasets: the formats, their errors, seeded sampling and sizing, and runs on the
reference server (single-turn ``dataset``, ``multi_turn`` following the file's conversations)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.errors import UsageError
from servecheck.load.workload.conversation import ConversationPool
from servecheck.load.workload.dataset import DatasetPrompts, load_dataset, turn_prompt
from servecheck.records.parquet import read_run_records
from servecheck.reference.inprocess import RunningServer
from tests.load.test_load_cli import _cmd, _run, _summary, _targets

SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "first question"},
            {"from": "gpt", "value": "x" * 40},
            {"from": "human", "value": "second question"},
            {"from": "gpt", "value": "y" * 8},
        ],
    },
    {"id": "b", "conversations": [{"from": "gpt", "value": "no user turn: skipped"}]},
    {"id": "c", "conversations": [{"from": "human", "value": "only one"}]},
]


def test_formats_are_read(tmp_path: Path) -> None:
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps(SHAREGPT))
    items = load_dataset(sg)
    assert len(items) == 2
    a = items[0]
    assert a.system == "Be brief." and a.turns == ["first question", "second question"]
    assert a.answer_chars == [40, 8]
    # max_tokens: the reference answer's length (4 chars a token), else the default.
    assert (
        turn_prompt(a, 0, 128).max_tokens == 10 and turn_prompt(items[1], 0, 128).max_tokens == 128
    )
    jl = tmp_path / "p.jsonl"
    jl.write_text(
        '{"prompt": "hello", "max_tokens": 7}\n\n'
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
        + json.dumps(SHAREGPT[0])
        + "\n"
    )
    items = load_dataset(jl)
    assert [i.turns for i in items] == [["hello"], ["hi"], ["first question", "second question"]]
    assert items[0].max_tokens == 7


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"prompt": 5}\n', ":1: prompt must be a string"),
        ('{"x": 1}\n', ":1: needs conversations (ShareGPT), messages or prompt"),
        ("not json\n", ":1: not a JSON object"),
        ('{"prompt": "a", "max_tokens": 0}\n', "max_tokens must be a positive integer"),
        ('{"conversations": [{"from": "robot", "value": "a"}]}\n', "a turn needs from/role"),
        ('{"prompt": ""}\n', "no record with a user turn"),
        ("[1, 2]", "record 0: a record must be a JSON object"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(text)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_dataset(p)


def test_sampling_is_seeded_and_sized_and_kept_inside_the_context(tmp_path: Path) -> None:
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps({"prompt": "w " * (i + 1)}) + "\n" for i in range(50)))
    items = load_dataset(p)
    a = DatasetPrompts.build(items, seed=1, sample=10, count=None, context_length=None)
    b = DatasetPrompts.build(items, seed=1, sample=10, count=None, context_length=None)
    c = DatasetPrompts.build(items, seed=2, sample=10, count=None, context_length=None)
    assert [i.turns for i in a.items] == [i.turns for i in b.items] != [i.turns for i in c.items]
    counted = DatasetPrompts.build(
        items, seed=1, sample=50, count=lambda t: len(t.split()), context_length=None
    )
    assert counted.method == "tokenize"
    assert all(
        n == len(i.turns[0].split())
        for i, n in zip(counted.items, counted.first_tokens, strict=True)
    )
    small = DatasetPrompts.build(
        items,
        seed=1,
        sample=50,
        count=lambda t: len(t.split()),
        context_length=16 + 8 + 30,
        default_max_tokens=8,
    )
    assert small.dropped_for_context == 50 - 30 and max(small.first_tokens) <= 30
    with pytest.raises(UsageError, match="no dataset record fits"):
        DatasetPrompts.build(items, seed=1, sample=50, count=None, context_length=20)


def test_a_dataset_conversation_follows_its_own_turns(tmp_path: Path) -> None:
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps(SHAREGPT))
    item = load_dataset(sg)[0]
    pool = ConversationPool(
        turns=8,
        think_s=0,
        pick=lambda rng: pytest.fail("a dataset conversation never draws from the mix"),
        opener=lambda rng: (item.system, [turn_prompt(item, k, 64) for k in range(2)]),
    )
    import random

    rng = random.Random(0)
    r0 = pool.checkout(0.0, rng)
    assert r0.messages[0] == {"role": "system", "content": "Be brief."}
    assert r0.messages[1]["content"].endswith("first question")
    pool.checkin(r0, True, "server reply", {"prompt_tokens": 9, "completion_tokens": 2}, 0.0)
    r1 = pool.checkout(0.0, rng)
    assert [m["content"] for m in r1.messages[2:]] == ["server reply", "second question"]
    pool.checkin(r1, True, "r2", None, 0.0)
    assert pool.completed == 1  # two turns in the file: the conversation ends there


@pytest.mark.slow
def test_dataset_runs_on_the_reference_server(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    server = make_reference(ttft_ms=5, itl_ms=1, max_model_len=2048)
    targets = _targets(tmp_path, server)
    data = tmp_path / "sg.json"
    convs = [
        {
            "conversations": sum(
                (
                    [
                        {"from": "human", "value": f"q{i} {k} " * 5},
                        {"from": "gpt", "value": "a " * 10},
                    ]
                    for k in range(1 + i % 3)
                ),
                [],
            )
        }
        for i in range(12)
    ]
    data.write_text(json.dumps(convs))
    out = tmp_path / "single"
    proc = _run(
        _cmd(targets, out, "--scenario", "dataset", "--users", "2", "--max-requests", "10")
        + ["--dataset", str(data), "--dataset-format", "sharegpt"]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["requests"]["ok"] == 10 and s["prompt_method"].startswith("tokenize:")
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    cfg = json.loads((run_dir / "load-config.json").read_text())
    assert cfg["dataset"] == str(data.resolve()) and cfg["dataset_format"] == "sharegpt"
    # A plan's dataset: (relative to the plan's folder) and warmup: keys, multi-turn.
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "data.json").write_text(json.dumps(convs))
    plan = plans / "mine.yaml"
    plan.write_text(
        "scenario: multi_turn\nusers: 2\nmax_requests: 16\n"
        "dataset: {path: data.json, format: sharegpt}\nwarmup: {requests: 3}\n"
    )
    out = tmp_path / "multi"
    proc = _run(_cmd(targets, out, "--plan", str(plan)), env={"SERVECHECK_TURNS": "8"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    s = _summary(out)
    assert s["warmup"]["requests"] == 3 and s["requests"]["total"] == 16
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    recs = list(read_run_records(run_dir))
    turns: dict[str, int] = defaultdict(int)
    for r in recs:
        turns[r["conversation"]] = max(turns[r["conversation"]], r["turn"])
    assert max(turns.values()) <= 2  # the file's conversations have 1 to 3 user turns
    # The variable still names the file (it is --dataset's default, and plain locust's way).
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": 5}\n')
    proc = _run(
        _cmd(targets, tmp_path / "bad", "--scenario", "dataset", "--users", "1")
        + ["--max-requests", "1"],
        env={"SERVECHECK_DATASET": str(bad)},
    )
    assert proc.returncode == 2 and f"{bad}:2: prompt must be a string" in proc.stderr, proc.stderr
    assert not (tmp_path / "bad").exists()  # nothing ran, no run folder


def usage_error(tmp_path: Path, *args: str) -> str:
    """``servecheck ARGS``: must be a usage error (rc 2, no traceback); its stderr, one line."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "servecheck", *args, "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "r").exists()  # before any traffic: not even a run folder
    return " ".join(proc.stderr.split())


@pytest.mark.parametrize("command", ["load", "capacity", "accept"])
def test_a_bad_dataset_is_a_usage_error_before_any_traffic(tmp_path: Path, command: str) -> None:
    load = ["--users", "1", "--max-requests", "1"] if command == "load" else []
    run = [command, "--target", "reference", *load, "--scenario", "dataset"]
    missing = tmp_path / "missing.jsonl"
    assert f"--dataset '{missing}': file not found" in usage_error(
        tmp_path, *run, "--dataset", str(missing)
    )
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert f"{empty}: empty file" in usage_error(tmp_path, *run, "--dataset", str(empty))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"messages": [{"role": "user", "content": "hi"}]}\n')
    assert f"{bad}:2: not a prompt record" in usage_error(
        tmp_path, *run, "--dataset", str(bad), "--dataset-format", "prompt"
    )
    assert "the dataset scenario needs --dataset FILE" in usage_error(tmp_path, *run)


def test_plan_dataset_and_warmup_keys_are_checked(tmp_path: Path) -> None:
    from servecheck.load.plan import load_plan

    def plan(text: str) -> dict:
        p = tmp_path / "p.yaml"
        p.write_text(text)
        return load_plan(p).values

    v = plan("dataset: d.jsonl\nwarmup: 10s\n")
    assert v["dataset"] == {"path": str(tmp_path.resolve() / "d.jsonl"), "format": "auto"}
    assert v["warmup"] == {"seconds": 10.0, "requests": None}
    v = plan("dataset: {path: /x/d.json, format: sharegpt}\nwarmup: {seconds: 5, requests: 20}\n")
    assert v["dataset"] == {"path": "/x/d.json", "format": "sharegpt"}
    assert v["warmup"] == {"seconds": 5.0, "requests": 20}
    for text, message in (
        ("dataset: {path: d, fromat: x}\n", "unknown key 'fromat' (did you mean \"format\"?)"),
        ("dataset: {path: d, format: csv}\n", "dataset.format 'csv'"),
        ("dataset: [a]\n", "dataset: a file path"),
        ("warmup: {request: 3}\n", "unknown key 'request' (did you mean \"requests\"?)"),
        ("warmup: {requests: -1}\n", "warmup.requests: a whole number >= 0"),
        ("warmup: soon\n", "warmup.seconds"),
    ):
        with pytest.raises(UsageError) as err:
            plan(text)
        assert message in str(err.value) and str(tmp_path / "p.yaml") in str(err.value)
