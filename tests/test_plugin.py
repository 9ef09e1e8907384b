"""The pytest plugin as a user meets it: options, outcomes, messages (pytester)."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

pytest_plugins = ["pytester"]


def _count(surface: str) -> int:
    """How many checks a surface has (the suites below run all of one surface)."""
    from servecheck.checks import load_all

    return sum(1 for c in load_all().values() if c.surface == surface)


# usage-sum-wrong breaks CHAT-USAGE-DETAILS too (total != prompt + completion); the tests that
# use it are about one failing check, so they leave that one out.
ONE_USAGE_CHECK = ("-k", "not CHAT-USAGE-DETAILS")

SUITE = textwrap.dedent("""
    from servecheck.checks import run_with_allowances

    SURFACE = "{surface}"


    def test_conformance(sc_case, sc_ctx):
        run_with_allowances(sc_case.check, sc_ctx)
""")


def _targets(pytester, server, extra: str = "") -> None:
    pytester.makefile(
        ".yaml",
        targets=textwrap.dedent(f"""\
        targets:
          - name: ref
            base_url: {server.base_url}
            engine: reference
            models: [ref-tiny]
            context_length: 512
            timeout_s: 10
        """)
        + extra,
    )


def _suite(pytester, surface: str) -> None:
    pytester.makepyfile(**{f"test_{surface.lower()}": SUITE.format(surface=surface)})


def test_failure_names_the_check_and_gives_curl(pytester, make_reference):
    server = make_reference("usage-sum-wrong")
    _targets(pytester, server)
    _suite(pytester, "CHAT")
    result = pytester.runpytest(
        "-p",
        "servecheck.pytest_plugin",
        "--target",
        "ref",
        "--targets-file",
        "targets.yaml",
        *ONE_USAGE_CHECK,
    )
    result.assert_outcomes(passed=_count("CHAT") - 2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_conformance?ref/ref-tiny/CHAT-USAGE?*",
            "CHAT-USAGE: usage.total_tokens is not prompt_tokens + completion_tokens",
            "  Expected: total_tokens == * + * = *",
            "  Received: total_tokens = *",
            "  Reproduce: curl -sS -X POST http://127.0.0.1:*/v1/chat/completions *",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_header_shows_engine_models_context(pytester, make_reference):
    server = make_reference()
    _targets(pytester, server)
    _suite(pytester, "HEALTH")
    result = pytester.runpytest(
        "-p", "servecheck.pytest_plugin", "--target", "ref", "--targets-file", "targets.yaml"
    )
    result.stdout.fnmatch_lines(
        [
            "servecheck targets:",
            "  ref: engine reference, models ref-tiny (declared), context 512 (declared)*",
        ]
    )
    # HEALTH-UNDER-LOAD skips where this fast server's answers end before health is asked.
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("skipped", 0) == 3, outcomes
    assert outcomes.get("passed", 0) >= 2, outcomes


def test_allowed_deviation_is_nonstrict_not_pass(pytester, make_reference):
    server = make_reference("usage-sum-wrong")
    _targets(pytester, server, "    allow: {CHAT-USAGE: 'billing done elsewhere'}\n")
    _suite(pytester, "CHAT")
    result = pytester.runpytest(
        "-p",
        "servecheck.pytest_plugin",
        "--target",
        "ref",
        "--targets-file",
        "targets.yaml",
        "-rX",
        "-rx",
        *ONE_USAGE_CHECK,
    )
    result.stdout.fnmatch_lines(["*1 nonstrict*"])
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == _count("CHAT") - 2
    assert outcomes.get("nonstrict") == 1
    assert "failed" not in outcomes


@pytest.mark.parametrize(
    "how",
    [
        pytest.param("default", id="default"),
        pytest.param("option", id="sc-strict"),
        pytest.param("target", id="target-strict"),
    ],
)
def test_schema_findings_nonstrict_by_default_failed_when_strict(
    pytester, make_reference, tmp_path, how
):
    """The strict schema profile: a check that passes on answers breaking the SDK's types is
    non-strict, and fails under --sc-strict or a target's strict: true; results.jsonl and
    summary.json carry the findings."""
    server = make_reference("schema-chunk-created-string")
    _targets(pytester, server, "    strict: true\n" if how == "target" else "")
    _suite(pytester, "STREAM")
    report = tmp_path / "rep"
    args = ["-p", "servecheck.pytest_plugin", "--target", "ref", "--targets-file", "targets.yaml"]
    args += ["-k", "STREAM-OBJECT", "--sc-report-dir", str(report), "-rx"]
    result = pytester.runpytest(*args, *(["--sc-strict"] if how == "option" else []))
    (row,) = [json.loads(line) for line in (report / "results.jsonl").read_text().splitlines()]
    assert row["schema"][0]["path"] == "created", row
    assert row["schema"][0]["rule"] == "type", row
    summary = json.loads((report / "summary.json").read_text())
    assert [r["check"] for r in summary["schema"]] == ["STREAM-OBJECT"]
    if how == "default":
        assert result.parseoutcomes().get("nonstrict") == 1, result.stdout.str()
        assert row["outcome"] == "nonstrict"
        assert row["message"].startswith('STREAM-OBJECT: non-strict (schema): created "')
        return
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "STREAM-OBJECT: schema: 1 field(s) of the answers break the openai SDK's types",
            "  Expected: every 2xx body and stream chunk validates strictly *",
            '  Received: created "*" is a string; input should be a valid integer '
            "?/chat/completions chunk 0?",
        ]
    )
    assert row["outcome"] == "failed"


def test_missing_capability_and_exclude_are_skips_with_reasons(pytester, make_reference):
    server = make_reference()
    _targets(pytester, server, "    capabilities: {n: false}\n    exclude: ['CHAT-LOGP*']\n")
    _suite(pytester, "CHAT")
    result = pytester.runpytest(
        "-p", "servecheck.pytest_plugin", "--target", "ref", "--targets-file", "targets.yaml", "-rs"
    )
    result.assert_outcomes(passed=_count("CHAT") - 2, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*CHAT-N: ref does not declare capability n*",
            "*CHAT-LOGPROBS: excluded for ref by targets.yaml exclude 'CHAT-LOGP*'*",
        ]
    )


def test_known_failure_is_strict_xfail(pytester, make_reference):
    clean = make_reference()
    _targets(pytester, clean, "    known_failures: {CHAT-USAGE: 'engine bug #123'}\n")
    _suite(pytester, "CHAT")
    result = pytester.runpytest(
        "-p", "servecheck.pytest_plugin", "--target", "ref", "--targets-file", "targets.yaml"
    )
    # the clean server passes CHAT-USAGE, so the strict xfail reports the fix as a failure
    result.assert_outcomes(passed=_count("CHAT") - 1, failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*known failure on ref: engine bug #123*"])


def test_broken_targets_file_is_a_usage_error(pytester):
    pytester.makefile(
        ".yaml",
        targets="targets:\n  - name: ref\n    base_url: http://127.0.0.1:1/v1\n    engin: vllm\n",
    )
    _suite(pytester, "CHAT")
    result = pytester.runpytest(
        "-p", "servecheck.pytest_plugin", "--target", "ref", "--targets-file", "targets.yaml"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: targets.yaml:4: targets[0].engin: unknown key 'engin' (did you mean \"engine\"?)"]
    )
    assert "Traceback" not in result.stderr.str()


def test_options_listed_in_help(pytester):
    result = pytester.runpytest("-p", "servecheck.pytest_plugin", "--help")
    result.stdout.fnmatch_lines(
        [
            "servecheck: conformance checks against OpenAI-compatible targets:",
            "  --sc-target=NAME*",
            "  --sc-targets-file=PATH*",
            "  --sc-model=NAME*",
            "  --sc-report-dir=DIR*",
            "  --sc-strict*strict schema profile*",
            "  --target=NAME*short for --sc-target*",
            "  --targets-file=PATH*",
            "  --model=NAME*short for --sc-model*",
        ]
    )


FOREIGN_CONFTEST = textwrap.dedent("""
    def pytest_addoption(parser):
        parser.addoption("--target", default="staging", help="their own deploy target")
        parser.addoption("--model", default="theirs")
