"""A ``servecheck clients`` run: each chosen client, on each route it speaks, on its scripted task
against one target, inside a network namespace; a verdict per client and route.

The task (:mod:`servecheck.clients.catalog`): a plain streamed answer, then a tool round trip
(the model asks for the read-only tool the client offers, the client runs it, the model
answers). Against the embedded reference (started with ``--agent``, its scripted agent mode) or a
tiny random-weight model only the protocol path is judged, and the outcome says "protocol only".

A client ``works`` when every task succeeded; ``fails`` with the exact request and the answer
that broke it (the relay's recording, secrets redacted); ``partial`` when a random-weight model
(not the scripted reference) never asked for the tool, so the round trip could not be judged;
``not run`` with the reason (no namespace here, the install failed, a target servecheck cannot
relay to); ``skipped`` on a route the target declares it does not serve (out of the verdict). The run's verdict is
:func:`servecheck.analysis.verdict.compose` over the outcomes: a client that fails fails the run;
one partial or not run makes it INCONCLUSIVE; only every client working is a PASS.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from servecheck.analysis.verdict import FAIL, INCONCLUSIVE, RunVerdict, compose
from servecheck.clients import netns
from servecheck.clients.catalog import CLIENTS, ClientSpec, install, task_argv
from servecheck.config.model import Target
from servecheck.redact import redact
from servecheck.workflows.support import new_run_dir, reference_env, say

SHOWN = 1500  # characters of the request and of the answer that broke a client
TINY = ("tiny", "random")  # a served model named so is a random-weight CI model
# The embedded reference's context in a clients run: a coding agent's system prompt and tools
# alone are 2-14k tokens in its count (Claude Code, Codex CLI), far past the usual 512.
AGENT_CONTEXT = 131072
# the embedded reference's argv in a clients run, before the user's own
AGENT_REFERENCE_ARGS = ("--agent", "--max-model-len", str(AGENT_CONTEXT))
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "PYTHONPATH", "SERVECHECK_CACHE")


@dataclass(frozen=True, slots=True)
class ClientsSpec:
    """What ``servecheck clients`` runs."""

    target: str = "reference"
    targets_file: str | None = None
    model: str | None = None
    clients: tuple[str, ...] = ()  # names in CLIENTS; empty: all
    timeout_s: float = 180.0  # each client and route, its whole task
    out: Path = Path("reports")
    run_id: str | None = None
    install_only: bool = False
    reference_args: tuple[str, ...] = ()  # for the embedded reference, after its --agent


@dataclass(slots=True)
class Installed:
    seconds: float | None = None  # None: not installed
    cached: bool = False
    error: str = ""


@dataclass(slots=True)
class Outcome:
    """One client on one route: works | fails | not run."""

    client: str
    version: str
    route: str
    verdict: str
    protocol_only: bool
    install_s: float | None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""
    broke: str = ""  # the request and the answer that broke it
    seconds: float = 0.0

    def line(self) -> str:
        said = {True: "ok", False: "FAILED", None: "not judged"}
        tasks = "; ".join(f"{t['task']} {said[t['ok']]}" for t in self.tasks)
        scope = " (protocol only)" if self.protocol_only else ""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.client} {self.version} on {self.route}: {self.verdict}{scope}{why}" + (
            f" [{tasks}]" if tasks else ""
        )


@dataclass(slots=True)
class ClientsResult:
    run_dir: Path
    outcomes: list[Outcome]
    verdict: RunVerdict

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def _install(spec: ClientSpec) -> Installed:
    try:
        done = install(spec)
    except Exception as exc:  # noqa: BLE001 - an install failure is this client's outcome
        return Installed(error=f"install failed: {redact(str(exc)).splitlines()[0][:300]}")
    return Installed(round(done.seconds, 1), done.cached)


def _key(target: Target) -> str:
    """The target's key, which the clients send as a Bearer token."""
    headers = target.auth_headers()
    for name, value in headers.items():
        if name.lower() == "authorization" and value.lower().startswith("bearer "):
            return value[7:]
    # the SDKs insist on a key; a server without auth ignores it
    return next(iter(headers.values()), "servecheck-no-key")


def _model(spec: ClientsSpec, target: Target) -> str:
    return spec.model or (target.models or ["ref-tiny"])[0]


