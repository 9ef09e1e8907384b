"""The servecheck pytest plugin: options, target x model x check parametrisation, outcomes.

Loaded by its ``pytest11`` entry point wherever servecheck is installed (and by the root
``conftest.py`` of a checkout). It stays inert for test runs that neither collect a conformance
suite nor name a target nor use its fixtures. Its options are ``--sc-*``; the short names
(``--target``, ``--targets-file``, ``--model``) are added only where no conftest.py or other
plugin defines them. When active it:

* reads targets.yaml once in ``pytest_configure`` (a broken file is a usage error: one line per
  problem, exit 4, no traceback) and discovers each selected target's models and context length
  in the controller; xdist workers receive that through ``workerinput`` so that every worker
  collects exactly the same cases;
* parametrises ``sc_case`` over target x model x the module's ``SURFACE`` checks, with ids like
  ``reference/ref-tiny/CHAT-USAGE``; missing capabilities, excluded ids and checks needing a key
  become skips with the reason; ``known_failures`` become strict xfails;
* maps :class:`~servecheck.checks.NonStrict` to a visible ``nonstrict`` outcome (an xfail for
  JUnit and allure, never a pass) and prints :class:`~servecheck.checks.CheckFailed` messages
  without a traceback;
* writes ``results.jsonl`` as tests finish (a killed run keeps what it measured) and
  ``summary.json`` at the end when ``--sc-report-dir`` is set;
* gives a user's own tests documented fixtures (docs/pytest-plugin.md): ``servecheck_session``,
  ``servecheck_target``, ``servecheck_client_factory`` (override it for mTLS, a proxy or extra
  headers: the catalogue's clients are made by it too), ``servecheck_client`` and
  ``servecheck_context``.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from servecheck.checks import preconditions
from servecheck.checks.context import CheckContext, CheckFailed, CheckSkipped, NonStrict, Trials
from servecheck.checks.discovery import TargetInfo, discover
from servecheck.checks.preconditions import CheckError
from servecheck.checks.registry import MAX_TRIALS, Check, by_surface, matches
from servecheck.checks.surfaces.embed import (
    POOLING_SURFACES,
    no_pooling_reason,
    pooling_models,
)
from servecheck.client.http import ServeClient
from servecheck.client.stalls import StallGuard, Verdict
from servecheck.config import load_targets
from servecheck.config.model import Target
from servecheck.engines.registry import profile_for, resolve_capabilities
from servecheck.errors import SpecError, UsageError
from servecheck.records.results import not_run_phrase
from servecheck.redact import redact, redact_obj

ENV = {
    "target": "SERVECHECK_TARGET",
    "targets_file": "SERVECHECK_TARGETS_FILE",
    "model": "SERVECHECK_MODEL",
    "report_dir": "SERVECHECK_REPORT_DIR",
    "strict": "SERVECHECK_STRICT",
    "trials": "SERVECHECK_TRIALS",
}
DEFAULT_TARGET = "reference"
UNKNOWN_MODEL = "(unknown-model)"
NO_POOLING_MODEL = "(no-pooling-model)"  # EMBED/RERANK on a target that serves none
_SESSION_KEY = pytest.StashKey["ServecheckSession"]()
# requests the session's clients had not sent (client/stalls.py) when a case started
_NOT_SENT_KEY = pytest.StashKey[int]()


# The options, each under servecheck's own prefix. The short names (``--target`` ...) are only
# added where nothing else defines them: the entry point loads this plugin into every pytest
# run on the machine, and a project whose conftest.py defines ``--target`` itself must not crash
# with argparse's "conflicting option string" (there it keeps its own option; ours is
# ``--sc-target``).
_OPTIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "--sc-target",
        "--target",
        {
            "action": "append",
            "dest": "sc_targets",
            "metavar": "NAME",
            "help": f"target from targets.yaml; repeatable; 'all' for every target (default: ${ENV['target']} or '{DEFAULT_TARGET}')",
        },
    ),
    (
        "--sc-targets-file",
        "--targets-file",
        {
            "dest": "sc_targets_file",
            "metavar": "PATH",
            "help": f"the targets file (default: ${ENV['targets_file']} or targets.yaml)",
        },
    ),
    (
        "--sc-model",
        "--model",
        {
            "action": "append",
            "dest": "sc_models",
            "metavar": "NAME",
            "help": f"check only this served model name; repeatable (default: ${ENV['model']}, else the target's models)",
        },
    ),
)
_GROUP = ("servecheck", "servecheck: conformance checks against OpenAI-compatible targets")


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    group = parser.getgroup(*_GROUP)
    for name, _short, attrs in _OPTIONS:
        group.addoption(name, **attrs)
    group.addoption(
        "--sc-report-dir",
        dest="sc_report_dir",
        metavar="DIR",
        help=f"write results.jsonl and summary.json here (default: ${ENV['report_dir']}, else nothing)",
    )
    group.addoption(
        "--sc-strict",
        dest="sc_strict",
        action="store_true",
        default=None,
        help="strict schema profile: an answer that breaks the openai SDK's types fails the "
        f"check instead of making it non-strict (default: ${ENV['strict']}=1, else off)",
    )
    group.addoption(
        "--sc-trials",
        dest="sc_trials",
        metavar="K",
        type=_trials_arg,
        default=None,
        help="run each model-dependent check (tool calls, JSON schema, reasoning, stop) K times "
        "and judge it by the share that passed (docs/checks.md#repeated-trials) "
        f"(default: ${ENV['trials']}, else 1)",
    )
    if getattr(pluginmanager, "_conftest_plugins", None):
        # Named by a conftest.py's pytest_plugins: the initial conftests are loading now, so the
        # wrapper below does not run for this session; that conftest has defined its options.
        _add_free_short_names(parser)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(parser: pytest.Parser) -> Generator[None, None, None]:
    """After the initial conftest.py files have defined their options (the only ones pytest
    reads from conftests), add each short name that none of them took."""
    result = yield
    _add_free_short_names(parser)
    return result


def _defined_names(parser: pytest.Parser) -> set[str]:
    # pytest has no public listing of the options defined so far; its groups hold them.
    groups = getattr(parser, "_groups", [])
    return {name for group in groups for opt in group.options for name in opt.names()}


def _add_free_short_names(parser: pytest.Parser) -> None:
    taken = _defined_names(parser)
    group = parser.getgroup(*_GROUP)
    for name, short, attrs in _OPTIONS:
        if short not in taken:
            group.addoption(
                short,
                **{
                    **attrs,
                    "help": f"short for {name} (absent where a conftest.py or another plugin defines {short})",
                },
            )


@dataclass(slots=True)
class Case:
    target: Target
    model: str
    check: Check

    @property
    def id(self) -> str:
        return f"{self.target.name}/{self.model}/{self.check.id}"

    def __repr__(self) -> str:  # what allure records as the parameter's value: no target config
        return self.id


@dataclass(slots=True)
class ServecheckSession:
    targets: list[Target]
    infos: dict[str, TargetInfo]
    model_filter: list[str]
    clients: dict[str, ServeClient] = field(default_factory=dict)
    # the checks' preconditions, probed once per target, model and route in this process
    preconditions: dict[tuple[str, str, str], Any] = field(default_factory=dict)
    # per target that discovery found down: the case ids collected for it (the first runs
    # and reports "target down"; the others are not run)
    down_cases: dict[str, list[str]] = field(default_factory=dict)
    # routes whose responses never complete, shared with the xdist workers through a file:
    # the checks that would send to them are not run (client/stalls.py)
    stalls: StallGuard = field(default_factory=StallGuard)

    def models_for(self, target: Target, surface: str = "") -> list[str]:
        info = self.infos[target.name]
        if surface in POOLING_SURFACES:
            # EMBED and RERANK run on the pooling models, not the chat models
            return pooling_models(info, surface) or [NO_POOLING_MODEL]
        models = info.models or [UNKNOWN_MODEL]
        if self.model_filter:
            models = [
                m for m in self.model_filter if m in models or not target.models
            ] or self.model_filter
        return models

    def client(
        self, target: Target, factory: Callable[[Target], ServeClient] | None = None
    ) -> ServeClient:
        """One client per target for the session, made by ``factory`` (default
        :meth:`ServeClient.for_target`) the first time it is asked for."""
        if target.name not in self.clients:
            client = (factory or ServeClient.for_target)(target)
            if client.settings.stall_guard is None:
                client.settings.stall_guard = self.stalls
            self.clients[target.name] = client
        return self.clients[target.name]

    def stalled(self, target: Target) -> Verdict | None:
        """The first verdict that the responses of ``target``'s server never complete."""
        return self.stalls.on_server(target.base_url)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients.clear()


