"""The ``servecheck preflight`` command: pinned table, JSON shape, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servecheck.cli import main

from .builders import to_hf_cache, write_model

JSON_KEYS = {
    "schema",
    "path",
    "layout",
    "model_dir",
    "revision",
    "ok",
    "counts",
    "files_checked",
    "weight_bytes",
    "hashed_bytes",
    "seconds",
    "findings",
}


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    folder = write_model(tmp_path / "model")
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"")
    return folder


def test_human_output_is_pinned(
    broken: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    code = main(["preflight", str(broken), "--context-length", "4096"])
    out = capsys.readouterr().out
    pytest.LineMatcher(out.splitlines()).fnmatch_lines(
        [
            "severity  id * file * problem -> fix*",
            "error     PF-ST-ZERO-BYTE * model-00002-of-00002.safetensors  file is 0 bytes; engines fail on it with `ValueError: 0 bytes read`*",
            "*-> re-download this file (e.g. `hf download <repo> model-00002-of-00002.safetensors*",
            "error     PF-CONFIG-CONTEXT-TOO-LONG  config.json * declared context length 4096 exceeds the model's 2048 (max_position_embeddings 2048);*",
            "*-> declare a context length of 2048 or less*",
            "info      PF-WEIGHT-MEMORY * . * weights need about 64 B (64 bytes of tensors)*",
            f"preflight FAIL: 2 errors, 0 warnings, 1 info | plain | 6 files, 64 B weights | {broken}",
        ],
        consecutive=False,
    )
    if code != 1:
        pytest.fail(f"exit code {code}, expected 1 (error-level findings)")


def test_good_hf_repo_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = to_hf_cache(write_model(tmp_path / "plain"), tmp_path / "hub")
    code = main(["preflight", str(repo), "--verify-sha256", "--quantization", "none"])
    out = capsys.readouterr().out
    pytest.LineMatcher(out.splitlines()).fnmatch_lines(
        [
            f"preflight PASS: 0 errors, 0 warnings, 1 info | hf-cache, revision {'a' * 40} | 6 files, 128 B weights | *"
        ]
    )
    if code != 0:
        pytest.fail(f"exit code {code}, expected 0:\n{out}")


def test_json_shape_is_pinned(broken: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["preflight", str(broken), "--json"])
    doc = json.loads(capsys.readouterr().out)
    if set(doc) != JSON_KEYS:
        pytest.fail(f"top-level keys changed: {sorted(set(doc) ^ JSON_KEYS)}")
    expected = {
        "schema": "servecheck.preflight/1",
        "layout": "plain",
        "revision": None,
        "ok": False,
        "counts": {"error": 1, "warning": 0, "info": 1},
        "files_checked": 6,
        "weight_bytes": 64,
        "hashed_bytes": 0,
    }
    got = {k: doc[k] for k in expected}
    if got != expected:
        pytest.fail(f"Received: {got}\nExpected: {expected}")
    first = doc["findings"][0]
    if (
        set(first) != {"id", "severity", "path", "message", "fix"}
        or first["id"] != "PF-ST-ZERO-BYTE"
    ):
        pytest.fail(f"finding shape changed: {first}")
    if first["path"] != "model-00002-of-00002.safetensors" or first["severity"] != "error":
        pytest.fail(f"finding fields changed: {first}")
    if code != 1:
        pytest.fail(f"exit code {code}, expected 1")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["{tmp}/missing"],
            "servecheck preflight: error: {tmp}/missing: no such file or directory",
            id="nonexistent-path",
        ),
        pytest.param(
            ["{tmp}", "--context-length", "lots"],
            "servecheck preflight: error: --context-length: expected a positive int, got 'lots'",
            id="bad-context-length",
        ),
        pytest.param(
            ["{tmp}", "--gpu-memory-gib", "-1"],
            "servecheck preflight: error: --gpu-memory-gib: expected a positive float, got '-1'",
            id="negative-budget",
        ),
        pytest.param(
            ["{tmp}", "--manifest", "{tmp}/SUMS"],
            "servecheck preflight: error: --manifest {tmp}/SUMS: no such file",
            id="missing-manifest",
        ),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    write_model(tmp_path)
    code = main(["preflight", *(a.format(tmp=tmp_path) for a in argv)])
    captured = capsys.readouterr()
    if code != 2 or captured.err.splitlines() != [message.format(tmp=tmp_path)] or captured.out:
        pytest.fail(
            f"exit {code}\nstderr: {captured.err!r}\nstdout: {captured.out!r}\nexpected: {message}"
        )


def test_help_lists_the_options(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exc:
        main(["preflight", "--help"])
    out = capsys.readouterr().out
    pytest.LineMatcher(out.splitlines()).fnmatch_lines(
        [
            "usage: servecheck preflight *-h* *--quantization METHOD* *--context-length N*",  # [] are fnmatch classes
            "*--json*print the report as JSON*",
            "  --quantization METHOD",
            "*declared method (awq, gptq, fp8, none ...); compared with config.json (env SERVECHECK_PREFLIGHT_QUANTIZATION)",
            "  --chat, --no-chat     the model serves chat: a missing chat template is an error, else a warning (default: True)",
            "*--verify-sha256*",
            "*--manifest FILE*sha256sum-format file*",
        ],
        consecutive=False,
    )
    if exc.value.code != 0:
        pytest.fail(f"--help exited {exc.value.code}")
