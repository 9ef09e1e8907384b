"""Issue 16's surfaces against the real engines that serve them.

* ``local-vllm-embed`` (vLLM pooling runner) and ``local-llamacpp-embed`` (``--embeddings``):
  the EMBED and RERANK checks; the chat surfaces are excluded in targets.yaml (no chat model).
* ``local-vllm-cache`` (``--enable-prompt-tokens-details``): CACHE and TEXT.

Like the catalogue test, a run exits 0 only when every check passes or fails exactly as recorded
in ``known_failures``; an engine that is not up skips with the command that starts it, unless CI
listed it in ``SERVECHECK_REQUIRE_ENGINES``.
"""

from __future__ import annotations

import pytest

from tests.engines.test_catalogue import _outcomes, _reachable, _run, _unexpected

RUNS = {
    "vllm-embed": ("local-vllm-embed", ("embed", "rerank")),
    "llamacpp-embed": ("local-llamacpp-embed", ("embed", "rerank")),
    "vllm-cache": ("local-vllm-cache", ("cache", "text")),
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "engine", [pytest.param(e, marks=pytest.mark.engine(e), id=e) for e in RUNS]
)
def test_new_surfaces_against_engine(engine: str) -> None:
    target, surfaces = RUNS[engine]
    _reachable(target, engine)
    extra = [arg for s in surfaces for arg in ("--surface", s)]
    code, run_dir, output = _run(target, *extra)
    outcomes = _outcomes(run_dir)
    unexpected = _unexpected(outcomes)
    assert code == 0 and not unexpected, f"{target}: unexpected outcomes {unexpected}\n{output}"
    ran = [cid for cid, o in outcomes.items() if o in ("passed", "xfailed")]
    assert ran, f"{target}: nothing ran\n{output}"