def _opt(config: pytest.Config, name: str) -> Any:
    value = config.getoption(f"sc_{name}", default=None)
    if value:
        return value
    env = os.environ.get(ENV[name.rstrip("s")] if name != "targets_file" else ENV["targets_file"])
    if not env:
        return None
    return (
        [v.strip() for v in env.split(",") if v.strip()] if name in ("targets", "models") else env
    )


def _suite_dirs() -> tuple[Path, ...]:
    """servecheck's suites: the packaged ones, and a checkout's top-level ``suites/``."""
    pkg = Path(__file__).resolve().parent
    return (pkg / "suites", pkg.parent / "suites")


def _collects_suites(config: pytest.Config) -> bool:
    """Whether this run collects servecheck's suites (or names a target); only then are the
    targets read in ``pytest_configure``. Another project's ``suites/`` folder does not count."""
    if config.getoption("sc_targets", default=None):
        return True
    dirs = _suite_dirs()
    for arg in config.args:
        text = str(arg).split("::", 1)[0]
        if text == "servecheck.suites" or text.startswith("servecheck.suites."):
            return True  # --pyargs
        path = Path(text).resolve()
        if any(path == d or d in path.parents for d in dirs):
            return True
    return False


def _trials_arg(text: str) -> int:
    """``K`` of ``--sc-trials``: a whole number from 1 to :data:`MAX_TRIALS`."""
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError(f"expected a whole number of trials, got {text!r}") from None
    if not 1 <= value <= MAX_TRIALS:
        raise ValueError(f"trials must be 1 to {MAX_TRIALS}, got {value}")
    return value


