"""targets.yaml: validation errors are one line each, name file:line and key, and hint."""

from __future__ import annotations

import textwrap

import pytest

from servecheck.cli import main
from servecheck.config import ConfigError, load_targets
from servecheck.errors import UsageError
from servecheck.redact import redact


def write(tmp_path, text: str):
    path = tmp_path / "targets.yaml"
    path.write_text(textwrap.dedent(text))
    return path


GOOD = textwrap.dedent("""\
    defaults: {timeout_s: 60}
    targets:
      - name: local-vllm
        base_url: http://127.0.0.1:8011/v1
        api_key: ${VLLM_API_KEY}
        engine: vllm
        models: [tiny-llama]
        capabilities: {streaming: true, json_schema: true, tools: true}
        context_length: 512
        metrics_url: http://127.0.0.1:8011/metrics
        exclude: ["TOOLS-PARALLEL*"]
""")


def test_issue_example_shape_loads(tmp_path):
    targets = load_targets(write(tmp_path, GOOD), env={"VLLM_API_KEY": "sk-abcdef123456"})
    target = targets.get("local-vllm")
    assert target.engine == "vllm"
    assert target.timeout_s == 60
    assert target.capabilities.tools is True
    assert target.server_root == "http://127.0.0.1:8011"
    assert "sk-abcdef123456" not in repr(target)
    assert redact("key sk-abcdef123456 here") == "key *** here"


@pytest.mark.parametrize(
    "text,expected",
    [
        pytest.param(
            GOOD.replace("models:", "modles:"),
            "targets.yaml:7: targets[0].modles: unknown key 'modles' (did you mean \"models\"?)",
            id="unknown-key",
        ),
        pytest.param(
            GOOD.replace("engine: vllm", "engine: vlm"),
            "targets.yaml:6: targets[0].engine: 'vlm' is not one of vllm|sglang|xinference|tgi|llamacpp|ollama|litellm|openai|reference|generic (did you mean \"vllm\"?)",
            id="bad-engine",
        ),
        pytest.param(
            GOOD.replace("http://127.0.0.1:8011/v1", "127.0.0.1:8011/v1"),
            "targets.yaml:4: targets[0].base_url: base_url must be an http:// or https:// URL with a host, got '127.0.0.1:8011/v1'",
            id="bad-url",
        ),
        pytest.param(
            GOOD.replace("context_length: 512", "context_length: lots"),
            "targets.yaml:9: targets[0].context_length: Input should be a valid integer, unable to parse string as an integer (got 'lots')",
            id="wrong-type",
        ),
        pytest.param(
            GOOD.replace("timeout_s: 60", "timeout: 60"),
            "targets.yaml:1: defaults.timeout: unknown key 'timeout' (did you mean \"timeout_s\"?)",
            id="defaults-unknown-key",
        ),
        pytest.param(
            GOOD + "  - name: local-vllm\n    base_url: http://127.0.0.1:9/v1\n",
            "targets.yaml:12: targets[1].name: duplicate target name 'local-vllm' (first at targets[0])",
            id="duplicate",
        ),
        pytest.param("targets: [\n", "targets.yaml:2: invalid YAML:", id="bad-yaml"),
        pytest.param(
            GOOD + '    known_failures: {CHAT-N: "a"}\n    known_failures: {CHAT-SEED: "b"}\n',
            "targets.yaml:13: duplicate key 'known_failures' (first at line 12; YAML keeps only the last)",
            id="duplicate-key",
        ),
        pytest.param(
            "targts: []\n",
            "targets.yaml:1: targts: unknown key 'targts' (did you mean \"targets\"?)",
            id="top-level-typo",
        ),
    ],
)
def test_config_errors_are_pinned(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as excinfo:
        load_targets(path, env={"VLLM_API_KEY": "x" * 8})
    first = str(excinfo.value).splitlines()[0]
    assert first.startswith(f"{tmp_path}/"), first
    assert first.removeprefix(f"{tmp_path}/").startswith(expected), first


def test_missing_env_var_stops_only_the_target_that_needs_it(tmp_path):
    path = write(tmp_path, GOOD + "  - name: other\n    base_url: http://127.0.0.1:9/v1\n")
    targets = load_targets(path, env={})
    assert targets.get("other").name == "other"
    with pytest.raises(ConfigError) as excinfo:
        targets.get("local-vllm")
    assert str(excinfo.value) == (
        f"{path}:5: targets[0].api_key: environment variable VLLM_API_KEY is not set"
        " (export it, or write ${VLLM_API_KEY:-} to make it optional)"
    )


def test_env_default_syntax(tmp_path):
    path = write(tmp_path, GOOD.replace("${VLLM_API_KEY}", "${VLLM_API_KEY:-}"))
    assert load_targets(path, env={}).get("local-vllm").api_key is None


def test_unknown_target_suggests(tmp_path):
    targets = load_targets(write(tmp_path, GOOD), env={"VLLM_API_KEY": "k" * 8})
    with pytest.raises(
        Exception, match=r"no target named 'local-vlm' \(did you mean \"local-vllm\"\?\)"
    ):
        targets.get("local-vlm")


def test_cli_reports_config_error_in_one_line_without_traceback(tmp_path, capsys):
    path = write(tmp_path, GOOD.replace("engine: vllm", "engine: vlm"))
    code = main(["targets", "--targets-file", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(
        f"servecheck targets: error: {path}:6: targets[0].engine: 'vlm' is not one of"
    )
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_missing_file(tmp_path, capsys):
    code = main(["targets", "--targets-file", str(tmp_path / "nope.yaml")])
    assert code == 2
    assert "targets file not found (pass --targets-file or set " in capsys.readouterr().err


def test_missing_file_names_the_field_to_api_callers(tmp_path):
    with pytest.raises(UsageError, match=r"targets file not found \(pass targets_file or set "):
        load_targets(tmp_path / "nope.yaml")


def test_repo_targets_file_is_valid():
    targets = load_targets("targets.yaml", env={})
    assert "reference" in targets.names


def test_redaction_keeps_json_valid_and_the_curl_placeholder():
    import json

    from servecheck.redact import redact

    text = json.dumps(
        {
            "curl": 'curl -H "Authorization: Bearer $API_KEY" -H "Authorization: Bearer sk-live-abcdef"'
        }
    )
    out = redact(text)
    assert (
        json.loads(out)["curl"]
        == 'curl -H "Authorization: Bearer $API_KEY" -H "Authorization: Bearer ***"'
    )


def test_a_targets_slos_are_parsed_once_into_typed_slos(tmp_path):
    from servecheck.analysis.slo import SLO

    text = GOOD + '    slo: ["ttft_p95<=500ms", "error_rate<=1%"]\n'
    target = load_targets(write(tmp_path, text), env={"VLLM_API_KEY": "sk-abcdef123456"}).get(
        "local-vllm"
    )
    assert target.slo == ["ttft_p95<=500ms", "error_rate<=1%"]  # as written, for the JSON
    assert all(isinstance(s, SLO) and s.source == "targets.yaml" for s in target.slos)
    assert [(s.name, s.op, s.bound) for s in target.slos] == [
        ("ttft_p95", "<=", 500.0),
        ("error_rate", "<=", 0.01),
    ]
    assert target.slos is target.slos  # parsed when the target was built, not on each read
