"""The tiny models servecheck generates for real engines must pass preflight."""

from __future__ import annotations

from typing import Any

import pytest

from servecheck.preflight import PreflightOptions, Severity, run_preflight

models = pytest.importorskip(
    "servecheck.engines.models", reason="tiny-model generator not in this build"
)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The default spec (the one engines serve), generated once for both artifacts."""
    return models.ensure_tiny_model(models.TinyModelSpec(), out_dir=tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize(
    "artifact", [pytest.param("hf_dir", id="hf-llama"), pytest.param("gguf_path", id="gguf")]
)
def test_generated_tiny_model_passes(tiny_model: Any, artifact: str) -> None:
    spec, model = tiny_model.spec, tiny_model
    options = PreflightOptions(
        quantization="none", context_length=spec.max_position_embeddings, chat=True
    )
    report = run_preflight(getattr(model, artifact), options)
    problems = [f for f in report.findings if f.severity is not Severity.INFO]
    if problems:
        pytest.fail("\n".join(f"{f.severity.value} {f.id} {f.path}: {f.message}" for f in problems))
    if report.weight_bytes <= 0:
        pytest.fail(f"no weight estimate: {report.to_dict()}")