def trials_of(config: pytest.Config) -> int:
    """``--sc-trials``, else ``$SERVECHECK_TRIALS``, else 1; a bad value is a usage error."""
    value = config.getoption("sc_trials", default=None)
    if value:
        return int(value)
    env = os.environ.get(ENV["trials"], "").strip()
    if not env:
        return 1
    try:
        return _trials_arg(env)
    except ValueError as exc:
        raise pytest.UsageError(f"${ENV['trials']}: {exc}") from None


def strict_mode(config: pytest.Config) -> bool:
    """``--sc-strict``, else ``$SERVECHECK_STRICT`` (1/true/yes/on)."""
    if config.getoption("sc_strict", default=None):
        return True
    return os.environ.get(ENV["strict"], "").strip().lower() in ("1", "true", "yes", "on")


# Spec field -> this plugin's pytest option, for showing a SpecError from the library.
_FIELD_OPTIONS = {"targets_file": "--targets-file", "model": "--model"}


def _build_session(config: pytest.Config) -> ServecheckSession:
    targets_file = _opt(config, "targets_file")
    names = _opt(config, "targets") or [DEFAULT_TARGET]
    try:
        loaded = load_targets(targets_file)
        targets = loaded.select(names)
    except UsageError as exc:
        # the library names spec fields; this edge shows pytest's options for them
        text = exc.render(_FIELD_OPTIONS) if isinstance(exc, SpecError) else str(exc)
        raise pytest.UsageError(redact(text)) from None
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "servecheck_infos" in workerinput:
        infos = {
            name: TargetInfo.from_dict(d)
            for name, d in json.loads(workerinput["servecheck_infos"]).items()
        }
    else:
        infos = {t.name: discover(t) for t in targets}
    return ServecheckSession(
        targets=targets,
        infos=infos,
        model_filter=_opt(config, "models") or [],
        stalls=StallGuard(_stalls_file(workerinput)),
    )


def _stalls_file(workerinput: dict[str, Any] | None) -> Path:
    """The file the controller and its xdist workers share their stalls through: the
    controller's (made here, removed in ``pytest_unconfigure``), or the one it handed down."""
    if workerinput is not None and "servecheck_stalls" in workerinput:
        return Path(workerinput["servecheck_stalls"])
    fd, name = tempfile.mkstemp(prefix="servecheck-stalls-", suffix=".jsonl")
    os.close(fd)
    return Path(name)


