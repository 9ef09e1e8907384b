"""EMBED/RERANK cases run on a target's pooling models, CACHE on declared prefix caches (pytester)."""

from __future__ import annotations

from servecheck.checks.discovery import discover
from servecheck.checks.surfaces.text import garbling, mojibake
from tests.support import target_for
from tests.test_plugin import _suite, _targets

pytest_plugins = ["pytester"]


def _run(pytester, server, surface: str, extra: str = ""):
    _targets(pytester, server, extra)
    _suite(pytester, surface)
    return pytester.runpytest(
        "-p", "servecheck.pytest_plugin", "--target", "ref", "--targets-file", "targets.yaml", "-rs"
    )


def test_discovery_finds_the_typed_pooling_models(reference):
    info = discover(target_for(reference))
    assert info.embedding_models == ["ref-embed"]
    assert info.rerank_models == ["ref-rerank"]
    assert "ref-embed" not in info.models


def test_declared_pooling_models_win_over_discovery(reference):
    info = discover(target_for(reference, embedding_models=[], rerank_models=["ref-embed"]))
    assert info.embedding_models == []
    assert info.rerank_models == ["ref-embed"]


def test_embed_cases_run_on_the_embedding_model(pytester, make_reference):
    result = _run(pytester, make_reference(), "EMBED")
    result.assert_outcomes(passed=8)
    result.stdout.no_fnmatch_line("*ref-tiny/EMBED*")


def test_a_target_without_embedding_models_skips_with_the_reason(pytester, make_reference):
    result = _run(pytester, make_reference(), "EMBED", "    embedding_models: []\n")
    result.assert_outcomes(skipped=8)
    result.stdout.fnmatch_lines(
        ["*EMBED: ref serves no embedding model (declare `embedding_models` in targets.yaml*"]
    )


def test_cache_checks_skip_unless_the_target_declares_prefix_cache(pytester, make_reference):
    result = _run(pytester, make_reference(), "CACHE")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["*does not declare capability prefix_cache*"])
    declared = _run(pytester, make_reference(), "CACHE", "    capabilities: {prefix_cache: true}\n")
    declared.assert_outcomes(passed=3)


def test_garbling_detector_accepts_random_valid_text_and_flags_real_garbling():
    # what a random model over a byte-level vocabulary may legitimately produce
    for ok in ("café 你好 東京 🙂", "\ufffd\ufffd tokens", "Ångström £5 ©2026 naïve", "50°C ±1"):
        assert garbling(ok) is None, ok
    assert mojibake("cafÃ© au lait") == ("Ã©", "é")
    assert mojibake("ä½\xa0好") is not None
    assert "raw byte tokens" in (garbling("hello <0xE4><0xBD><0xA0>") or "")
    assert "mojibake" in (garbling("itâ€™s") or "")


def test_langchain_checks_skip_with_the_install_command_without_the_package(reference, monkeypatch):
    import sys

    import pytest

    from servecheck.checks import CheckSkipped, load_all, run_with_allowances
    from tests.support import context_for

    monkeypatch.setitem(sys.modules, "langchain_openai", None)  # import raises ImportError
    ctx = context_for(reference, "CLIENT-LANGCHAIN-INVOKE")
    try:
        with pytest.raises(CheckSkipped, match=r"langchain-openai is not installed \(pip install"):
            run_with_allowances(load_all()["CLIENT-LANGCHAIN-INVOKE"], ctx)
    finally:
        ctx.client.close()


def test_the_local_tokenizer_check_names_the_engines_extra_without_tokenizers(
    reference, monkeypatch
):
    import sys

    import pytest

    from servecheck.checks import CheckSkipped, load_all, run_with_allowances
    from tests.support import context_for

    ctx = context_for(reference, "TEXT-LOCAL-TOKENIZER")  # its model_dir is made with tokenizers
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import raises ImportError
    try:
        with pytest.raises(CheckSkipped) as info:
            run_with_allowances(load_all()["TEXT-LOCAL-TOKENIZER"], ctx)
    finally:
        ctx.client.close()
    assert str(info.value) == (
        "TEXT-LOCAL-TOKENIZER: the tokenizers package is not installed "
        "(pip install 'servecheck[engines]'; pipx: pipx inject servecheck tokenizers)"
    )
