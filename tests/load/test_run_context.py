"""One run context: the typed RunConfig is the one thing that crosses into a Locust process.

It round-trips through its dict form with its parsed parts (lengths, cancel rule, profile,
model mix) typed; its private file is 0600 and holds the secrets; nothing under servecheck/load
writes the environment, and only two SERVECHECK_* names are read there (the config file's path
and the reader's choice). No Locust here: the pure parts, in the pytest process.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from servecheck.load.plan import PlainInputs, RunConfig
from servecheck.load.workload.cancel import CancelRule
from servecheck.load.workload.lengths import Lengths
from servecheck.load.workload.phased import parse_profile

LOAD = Path(__file__).resolve().parents[2] / "servecheck" / "load"


def _config(tmp_path: Path) -> RunConfig:
    return RunConfig(
        run_id="r",
        target="t",
        scenario="chat",
        base_url="http://127.0.0.1:9/v1",
        model="m",
        records_dir=str(tmp_path),
        input_tokens=Lengths(256, 32.0),
        output_tokens=Lengths(64),
        cancel=CancelRule(0.1, "tokens", 8.0),
        profile=parse_profile("burst:n=10,every=5s,for=30s"),
        profile_poisson=True,
        model_mix=[("base", 3.0), ("lora-a", 1.0)],
        api_key="sk-ctx-1234",
        api_key_header="x-api-key",
        web_auth="admin:pw-ctx-5678",
        verify_tls=False,
    )


def test_the_config_round_trips_with_its_parts_typed(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    back = RunConfig.from_dict(cfg.to_dict())
    assert back == cfg, f"Received: {back}\nExpected: {cfg}"
    assert isinstance(back.cancel, CancelRule) and isinstance(back.input_tokens, Lengths)
    assert back.model_mix == [("base", 3.0), ("lora-a", 1.0)]


def test_the_private_file_is_owner_only_and_holds_the_secrets(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    path = cfg.write_private(tmp_path / "ctx.json")
    mode = stat.S_IMODE(path.stat().st_mode)
    assert mode == 0o600, f"Received: {oct(mode)}\nExpected: 0o600"
    back = RunConfig.load(path)
    assert back == cfg
    settings = back.client_settings()
    assert settings.headers["x-api-key"] == "sk-ctx-1234" and settings.verify_tls is False
    # the report's copy: no key, no web password
    text = cfg.dump(tmp_path / "load-config.json").read_text()
    assert "sk-ctx-1234" not in text and "pw-ctx-5678" not in text, text


def test_plain_inputs_take_the_parsed_options_and_keep_defaults() -> None:
    class Parsed:
        servecheck_target = "local"
        servecheck_max_requests = 12
        servecheck_dataset = ""  # an empty variable: the default

    got = PlainInputs.of(Parsed())
    assert (got.target, got.max_requests, got.dataset, got.dataset_sample) == (
        "local",
        12,
        None,
        1000,
    )
    assert PlainInputs.of(None) == PlainInputs()


def _sources() -> list[tuple[str, str]]:
    return [(p.relative_to(LOAD).as_posix(), p.read_text()) for p in sorted(LOAD.rglob("*.py"))]


def test_nothing_under_load_writes_the_environment() -> None:
    write = re.compile(r"os\.environ\[[^]]+\] *=|os\.environ\.update|putenv")
    found = [
        f"{rel}:{n}"
        for rel, text in _sources()
        for n, line in enumerate(text.splitlines(), 1)
        if write.search(line)
    ]
    assert not found, f"the environment written under servecheck/load: {found}"


@pytest.mark.parametrize("allowed", [("SERVECHECK_LOAD_CONFIG", "SERVECHECK_READER")], ids=["two"])
def test_only_two_servecheck_variables_are_named_under_load(allowed: tuple[str, ...]) -> None:
    names = {m for _, text in _sources() for m in re.findall(r"SERVECHECK_[A-Z_]+", text)}
    assert names <= set(allowed), (
        f"Received: {sorted(names)}\nExpected at most: {sorted(allowed)} (user inputs belong in "
        "servecheck/scenarios/_options.py or the run's typed config)"
    )