def get_session(config: pytest.Config) -> ServecheckSession:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None:
        session = _build_session(config)
        config.stash[_SESSION_KEY] = session
    return session


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None) or {}
    if _collects_suites(config) or "servecheck_infos" in workerinput:
        get_session(config)
    report_dir = _opt(config, "report_dir")
    if report_dir and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ResultsWriter(Path(report_dir)), "servecheck-results")
        config.pluginmanager.register(OneReportAtATime(), "servecheck-sigint-guard")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is not None:
        session.close()
        handed_down = "servecheck_stalls" in (getattr(config, "workerinput", None) or {})
        if not handed_down and session.stalls.path is not None:  # this process made it
            session.stalls.path.unlink(missing_ok=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller -> worker: pass the discovered target facts so collection matches."""
    session = node.config.stash.get(_SESSION_KEY, None)
    if session is not None:
        node.workerinput["servecheck_infos"] = json.dumps(
            {k: v.to_dict() for k, v in session.infos.items()}
        )
        node.workerinput["servecheck_stalls"] = str(session.stalls.path)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None:
        return None
    return ["servecheck targets:"] + [
        f"  {redact(session.infos[t.name].header())}" for t in session.targets
    ]


def _case_marks(case: Case, session: ServecheckSession) -> list[pytest.MarkDecorator]:
    target, check = case.target, case.check
    if case.model == NO_POOLING_MODEL:
        return [pytest.mark.skip(reason=no_pooling_reason(target, check.surface))]
    pattern = matches(check.id, target.exclude)
    if pattern is not None:
        return [
            pytest.mark.skip(
                reason=f"{check.id}: excluded for {target.name} by targets.yaml exclude {pattern!r}"
            )
        ]
    caps = resolve_capabilities(target)
    missing = [c for c in check.capabilities if not caps.get(c, False)]
    if missing:
        return [
            pytest.mark.skip(
                reason=f"{check.id}: {target.name} does not declare capability {', '.join(missing)}"
                f" (capabilities in targets.yaml, or the {target.engine} profile default)"
            )
        ]
    if check.needs_api_key and target.api_key is None:
        return [pytest.mark.skip(reason=f"{check.id}: no api_key configured for {target.name}")]
    known = matches(check.id, target.known_failures)
    if known is not None:
        return [
            pytest.mark.xfail(
                strict=True,
                reason=f"known failure on {target.name}: {target.known_failures[known]}",
            )
        ]
    return []


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sc_target" in metafunc.fixturenames:
        # per-target suites (preflight): one case per selected target
        targets = get_session(metafunc.config).targets
        metafunc.parametrize("sc_target", [pytest.param(t, id=t.name) for t in targets])
    if "sc_case" not in metafunc.fixturenames:
        return
    surface = getattr(metafunc.module, "SURFACE", None)
    if not isinstance(surface, str):
        raise pytest.UsageError(
            f"{metafunc.module.__name__}: a suite module must set SURFACE = 'CHAT' (or another surface)"
        )
    session = get_session(metafunc.config)
    params = []
    for target in session.targets:
        for model in session.models_for(target, surface):
            for check in by_surface(surface):
                case = Case(target, model, check)
                params.append(pytest.param(case, id=case.id, marks=_case_marks(case, session)))
    metafunc.parametrize("sc_case", params)


class _NotRun(Exception):
    """A case that was collected but not run (its target is down): counted, not judged."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Per target found down: the collected cases, so that only the first one that would run
    reports the target down and the others are counted as not run. The same in every xdist
    worker: the infos come from the controller and the order from collection. A known failure
    (an xfail) is not run either, so it is counted, but never the one that reports: its failure
    would read as the expected one (issue 42: "140 not run" beside 146 with 6 known failures)."""
    session = config.stash.get(_SESSION_KEY, None)
    if session is None:
        return
    known: dict[str, list[str]] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("sc_case") if callspec is not None else None
        if not isinstance(case, Case) or not session.infos[case.target.name].unreachable:
            continue
        if item.get_closest_marker("skip"):
            continue  # decided at collection: a skip stays a skip
        into = known if item.get_closest_marker("xfail") else session.down_cases
        into.setdefault(case.target.name, []).append(case.id)
    for name, ids in known.items():
        session.down_cases.setdefault(name, []).extend(ids)


def _discovery_wait(info: TargetInfo, timeout_s: float) -> str:
    """The wait discovery really gave /v1/models: its own limit caps timeout_s, so a message
    that named timeout_s claimed a wait that did not happen (issue 41)."""
    wait = timeout_s if info.wait_s is None else info.wait_s
    if wait >= timeout_s:
        return f"within timeout_s={timeout_s:g} s during discovery"
    return (
        f"within {wait:g} s during discovery (its own limit; timeout_s={timeout_s:g} s is each "
        "check's)"
    )


@pytest.fixture
def sc_ctx(request: pytest.FixtureRequest, sc_case: Case) -> Iterator[CheckContext]:
    """The context a check runs with: target, model, profile, capabilities and a client."""
    session = get_session(request.config)
    target = sc_case.target
    info = session.infos[target.name]
    ctx = CheckContext(
        check_id=sc_case.check.id,
        target=target,
        model=sc_case.model,
        profile=profile_for(target),
        capabilities=resolve_capabilities(target),
        info=info,
        client=session.client(target, request.getfixturevalue("servecheck_client_factory")),
        preconditions=session.preconditions,
        strict=strict_mode(request.config),
        trials=trials_of(request.config),
    )
    request.node.user_properties.append(("servecheck_check", sc_case.check.id))
    request.node.user_properties.append(("servecheck_target", target.name))
    request.node.user_properties.append(("servecheck_model", sc_case.model))
    if info.unreachable:
        # One bounded probe already showed that nothing answers; running every check would wait
        # out every timeout (a hung server would take the catalogue an hour to fail) and repeat
        # one message per check. One case reports the target down; the others are not run.
        cases = session.down_cases.get(target.name) or [sc_case.id]
        if sc_case.id != cases[0]:
            raise _NotRun(f"not run: target {target.name} is down (reported by {cases[0]})")
        slow = info.unreachable_kind == "timeout"
        rest = f"; the other {len(cases) - 1} check(s) were not run" if len(cases) > 1 else ""
        raise CheckFailed(
            sc_case.check.id,
            (
                "target down: it accepted the connection but GET /v1/models did not answer "
                + _discovery_wait(info, target.timeout_s)
                if slow
                else "target down: nothing accepted a connection at the target during discovery"
            )
            + rest,
            expected=f"an HTTP answer from {target.base_url}/models",
            received=info.error or "no answer",
            hint="the server is up but slow or hung: read its log, or raise timeout_s if it is "
            "only slow"
            if slow
            else "start the server or fix base_url",
        )
    _not_if_stalled(request, session, sc_case)
    if sc_case.model == UNKNOWN_MODEL and sc_case.check.surface not in ("HEALTH", "MODELS", "AUTH"):
        raise CheckFailed(
            sc_case.check.id,
            "no model to test: none declared and none discovered",
            expected="models in targets.yaml, or a /v1/models listing",
            received=info.error or "an empty model list",
        )
    preconditions.ensure(sc_case.check, ctx)  # unmet: an error at setup, before the check
    try:
        yield ctx
    finally:
        request.node.user_properties.append(("servecheck_exchanges", len(ctx.exchanges)))
        if request.config.pluginmanager.hasplugin("allure_pytest"):
            # Title, description, labels and the redacted request/response of every exchange.
            from servecheck.report.allure_glue import attach_exchanges

            attach_exchanges(ctx, sc_case.check)


def _not_if_stalled(request: pytest.FixtureRequest, session: ServecheckSession, case: Case) -> None:
    """Start counting the requests this case does not send (a route whose responses never
    complete); and when a route its preconditions name is judged already, do not run it."""
    session.stalls.current = case.id
    request.node.stash[_NOT_SENT_KEY] = session.stalls.not_sent
    base_url = case.target.base_url
    verdict = session.stalls.judged("POST", base_url)  # a POST verdict judges the whole server
    for requirement in case.check.preconditions:
        route = requirement[len(preconditions.ROUTE_ACCEPTS) :]
        method = "GET" if route == "/models" else "POST"
        verdict = verdict or session.stalls.judged(method, base_url + route)
    if verdict is not None:
        raise _NotRun(f"not run: {verdict.message()}")


def _stalled_report(item: pytest.Item, report: pytest.TestReport) -> bool:
    """A case whose requests were not sent (their route never completes) is not run, whatever
    it concluded from the refusals: it judged nothing. True when ``report`` became that."""
    before = item.stash.get(_NOT_SENT_KEY, None)
    session = item.config.stash.get(_SESSION_KEY, None)
    if before is None or session is None or session.stalls.not_sent <= before:
        return False
    callspec = getattr(item, "callspec", None)
    case = callspec.params.get("sc_case") if callspec is not None else None
    verdict = session.stalled(case.target) if isinstance(case, Case) else None
    cause = verdict.message() if verdict is not None else "responses never complete"
    item.stash[_NOT_SENT_KEY] = session.stalls.not_sent  # one report per case
    if hasattr(report, "wasxfail"):
        del report.wasxfail
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: not run: {cause}")
    report.user_properties.append(("servecheck_outcome", "notrun"))
    return True


# ---- fixtures for a user's own tests (docs/pytest-plugin.md) ---------------------------------


@pytest.fixture(scope="session")
def servecheck_session(request: pytest.FixtureRequest) -> ServecheckSession:
    """The selected targets (``--target``, ``$SERVECHECK_TARGET``, else ``reference``) and what
    discovery found for each (``.infos[name]``: models, context length, version)."""
    return get_session(request.config)


@pytest.fixture(scope="session")
def servecheck_target(servecheck_session: ServecheckSession) -> Target:
    """The first selected target."""
    return servecheck_session.targets[0]


@pytest.fixture(scope="session")
def servecheck_client_factory() -> Callable[[Target], ServeClient]:
    """How the session makes a client for a target: override it in your conftest.py for mTLS,
    a proxy or extra headers; the catalogue's checks use the clients it makes too."""
    return ServeClient.for_target


@pytest.fixture(scope="session")
def servecheck_client(
    servecheck_session: ServecheckSession,
    servecheck_target: Target,
    servecheck_client_factory: Callable[[Target], ServeClient],
) -> ServeClient:
    """The session's client for :func:`servecheck_target` (closed when the session ends)."""
    return servecheck_session.client(servecheck_target, servecheck_client_factory)


@pytest.fixture
def servecheck_context(
    request: pytest.FixtureRequest,
    servecheck_session: ServecheckSession,
    servecheck_target: Target,
    servecheck_client: ServeClient,
) -> CheckContext:
    """A :class:`~servecheck.checks.context.CheckContext` for the first target and its first
    model (``--model`` narrows it), as the catalogue's checks get: ``ctx.post``, ``ctx.chat_body``,
    ``ctx.fail``/``ctx.expect`` raise the check exceptions that the plugin reports."""
    target = servecheck_target
    return CheckContext(
        check_id=f"USER-{request.node.name}",
        target=target,
        model=servecheck_session.models_for(target)[0],
        profile=profile_for(target),
        capabilities=resolve_capabilities(target),
        info=servecheck_session.infos[target.name],
        client=servecheck_client,
        strict=strict_mode(request.config),
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    ctx = getattr(item, "funcargs", {}).get("sc_ctx") if call.when == "call" else None
    if isinstance(ctx, CheckContext) and ctx.schema:
        # the strict schema profile's findings (checks/schema.py), for results.jsonl
        report.user_properties.append(("servecheck_schema", ctx.schema.to_list()))
    if isinstance(ctx, CheckContext) and ctx.trial_result is not None:
        # --trials: k/K and the threshold, for results.jsonl, summary.json, JUnit and the page
        report.user_properties.append(("servecheck_trials", ctx.trial_result.to_dict()))
    if call.when in ("setup", "call") and _stalled_report(item, report):
        return
    excinfo = call.excinfo
    if excinfo is None:
        return
    if isinstance(excinfo.value, NonStrict) and not hasattr(report, "wasxfail"):
        report.outcome = "skipped"
        report.wasxfail = redact(str(excinfo.value))
        report.user_properties.append(("servecheck_outcome", "nonstrict"))
    elif isinstance(excinfo.value, _NotRun):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {excinfo.value}")
        report.user_properties.append(("servecheck_outcome", "notrun"))
    elif isinstance(excinfo.value, CheckError):
        report.longrepr = redact(str(excinfo.value))
        report.user_properties.append(("servecheck_outcome", "error"))
    elif isinstance(excinfo.value, CheckSkipped):
        report.outcome = "skipped"
        report.longrepr = (
            str(item.path),
            item.location[1] or 0,
            f"Skipped: {redact(str(excinfo.value))}",
        )
    elif isinstance(excinfo.value, CheckFailed) and report.outcome == "failed":
        report.longrepr = redact(str(excinfo.value))


@pytest.hookimpl(tryfirst=True)
def pytest_report_teststatus(
    report: pytest.TestReport, config: pytest.Config
) -> tuple[str, str, Any] | None:
    if report.when == "call" and ("servecheck_outcome", "nonstrict") in report.user_properties:
        return "nonstrict", "N", ("NON-STRICT", {"yellow": True})
    if report.when in ("setup", "call") and (
        ("servecheck_outcome", "notrun") in report.user_properties
    ):
        return "notrun", "-", ("NOT RUN", {"yellow": True})
    return None


def outcome_of(report: pytest.TestReport) -> str | None:
    """passed | failed | nonstrict | skipped | xfailed | xpassed | error, or None (not final yet)."""
    props = dict((k, v) for k, v in report.user_properties if isinstance(k, str))
    if report.when == "setup":
        if props.get("servecheck_outcome") in ("error", "notrun"):
            return str(props["servecheck_outcome"])
        if report.failed:
            return "error" if not isinstance(getattr(report, "longrepr", None), str) else "failed"
        if report.skipped:
            return "xfailed" if hasattr(report, "wasxfail") else "skipped"
        return None
    if report.when == "call":
        if props.get("servecheck_outcome") in ("nonstrict", "notrun"):
            return str(props["servecheck_outcome"])
        if hasattr(report, "wasxfail"):
            return "xfailed" if report.skipped else "xpassed" if report.passed else "failed"
        return report.outcome
    if report.when == "teardown" and report.failed:
        return "error"
    return None


@dataclass(slots=True)
class OneReportAtATime:
    """A SIGINT that lands while one test report goes through ``pytest_runtest_logreport``
    waits until every implementation has seen it. Otherwise it could stop the report after
    pytest's terminal counted it and before results.jsonl did: pytest said "82 passed" and
    servecheck, from summary.json, "81 passed". Only around each report, on the main thread,
    and only where SIGINT is Python's own KeyboardInterrupt: everywhere else a Ctrl-C is
    pytest's as it always was."""

    caught: list[int] = field(default_factory=list)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        ):
            return (yield)
        self.caught.clear()
        signal.signal(signal.SIGINT, lambda signum, frame: self.caught.append(signum))
        try:
            return (yield)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            if self.caught:
                raise KeyboardInterrupt  # noqa: B012 - the deferred Ctrl-C, now the report is whole


class ResultsWriter:
    """Writes one JSON line per finished check as it happens, then summary.json."""

    @staticmethod
    def _write_stalls(tr: Any, rows: list[dict[str, Any]]) -> None:
        """One line per route whose responses never completed, with the checks not run for it."""
        sc = tr.config.stash.get(_SESSION_KEY, None)
        for verdict in sc.stalls.verdicts() if sc is not None else []:
            behind = sum(
                1 for r in rows if r["outcome"] == "notrun" and verdict.message() in r["message"]
            )
            tr.write_line(redact(f"  {verdict.message()}; {behind} check(s) not run"), red=True)

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "results.jsonl"
        self._fh = self.path.open("a", encoding="utf-8")
        self.counts: dict[str, int] = {}
        self.rows: list[dict[str, Any]] = []
        self.started = time.time()
        self.collected = 0  # cases collected (in this process, or by the xdist workers)
        self.interrupted = False

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        # The cases that will run, known once collection is complete: pytest_collection_finish
        # also comes after a Ctrl-C in the middle of it, with what was collected by then.
        self.collected = len(items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected = max(self.collected, len(ids))  # every worker collects every case

    def not_run(self) -> int | None:
        """Cases collected but not judged: counted as not run (a down target's, or an
        interrupted run's); None (unknown) for a run interrupted before collection finished.
        A case is judged once however many lines it has (a passed call and a teardown error)."""
        notrun = self.counts.get("notrun", 0)
        if not self.collected:
            return None if self.interrupted else notrun
        judged = {r["nodeid"] for r in self.rows if r["outcome"] != "notrun"}
        return max(notrun, self.collected - len(judged))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome = outcome_of(report)
        if outcome is None:
            return
        props = dict((k, v) for k, v in report.user_properties if isinstance(k, str))
        nodeid = report.nodeid
        case_id = nodeid.rsplit("[", 1)[-1].rstrip("]") if "[" in nodeid else nodeid
        parts = case_id.split("/")
        message = ""
        if outcome in ("failed", "error"):
            message = (
                str(report.longrepr) if isinstance(report.longrepr, str) else report.longreprtext
            )
        elif outcome in ("skipped", "notrun") and isinstance(report.longrepr, tuple):
            message = str(report.longrepr[2]).removeprefix("Skipped: ")
        elif outcome in ("nonstrict", "xfailed", "xpassed"):
            message = str(getattr(report, "wasxfail", ""))
        row = {
            "check": props.get("servecheck_check", parts[-1] if len(parts) == 3 else None),
            "target": props.get("servecheck_target", parts[0] if len(parts) == 3 else None),
            "model": props.get("servecheck_model", parts[1] if len(parts) == 3 else None),
            "outcome": outcome,
            "duration_s": round(report.duration, 4),
            "nodeid": nodeid,
            "message": redact(message)[:4000],
        }
        if props.get("servecheck_schema"):
            row["schema"] = redact_obj(props["servecheck_schema"])
        trials = props.get("servecheck_trials")
        if isinstance(trials, dict):
            row["trials"] = redact_obj(trials)
            row["message"] = row["message"] or Trials(**trials).phrase()
        self.rows.append(row)
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._fh.flush()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._fh.close()
        config = session.config
        sc = config.stash.get(_SESSION_KEY, None)
        # Interrupted (Ctrl-C, SIGTERM as Ctrl-C): what finished is written, marked partial.
        self.interrupted = int(exitstatus) == int(pytest.ExitCode.INTERRUPTED)
        summary = {
            "kind": "conformance",
            "started": self.started,
            "finished": time.time(),
            "exit_status": int(exitstatus),
            "partial": self.interrupted,
            "not_run": self.not_run(),
            "counts": self.counts,
            "targets": {name: info.to_dict() for name, info in sc.infos.items()} if sc else {},
            "failed": [r for r in self.rows if r["outcome"] in ("failed", "error", "xpassed")],
            # routes whose responses never completed: their checks were not run
            "never_complete": [v.to_dict() for v in sc.stalls.verdicts()] if sc else [],
            # the strict schema profile: each check whose answers broke the SDK's types
            "schema": [
                {k: r[k] for k in ("check", "target", "model", "outcome", "schema")}
                for r in self.rows
                if r.get("schema")
            ],
            # --trials K: K, and each model-dependent check's k/K and threshold
            "trials": trials_of(config),
            "trial_rates": [
                {k: r[k] for k in ("check", "target", "model", "outcome", "trials")}
                for r in self.rows
                if r.get("trials")
            ],
        }
        (self.directory / "summary.json").write_text(
            json.dumps(redact_obj(summary), indent=2, ensure_ascii=False), encoding="utf-8"
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        rows = [r for r in self.rows if r["check"]]
        if not rows:
            return
        tr = terminalreporter
        tr.section("servecheck summary")
        per_target: dict[str, dict[str, int]] = {}
        for r in self.rows:  # the per-line counts add up to pytest's total line
            key = f"{r['target']}/{r['model']}" if r["check"] else "other tests"
            bucket = per_target.setdefault(key, {})
            bucket[r["outcome"]] = bucket.get(r["outcome"], 0) + 1
        order = [
            "passed",
            "failed",
            "error",
            "nonstrict",
            "xfailed",
            "xpassed",
            "skipped",
            "notrun",
        ]
        for name, counts in per_target.items():
            tr.write_line(
                f"{name}: " + ", ".join(f"{counts[o]} {o}" for o in order if counts.get(o))
            )
        bad = [r for r in rows if r["outcome"] in ("failed", "error", "xpassed")]
        for r in bad[:40]:
            first = (r["message"].splitlines() or [""])[0]
            tr.write_line(f"  FAIL {r['target']}/{r['model']} {first}"[:200], red=True)
        if len(bad) > 40:
            tr.write_line(f"  ... and {len(bad) - 40} more (see {self.path})")
        self._write_stalls(tr, rows)
        if self.interrupted:
            tr.write_line(
                f"PARTIAL: the run was interrupted; {not_run_phrase(self.not_run())}", red=True
            )
        tr.write_line(f"results: {self.path}")
