"""``${A:-${B}}`` in targets.yaml: the fallback may itself be a reference, expanded only when
used; an unset innermost name is the same file:line error as a plain ``${VAR}``; a reference
that is not ``${NAME}`` / ``${NAME:-fallback}`` is a file:line error, not text taken as it is.
(The old pattern stopped the fallback at the first ``}``, so ``${A:-${B}}`` with A unset gave
B's value followed by a stray ``}``: a silently wrong URL or key.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from servecheck.config import ConfigError, load_targets


def _file(tmp_path: Path, base_url: str) -> Path:
    path = tmp_path / "targets.yaml"
    path.write_text(
        f"targets:\n  - name: t\n    base_url: '{base_url}'\n    engine: vllm\n    models: [m]\n"
    )
    return path


@pytest.mark.parametrize(
    ("env", "url"),
    [
        pytest.param({"A": "http://a:1/v1", "B": "x"}, "http://a:1/v1", id="outer-set"),
        pytest.param({"B": "http://b:2/v1"}, "http://b:2/v1", id="inner-set"),
        pytest.param({}, "http://c:3/v1", id="innermost-fallback"),
        pytest.param({"C": "c:9"}, "http://c:9/v1", id="reference-inside-text"),
    ],
)
def test_nested_fallbacks_take_the_first_set_value(
    tmp_path: Path, env: dict[str, str], url: str
) -> None:
    value = "${A:-${B:-http://${C:-c:3}/v1}}"
    assert load_targets(_file(tmp_path, value), env=env).get("t").base_url == url


def test_an_unset_inner_name_is_a_file_line_error(tmp_path: Path) -> None:
    path = _file(tmp_path, "${A:-${B}}")
    with pytest.raises(ConfigError) as excinfo:
        load_targets(path, env={}).get("t")
    assert str(excinfo.value) == (
        f"{path}:3: targets[0].base_url: environment variable B is not set"
        " (export it, or write ${B:-} to make it optional)"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("${A:-${B}", "bad variable reference ${A:-... has no closing '}'", id="open"),
        pytest.param(
            "${A-x}", "bad variable reference ${A-...: write ${A} or ${A:-fallback}", id="dash"
        ),
    ],
)
def test_a_malformed_reference_is_a_file_line_error(
    tmp_path: Path, value: str, message: str
) -> None:
    path = _file(tmp_path, value)
    with pytest.raises(ConfigError) as excinfo:
        load_targets(path, env={"A": "http://a:1/v1"}).get("t")
    assert str(excinfo.value) == f"{path}:3: targets[0].base_url: {message}"