""")
FOREIGN_TEST = textwrap.dedent("""
    def test_their_option(request):
        assert request.config.getoption("target") == "prod"
        assert request.config.getoption("model") == "theirs"
""")


def test_foreign_conftest_defining_target_keeps_its_option(pytester):
    """Installing servecheck must not break another project whose conftest.py defines
    --target (argparse's "conflicting option string" before the fix)."""
    pytester.makeconftest(FOREIGN_CONFTEST)
    pytester.makepyfile(test_theirs=FOREIGN_TEST)
    result = pytester.runpytest("-p", "servecheck.pytest_plugin", "--target", "prod")
    result.assert_outcomes(passed=1)
    assert "servecheck targets" not in result.stdout.str()  # the plugin stayed inert
    help_text = pytester.runpytest("-p", "servecheck.pytest_plugin", "--help").stdout
    help_text.fnmatch_lines(["  --sc-target=NAME*", "  --targets-file=PATH*short for*"])
    help_text.no_fnmatch_line("*short for --sc-target (*")


def test_foreign_target_option_beside_the_suites_by_namespaced_name(pytester, make_reference):
    """In such a project the catalogue still runs, selected by --sc-target."""
    _targets(pytester, make_reference())
    pytester.makeconftest(FOREIGN_CONFTEST)
    pytester.makepyfile(test_theirs=FOREIGN_TEST)
    _suite(pytester, "MODELS")
    result = pytester.runpytest(
        "-p",
        "servecheck.pytest_plugin",
        "-v",
        "--target",
        "prod",
        "--sc-target",
        "ref",
        "--sc-targets-file",
        "targets.yaml",
    )
    result.stdout.fnmatch_lines(
        [
            "servecheck targets:",
            "  ref: engine reference*",
            "*test_conformance?ref/ref-tiny/MODELS-* PASSED*",
        ]
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 2 and not outcomes.get("failed"), result.stdout.str()


def test_results_written_as_they_finish_and_key_redacted(
    pytester, make_reference, tmp_path, monkeypatch
):
    key = "sk-plugin-test-key-1234567890"
    server = make_reference("usage-sum-wrong", api_key=key)
    _targets(pytester, server, "    api_key: ${MY_KEY}\n")
    _suite(pytester, "CHAT")
    report = tmp_path / "rep"
    monkeypatch.setenv("MY_KEY", key)
    result = pytester.runpytest_subprocess(
        "-p",
        "servecheck.pytest_plugin",
        "--target",
        "ref",
        "--targets-file",
        "targets.yaml",
        "--sc-report-dir",
        str(report),
        "-n",
        "2",
        *ONE_USAGE_CHECK,
    )
    result.assert_outcomes(passed=_count("CHAT") - 2, failed=1)
    lines = (report / "results.jsonl").read_text().splitlines()
    assert len(lines) == _count("CHAT") - 1
    assert '"check": "CHAT-USAGE"' in (report / "summary.json").read_text()
    for path in report.iterdir():
        assert key not in path.read_text(), path
    assert key not in result.stdout.str() + result.stderr.str()


@pytest.fixture
def hanging_server():
    """A TCP server that accepts connections and never answers (a hung engine)."""
    import socket
    import threading

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join(timeout=2)
    for conn in held:
        conn.close()
    sock.close()


def test_hung_server_fails_every_check_fast_with_one_cause(pytester, hanging_server):
    """Discovery's one bounded probe (timeout_s) decides; checks do not each wait out a timeout."""
    pytester.makefile(
        ".yaml",
        targets=textwrap.dedent(f"""\
        targets:
          - name: hung
            base_url: http://127.0.0.1:{hanging_server}/v1
            engine: generic
            models: [m]
            timeout_s: 2
        """),
    )
    _suite(pytester, "CHAT")
    result = pytester.runpytest(
        "-p",
        "servecheck.pytest_plugin",
        "--target",
        "hung",
        "--targets-file",
        "targets.yaml",
        "-p",
        "no:randomly",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) + outcomes.get("failed", 0) >= 1
    assert "passed" not in outcomes
    result.stdout.fnmatch_lines(
        [
            "*: target down: it accepted the connection but GET /v1/models did not answer "
            "within timeout_s=2 s during discovery; the other * check(s) were not run",
            "  Received: GET /v1/models failed: timeout: *",
            "  Hint: the server is up but slow or hung: read its log, or raise timeout_s*",
        ]
    )


def test_hung_server_message_states_the_wait_that_applied(pytester, hanging_server):
    """Issue 41: with timeout_s 60 the message said discovery waited 60 s; it waited its own
    10 s (the run took 14 s). The message states the wait that applied."""
    pytester.makefile(
        ".yaml",
        targets=textwrap.dedent(f"""\
        targets:
          - name: hung
            base_url: http://127.0.0.1:{hanging_server}/v1
            engine: generic
            models: [m]
            timeout_s: 60
        """),
    )
    _suite(pytester, "CHAT")
    result = pytester.runpytest(
        "-p", "servecheck.pytest_plugin", "--target", "hung", "--targets-file", "targets.yaml",
        "-p", "no:randomly",
    )  # fmt: skip
    result.stdout.fnmatch_lines(
        [
            "*: target down: it accepted the connection but GET /v1/models did not answer "
            "within 10 s during discovery (its own limit; timeout_s=60 s is each check's); "
            "the other * check(s) were not run",
        ]
    )
    assert "within timeout_s=60 s" not in result.stdout.str()


def test_down_target_gives_one_finding_and_counts_the_rest_as_not_run(pytester):
    """Issue 24 item 7: a target that is down gives one "target down" failure, not one
    five-line failure per check; the other cases are counted as not run."""
    from servecheck.reference.hostile import closed_port

    pytester.makefile(
        ".yaml",
        targets=textwrap.dedent(f"""\
        targets:
          - name: down
            base_url: http://127.0.0.1:{closed_port()}/v1
            engine: generic
            models: [m]
            timeout_s: 2
        """),
    )
    _suite(pytester, "CHAT")
    pytester.makepyfile(test_err=SUITE.format(surface="ERR"))
    result = pytester.runpytest(
        "-p",
        "servecheck.pytest_plugin",
        "--target",
        "down",
        "--targets-file",
        "targets.yaml",
        "-p",
        "no:randomly",
        "--sc-report-dir",
        "out",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) + outcomes.get("failed", 0) == 1, outcomes
    cases = _count("CHAT") + _count("ERR")
    not_run = cases - 1 - outcomes.get("skipped", 0)  # one "target down" finding, capability skips
    assert "passed" not in outcomes and outcomes.get("notrun") == not_run, outcomes
    result.stdout.fnmatch_lines(
        [
            "*: target down: nothing accepted a connection at the target during discovery; "
            "the other * check(s) were not run"
        ]
    )
    # Once in the report body; pytest's own short summary repeats it whole where CI is set.
    body = result.stdout.str().split("short test summary info")[0]
    assert body.count("Expected: an HTTP answer") == 1, result.stdout.str()
    summary = json.loads((pytester.path / "out" / "summary.json").read_text())
    assert summary["counts"]["failed"] == 1, summary["counts"]
    assert summary["counts"]["notrun"] == summary["not_run"] >= 10, summary
    assert summary["partial"] is False


def test_a_down_target_counts_its_known_failures_among_the_checks_not_run(pytester):
    """Issue 42 item 12a: against a closed port, local-vllm's targets said "the other 140
    check(s) were not run" beside "146 notrun": its 6 known failures (xfails) were not run
    either, yet left out of the count. Every count agrees now, and a known failure is never the
    case that reports the target down (its failure would read as the expected one)."""
    from servecheck.reference.hostile import closed_port

    pytester.makefile(
        ".yaml",
        targets=textwrap.dedent(f"""\
        targets:
          - name: down
            base_url: http://127.0.0.1:{closed_port()}/v1
            engine: generic
            models: [m]
            timeout_s: 2
            known_failures:
              CHAT-SHAPE: a known failure listed first
              CHAT-USAGE: another
        """),
    )
    _suite(pytester, "CHAT")
    result = pytester.runpytest(
        "-p", "servecheck.pytest_plugin", "--target", "down", "--targets-file", "targets.yaml",
        "-p", "no:randomly", "--sc-report-dir", "out",
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    said = re.search(r"the other (\d+) check\(s\) were not run", result.stdout.str())
    assert said is not None, result.stdout.str()
    assert int(said.group(1)) == outcomes.get("notrun") >= 2, (said.group(0), outcomes)
    assert "xfailed" not in outcomes and outcomes.get("errors", 0) == 1, outcomes
    summary = json.loads((pytester.path / "out" / "summary.json").read_text())
    assert summary["counts"]["notrun"] == summary["not_run"] == int(said.group(1)), summary


def test_a_run_interrupted_before_its_checks_were_counted_says_not_run_unknown(pytester):
    """Issue 41 item 4: interrupted before collection finished, a run knows no number of checks
    that did not run; summary.json said 0 (and the page "0 check(s) did not run"). It says
    null now, which every page and console line reads as unknown."""
    # a Ctrl-C while pytest imports the second test module: no case was counted yet
    pytester.makepyfile(test_a="def test_a():\n    pass\n", test_b="raise KeyboardInterrupt\n")
    result = pytester.runpytest(
        "-p", "servecheck.pytest_plugin", "--sc-report-dir", "out", no_reraise_ctrlc=True
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    summary = json.loads((pytester.path / "out" / "summary.json").read_text())
    assert summary["partial"] is True and summary["not_run"] is None, summary


def test_a_ctrl_c_between_two_readers_of_a_report_leaves_one_count(pytester):
    """Issue 41 item 4: a Ctrl-C that landed after pytest's terminal had counted a report and
    before results.jsonl had it gave two counts for one run (pytest "82 passed", servecheck
    "81 passed"). Here a plugin called between the two sends itself SIGINT on the second
    test's report: the interrupt waits until the report has gone through every reader."""
    pytester.makeconftest(
        """
        import os
        import signal

        import pytest

        # A shell's background job (nohup make test &) starts every child with SIGINT ignored,
        # so Python has no KeyboardInterrupt for it: this test's interrupt must be a real one.
        signal.signal(signal.SIGINT, signal.default_int_handler)


        class SigintOnSecondReport:
            seen = 0

            def pytest_runtest_logreport(self, report):
                if report.when == "call":
                    self.seen += 1
                    if self.seen == 2:
                        os.kill(os.getpid(), signal.SIGINT)


        @pytest.hookimpl(trylast=True)
        def pytest_sessionstart(session):
            # called in the reverse order of registration: the terminal first, then this
            # plugin, then servecheck's results writer (registered before the terminal)
            pm = session.config.pluginmanager
            terminal = pm.get_plugin("terminalreporter")
            pm.unregister(terminal)
            pm.register(SigintOnSecondReport(), "sigint-on-second-report")
            pm.register(terminal, "terminalreporter")
        """
    )
    pytester.makepyfile(test_a="\n".join(f"def test_{i}():\n    pass\n" for i in range(5)))
    # its own process: the SIGINT is real
    result = pytester.runpytest_subprocess(
        "-p", "servecheck.pytest_plugin", "--sc-report-dir", "out", "-p", "no:randomly"
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.stdout.str()
    assert result.parseoutcomes() == {"passed": 2}, result.stdout.str()
    summary = json.loads((pytester.path / "out" / "summary.json").read_text())
    assert summary["counts"] == {"passed": 2} and summary["not_run"] == 3, summary
    rows = (pytester.path / "out" / "results.jsonl").read_text().splitlines()
    assert len(rows) == 2, rows
