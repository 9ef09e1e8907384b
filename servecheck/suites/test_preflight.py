"""Preflight of each target's model files (``model_dir`` in targets.yaml; see docs/preflight.md).

Runs before a launch or a hot swap: zero-byte or truncated shards, broken indexes, dangling
cache links, remote code, quantization and context mismatches. Targets without a
``model_dir`` are skipped with that reason.
"""

import pytest

from servecheck.preflight.runner import preflight_findings_for_target


def test_model_files(sc_target):
    if not sc_target.model_dir:
        pytest.skip(f"{sc_target.name}: no model_dir in targets.yaml, nothing to preflight")
    findings = preflight_findings_for_target(
        sc_target.model_dir, sc_target.quantization, sc_target.context_length
    )
    errors = [f for f in findings if f.severity.value == "error"]
    if errors:
        pytest.fail(
            "\n".join(f"{f.id}: {f.path}: {f.message}\n  Fix: {f.fix}" for f in errors),
            pytrace=False,
        )