REQUEST_LINE = re.compile(rb"(?=(?:GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) /\S* HTTP/1\.[01]\r\n)")
STATUS_LINE = re.compile(rb"(?=HTTP/1\.[01] \d{3} )")


def _pairs(ex: netns.Exchange) -> list[tuple[bytes, bytes]]:
    """A kept-alive connection's (request, answer) pairs, in order."""
    sent = [b for b in REQUEST_LINE.split(bytes(ex.sent)) if b]
    got = [b for b in STATUS_LINE.split(bytes(ex.received)) if b]
    return [(req, got[n] if n < len(got) else b"") for n, req in enumerate(sent)]


def _status(answer: bytes) -> int:
    head = answer[:16].split(b" ")
    return int(head[1]) if len(head) > 1 and head[1].isdigit() else 0


def broke(exchanges: list[netns.Exchange]) -> str:
    """The request that broke a client and its answer: the first answered with an error (or
    not at all), else the last one made."""
    pairs = [pair for ex in exchanges for pair in _pairs(ex)]
    if not pairs:
        return "no request reached the target"
    req, answer = next((p for p in pairs if not 200 <= _status(p[1]) < 400), pairs[-1])
    text = (
        f"request:\n{req.decode('utf-8', 'replace')[:SHOWN]}\n"
        f"answer:\n{answer.decode('utf-8', 'replace')[:SHOWN] or '(none)'}"
    )
    return redact(text)


def _env(
    spec: ClientSpec, base: str, key: str, model: str, route: str, timeout: float
) -> dict[str, str]:
    # Only what a process needs, never the caller's other secrets: a third-party client gets
    # the target's key and nothing else of ours (PYTHONPATH is for the relay, which drops it).
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.update(dict(spec.telemetry_env))
    env.update(
        SC_BASE_URL=base, SC_API_KEY=key, SC_MODEL=model, SC_ROUTE=route, SC_TIMEOUT_S=str(timeout)
    )
    return env


def _tasks(stdout: str) -> list[dict[str, Any]]:
    tasks = []
    for line in stdout.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "task" in data:
            tasks.append(
                {
                    "task": str(data["task"]),
                    "ok": bool(data.get("ok")),
                    "detail": redact(str(data.get("detail", "")))[:300],
                    "unasked": bool(data.get("unasked")),
                }
            )
    return tasks


UNJUDGED = "not judged: the random-weight model answered without asking for the tool"


def judge(tasks: list[dict[str, Any]], random_model: bool) -> tuple[str, str]:
    """(verdict, reason) of a client's reported tasks. A random-weight model that answers
    without asking for the tool leaves the tool round trip unjudged (``ok`` None): the client
    is then ``partial``, never ``works``; against the scripted reference it must be asked."""
    for t in tasks:
        if random_model and t["task"] == "tool" and t["unasked"] and not t["ok"]:
            t["ok"], t["detail"] = None, UNJUDGED
    failed = [t for t in tasks if t["ok"] is False]
    if failed:
        return "fails", "; ".join(f"{t['task']}: {t['detail']}" for t in failed)
    if any(t["ok"] is None for t in tasks):
        return "partial", "; ".join(f"{t['task']}: {t['detail']}" for t in tasks if t["ok"] is None)
    return "works", ""


