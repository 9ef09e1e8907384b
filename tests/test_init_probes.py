"""``servecheck init`` decides what it can prove (issue 41): vision only when the answer shows the
image was read, and nothing at all from chat completions that never complete (a warning, and exit
1 under ``--strict``), so that ``init`` then ``check`` judges the server as it is."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from servecheck.cli import main
from servecheck.config import load_targets
from servecheck.reference.hostile import hostile
from servecheck.reference.inprocess import RunningServer

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("vision", "line"),
    [
        pytest.param(
            True,
            "vision: true  # tried a 112x112 image/png (0.2 kB) image_url part: it added 16 "
            "prompt tokens (the model read it)",
            id="vision-model",
        ),
        pytest.param(
            False,
            "vision: false  # tried a 112x112 image/png (0.2 kB) image_url part: HTTP 400",
            id="text-only",
        ),
    ],
)
def test_init_declares_vision_only_when_the_image_was_read_and_check_agrees(
    vision: bool,
    line: str,
    tmp_path: Path,
    make_reference: Callable[..., RunningServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = make_reference(vision=vision)
    targets = tmp_path / "targets.yaml"
    assert main(["init", server.base_url, "--append", str(targets)]) == 0
    out = capsys.readouterr().out
    assert line in out, out
    assert load_targets(targets).get("mine").capabilities.vision is vision
    # IMAGE-REJECTED-TEXT-ONLY and IMAGE-MESSAGES-REJECTED-TEXT-ONLY failed on a vision server
    # that init had not declared; with the entry as init writes it the image surface is green.
    code = main(
        ["check", "--target", "mine", "--targets-file", str(targets), "-n", "0"]
        + ["--surface", "image", "--out", str(tmp_path / "r")]
    )
    assert code == 0, capsys.readouterr().out


def _init(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "servecheck", "init", url, "--timeout", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["endless-sse", "headers-then-stall"])
def test_init_says_when_chat_completions_never_complete(name: str, tmp_path: Path) -> None:
    # max_s: the server outlives every bound of init, so only init's own bounds end it
    with hostile(name, max_s=600) as srv:
        plain = _init(srv.base_url)
        strict = _init(srv.base_url, "--strict", "--append", str(tmp_path / "t.yaml"))
    warning = "servecheck init: warning: chat completions never complete within 2 s ("
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.startswith(warning), plain.stderr
    assert "Traceback" not in plain.stderr + strict.stderr
    # unknown, never false: a false would switch the capability's checks off
    assert "# streaming: unknown (streamed chat completions never complete within 2 s)" in (
        plain.stdout
    )
    assert "# tools: unknown (non-streamed chat completions never complete within 2 s)" in (
        plain.stdout
    )
    assert "streaming: false" not in plain.stdout and "tools: false" not in plain.stdout
    assert strict.returncode == 1, strict.stderr
    assert strict.stderr.startswith(warning), strict.stderr
    assert "--strict: exit 1, nothing appended" in strict.stderr
    assert not (tmp_path / "t.yaml").exists()


@pytest.mark.parametrize(
    ("options", "faults", "line", "surface_passes"),
    [
        pytest.param({}, (), "# reasoning: none found (no reasoning field", None, id="plain"),
        pytest.param(
            {"reasoning": ""},
            (),
            "reasoning: {field: reasoning_content}  # the answer carried `reasoning_content`; "
            "chat_template_kwargs.enable_thinking false stops it",
            True,
            id="reasoning-content",
        ),
        pytest.param(
            {"reasoning": "field=reasoning"},
            (),
            "reasoning: {field: reasoning}  #",
            True,
            id="reasoning-field",
        ),
        pytest.param(
            {"reasoning": ""},
            ("reasoning-off-ignored",),
            "reasoning: {field: reasoning_content, thinking_off: false}  # the answer carried "
            "`reasoning_content`; chat_template_kwargs.enable_thinking false did not stop it",
            True,
            id="switch-ignored",
        ),
        pytest.param(
            {},
            ("reasoning-leak",),
            "reasoning: auto  # the answer's content holds <think> markers",
            False,
            id="no-parser",
        ),
    ],
)
def test_init_discovers_reasoning_and_check_agrees(
    options: dict[str, str],
    faults: tuple[str, ...],
    line: str,
    surface_passes: bool | None,
    tmp_path: Path,
    make_reference: Callable[..., RunningServer],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 43 item 2: reasoning targets declared by ``init``, so the budgets and the REASON
    surface see them; a server without a parser is declared too, and its REASON checks fail."""
    from servecheck.reference.reasoning import parse_spec

    spec = {k: parse_spec(v) for k, v in options.items()}
    server = make_reference(*faults, **spec)
    targets = tmp_path / "targets.yaml"
    assert main(["init", server.base_url, "--append", str(targets)]) == 0
    out = capsys.readouterr().out
    assert line in out, out
    declared = load_targets(targets).get("mine").reasoning
    assert (declared is not None) is (surface_passes is not None)
    if surface_passes is None:
        return
    code = main(
        ["check", "--target", "mine", "--targets-file", str(targets), "-n", "0"]
        + ["--surface", "reason", "--out", str(tmp_path / "r")]
    )
    assert (code == 0) is surface_passes, capsys.readouterr().out
