"""Synthetic prompts: lengths against a tokenizer, the documented fallback, determinism."""

from __future__ import annotations

from collections.abc import Callable
from random import Random

import pytest

from servecheck.load.workload.prompts import (
    APPROX_METHOD,
    PromptSpec,
    approx_tokens,
    build_prompt_set,
    make_prompt,
    tokenize_counter,
)
from servecheck.reference.inprocess import RunningServer


def _fake_tokenizer(text: str) -> int:
    # a tokenizer that splits words a bit finer than the 4-chars rule assumes
    return round(len(text.split()) * 1.37)


@pytest.mark.parametrize("tokens", [16, 128, 1000, 3000])
def test_tokenizer_path_hits_the_target(tokens: int) -> None:
    text, counted, method = make_prompt(tokens, seed=1, count=_fake_tokenizer)
    assert method == "tokenize"
    assert counted == _fake_tokenizer(text)
    assert abs(counted - tokens) <= max(1, tokens * 0.02), f"asked {tokens}, got {counted}"


def test_fallback_is_the_documented_estimate() -> None:
    text, counted, method = make_prompt(200, seed=2)
    assert method == APPROX_METHOD == "approx:chars-per-token=4.0"
    assert counted == approx_tokens(text) == round(len(text) / 4.0)
    assert abs(counted - 200) <= 20
    failing = make_prompt(200, seed=2, count=lambda _t: None)
    assert failing[2] == APPROX_METHOD


def test_prompt_sets_are_seeded_and_distinct() -> None:
    mix = [PromptSpec(64, 32, weight=3), PromptSpec(256, 64, weight=1, kind="long")]
    a = build_prompt_set(mix, seed=5)
    b = build_prompt_set(mix, seed=5)
    assert [p.text for p in a.prompts] == [p.text for p in b.prompts]
    assert len({p.text for p in a.prompts}) == len(a.prompts) == 8  # variants defeat prefix caching
    picks = [a.pick(Random(0)).kind for _ in range(1)]
    assert picks[0] in {"chat", "long"}
    assert build_prompt_set(mix, seed=6).prompts[0].text != a.prompts[0].text


def test_reference_tokenize_is_detected(make_reference: Callable[..., RunningServer]) -> None:
    server = make_reference()
    counter, flavour = tokenize_counter(server.root, "ref-tiny")
    assert flavour == "vllm" and counter is not None
    ps = build_prompt_set(
        [PromptSpec(100, 16)], seed=0, count=counter, tokenizer=flavour, variants=2
    )
    assert ps.method == "tokenize:vllm"
    assert all(abs(p.prompt_tokens - 100) <= 2 for p in ps.prompts)


def test_llamacpp_tokenize_is_not_mistaken_for_vllm() -> None:
    """llama.cpp answers the vLLM body ({"model", "prompt"}) with {"tokens": []}: that must not pass
    as the vLLM flavour (every prompt would count 0 tokens); its own {"content"} body is used."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            tokens = body.get("content", "").split()  # what llama.cpp does with the body it knows
            data = json.dumps({"tokens": list(range(len(tokens)))}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        counter, flavour = tokenize_counter(f"http://127.0.0.1:{httpd.server_address[1]}", "m")
        assert flavour == "llamacpp" and counter is not None and counter("one two three") == 3
    finally:
        httpd.shutdown()