def run_one(
    spec: ClientSpec,
    route: str,
    target: Target,
    model: str,
    timeout_s: float,
    log: Path,
    random_model: bool = False,
    record: list[netns.Exchange] | None = None,
) -> tuple[str, list[dict[str, Any]], str, str]:
    """Run one client on one route in a namespace: (verdict, tasks, reason, what broke it);
    ``random_model``: a random-weight model that is not the scripted reference; ``record``
    gets the relay's exchanges (the client shape recorder reads its requests there)."""
    url = urlsplit(target.base_url)
    if url.scheme != "http" or not url.hostname:
        return "not run", [], f"only http:// targets can be relayed, not {url.scheme}://", ""
    port = url.port or 80
    folder = spec.folder
    # A socket of this run's own: two runs of one client (xdist workers, two users) must not
    # take each other's relay; a short path, as a Unix socket's is limited to 107 bytes.
    sock_dir = Path(tempfile.mkdtemp(prefix="servecheck-relay-"))
    relay = netns.Relay(sock_dir, url.hostname, port).start()
    inner = netns.free_port()
    base = f"http://127.0.0.1:{inner}{url.path.rstrip('/')}"
    env = _env(spec, base, _key(target), model, route, timeout_s)
    argv = netns.inside_argv(relay.sock, inner, task_argv(spec))
    proc = subprocess.Popen(  # noqa: S603 - our own argv
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=folder,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        reason = ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        reason = f"no end within {timeout_s:g} s (killed)"
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C reaches only our own process group)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        relay.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)
        if record is not None:
            record.extend(relay.exchanges)
    log.write_text(redact(f"$ {' '.join(argv)}\n--- stdout\n{out}\n--- stderr\n{err}\n"))
    tasks = _tasks(out)
    if not reason and not tasks:
        last = (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        reason = f"the client reported nothing: {redact(last)[:300]}"
    if reason:
        return "fails", tasks, reason, broke(relay.exchanges)
    verdict, reason = judge(tasks, random_model)
    return verdict, tasks, reason, broke(relay.exchanges) if verdict == "fails" else ""


def _outcomes(spec: ClientsSpec, chosen: list[ClientSpec], run_dir: Path) -> list[Outcome]:
    from servecheck.config import load_targets

    installs = {c.name: _install(c) for c in chosen}
    no_ns = netns.unavailable()
    target = load_targets(spec.targets_file).get(spec.target)
    model = _model(spec, target)
    tiny = spec.target == "reference" or any(w in model.lower() for w in TINY)
    outcomes = []
    for client in chosen:
        inst = installs[client.name]
        for route in client.routes:
            o = Outcome(client.title, client.version, route, "not run", tiny, inst.seconds)
            began = time.monotonic()
            if inst.error or no_ns:
                o.reason = inst.error or f"no network namespace: {no_ns}"
            elif route == "responses" and target.capabilities.responses is False:
                o.verdict, o.reason = "skipped", "the target declares {responses: false}"
            else:
                log = run_dir / f"{client.name}-{route}.log"
                o.verdict, o.tasks, o.reason, o.broke = run_one(
                    client,
                    route,
                    target,
                    model,
                    spec.timeout_s,
                    log,
                    random_model=tiny and spec.target != "reference",
                )
            o.seconds = round(time.monotonic() - began, 1)
            say(f"  {o.line()}")
            outcomes.append(o)
    return outcomes


def run_clients(spec: ClientsSpec) -> ClientsResult:
    """Install (once) and run the chosen clients against the target; write ``clients.json``."""
    from servecheck.config import load_targets

    chosen = [CLIENTS[n] for n in spec.clients] or list(CLIENTS.values())
    if spec.target != "reference":
        load_targets(spec.targets_file).get(spec.target)  # a usage error before the run folder
    run_dir = new_run_dir(spec.out, "clients", spec.target, spec.run_id)
    if spec.install_only:
        outcomes = []
        for c in chosen:
            inst = _install(c)
            o = Outcome(
                c.title,
                c.version,
                "-",
                "installed" if not inst.error else "not run",
                False,
                inst.seconds,
                reason=inst.error,
            )
            say(f"  {c.label}: {o.reason or f'installed in {inst.seconds} s'}")
            outcomes.append(o)
        verdict = RunVerdict.of(not any(o.reason for o in outcomes), *[o.reason for o in outcomes])
    else:
        say(f"servecheck clients: {spec.target}; report {run_dir}")
        with reference_env(
            [spec.target],
            extra_args=("--agent", "--max-model-len", str(AGENT_CONTEXT), *spec.reference_args),
            log_path=run_dir / "reference-server.log",
        ):
            outcomes = _outcomes(spec, chosen, run_dir)
        verdict = compose(
            RunVerdict.of(
                o.verdict == "works",
                f"{o.client} {o.version} on {o.route}: {o.verdict}: {o.reason}",
                otherwise=FAIL if o.verdict == "fails" else INCONCLUSIVE,
            )
            for o in outcomes
            if o.verdict != "skipped"  # a route the target says it does not serve
        )
    data = {
        "target": spec.target,
        "verdict": verdict.status,
        "reasons": verdict.reasons,
        "clients": [asdict(o) for o in outcomes],
    }
    (run_dir / "clients.json").write_text(json.dumps(data, indent=2) + "\n")
    return ClientsResult(run_dir, outcomes, verdict)


__all__ = ["ClientsResult", "ClientsSpec", "Outcome", "broke", "run_clients", "run_one"]
