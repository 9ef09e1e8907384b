"""One model discovery (servecheck.client.models) that says what it chose and never guesses."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servecheck.client.models import choose_model, unlisted_model
from servecheck.config.model import Target
from servecheck.errors import SpecError, UsageError
from servecheck.reference.inprocess import RunningServer
from tests.hostile.support import load_cmd

ROOT = Path(__file__).resolve().parents[2]


def test_explicit_then_declared_then_listed(make_reference: Callable[..., RunningServer]) -> None:
    server = make_reference(models=["a-model", "b-model"])
    assert choose_model(server.base_url, {}, explicit="x").source == "given"
    declared = choose_model(server.base_url, {}, declared=["b-model"])
    assert (declared.model, declared.source) == (
        "b-model",
        "the first of the target's models in targets.yaml",
    )
    listed = choose_model(server.base_url, {})
    assert listed.model == "a-model"
    assert (
        listed.line()
        == "model a-model (the first that GET /v1/models lists of 2: a-model, b-model)"
    )


def test_a_failed_listing_is_a_usage_error_not_a_guess() -> None:
    with pytest.raises(
        UsageError, match=r"cannot list models at http://127\.0\.0\.1:9/v1/models.*pass model$"
    ) as info:
        choose_model("http://127.0.0.1:9/v1", {}, timeout_s=2, what="target 'x'")
    # the library names the field; a command shows its option
    assert isinstance(info.value, SpecError)
    assert info.value.render({"model": "--model"}).endswith("pass --model")


def test_no_runner_keeps_its_own_discovery() -> None:
    """The Locust user, the load run, the abandon probe, cutover and cold start all call
    servecheck.client.models."""
    for rel in (
        "servecheck/load/generator/locust_user.py",
        "servecheck/load/run.py",
        "servecheck/probes/abandon.py",
        "servecheck/probes/agreement.py",
        "servecheck/workflows/cutover.py",
        "servecheck/workflows/coldstart.py",
    ):
        text = (ROOT / rel).read_text()
        assert "servecheck.client.models" in text, rel
        assert '"default"' not in text, f"{rel} falls back to a model named 'default'"


def test_records_are_measured_in_one_place() -> None:
    """The Locust user and the probes' request function (soak, abandon, cold start, the swap probe
    and drain read through it) derive TTFT/ITL/TPOT with load.stream.record_from_stream."""
    from servecheck.load.generator.stream import record_from_stream
    from servecheck.records.record import RequestRecord

    for rel in ("servecheck/load/generator/locust_user.py", "servecheck/load/generator/request.py"):
        text = (ROOT / rel).read_text()
        assert "record_from_stream(" in text and "tpot=" not in text, rel
    readers = ("read_stream(", "read_stream_sync(", "stream_chat")
    for rel in (
        "servecheck/load/soak.py",
        "servecheck/probes/abandon.py",
        "servecheck/probes/coldstart.py",
        "servecheck/probes/drain.py",
        "servecheck/probes/swap_probe.py",
    ):
        text = (ROOT / rel).read_text()
        assert any(r in text for r in readers) and "tpot=" not in text, rel
    rec = record_from_stream(
        RequestRecord(target="t", scenario="s", worker="w", seq=1, t_intended=0.0, t_sent=0.0),
        ttft=0.1,
        e2e=0.5,
        token_times=[1.0, 1.1, 1.3],
        usage={"completion_tokens": 5, "prompt_tokens": 7},
    )
    assert rec.itls == pytest.approx([0.1, 0.2]) and rec.output_tokens_client == 3
    assert (rec.output_tokens, rec.prompt_tokens) == (5, 7)
    assert rec.tpot == pytest.approx((0.5 - 0.1) / 4)


class _PoolingFirst(BaseHTTPRequestHandler):
    """Lists an embedding model before the chat model; answers chat with the model it was sent."""

    def _send(self, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(
            {"data": [{"id": "emb-m", "model_type": "embedding"}, {"id": "chat-m", "type": "LLM"}]}
        )

    def do_POST(self) -> None:
        sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        reply = {"role": "assistant", "content": f"answered by {sent['model']}"}
        self._send({"model": sent["model"], "choices": [{"index": 0, "message": reply}]})

    def log_message(self, *args: object) -> None:
        pass


def test_cutover_agreement_never_sends_chat_to_a_pooling_model() -> None:
    """Cutover chose its model with a rule of its own (the first id /models lists, an embedding
    model here); it now uses model_for_target, which skips pooling models."""
    from servecheck.config.model import Target
    from servecheck.probes.agreement import agreement

    server = ThreadingHTTPServer(("127.0.0.1", 0), _PoolingFirst)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        old = Target.model_validate({"name": "old", "base_url": url})
        new = Target.model_validate({"name": "new", "base_url": url})
        agr = agreement(old, new, ["Say hi."], max_tokens=4)
    finally:
        server.shutdown()
        server.server_close()
    assert (agr.old_model, agr.new_model) == ("chat-m", "chat-m")
    assert agr.results[0].old == "answered by chat-m" and agr.errors == 0


def test_plain_locust_with_a_named_target_uses_its_declared_models(tmp_path: Path) -> None:
    """``locust -f`` with SERVECHECK_TARGET (the option ``--servecheck-target``) took the listed model even when targets.yaml
    declares ``models:`` (and listed it without the target's verify_tls): it now goes through
    model_for_target as every other runner does. The target does not listen, so only the
    declared model can answer. In a subprocess: importing locust monkey-patches this one."""
    import os
    import subprocess
    import sys

    (tmp_path / "targets.yaml").write_text(
        "targets:\n  - name: t\n    base_url: http://127.0.0.1:9/v1\n    models: [declared-m]\n"
    )
    code = (  # the variables through Locust's own parser, with the options the scenarios register
        "import types\n"
        "import locust\n"
        "from locust.argument_parser import get_parser\n"
        "import servecheck.scenarios._options\n"
        "from servecheck.load.generator.locust_user import _plain_config\n"
        "from servecheck.load.plan import PlainInputs\n"
        "opts = PlainInputs.of(get_parser().parse_args([]))\n"
        "print(_plain_config(types.SimpleNamespace(host=None), None, opts).model)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SERVECHECK_")}
    env |= {"SERVECHECK_TARGET": "t", "SERVECHECK_TARGETS_FILE": str(tmp_path / "targets.yaml")}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.split()[-1:] == ["declared-m"], done.stderr[-2000:]


def _target(base_url: str) -> Target:
    return Target.model_validate({"name": "ref", "base_url": base_url, "timeout_s": 5})


def test_a_given_model_the_listing_lacks_is_named_with_the_listed_ones(
    make_reference: Callable[..., RunningServer],
) -> None:
    server = make_reference(models=["a-model", "b-model"])
    target = _target(server.base_url)
    assert unlisted_model(target, "b-model", 5) is None
    assert unlisted_model(target, "a-modle", 5) == (
        "model 'a-modle' is not among the models GET /v1/models lists (a-model, b-model, ref-embed, ref-rerank) "
        '(did you mean "a-model"?)'
    )
    assert unlisted_model(target, "nosuch", 5) == (
        "model 'nosuch' is not among the models GET /v1/models lists (a-model, b-model, ref-embed, ref-rerank)"
    )
    # no listing (nothing there): nothing is known about the model, so nothing is said
    assert unlisted_model(_target("http://127.0.0.1:9/v1"), "nosuch", 2) is None


@pytest.mark.slow
def test_load_with_a_model_the_target_does_not_list_says_so(
    make_reference: Callable[..., RunningServer], tmp_path: Path
) -> None:
    """``load --model nosuch`` said only "HTTP 404"; the run says why (issue 41.11)."""
    server = make_reference()  # serves ref-tiny
    targets = tmp_path / "targets.yaml"
    targets.write_text(f"targets:\n  - name: ref\n    base_url: {server.base_url}\n")
    cmd = load_cmd(
        targets,
        tmp_path / "r",
        "--users",
        "1",
        "--max-requests",
        "3",
        "--model",
        "ref-tiyn",
        target="ref",
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (run_dir,) = (tmp_path / "r").iterdir()
    reasons = json.loads((run_dir / "summary.json").read_text())["reasons"]
    unlisted = (
        "model 'ref-tiyn' is not among the models GET /v1/models lists (ref-tiny, ref-embed, ref-rerank) "
        '(did you mean "ref-tiny"?)'
    )
    assert reasons[0] == (
        f"nothing succeeded: 0 of 3 requests ok (3 http-404): the server answered HTTP 404: "
        f"{unlisted}"
    ), reasons
    assert unlisted in proc.stdout, proc.stdout
