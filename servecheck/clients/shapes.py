"""Record client shapes: the fixtures CLIENT-SHAPE-* replays, taken from a real client's run.

Each chosen client runs its task against the embedded reference in ``--agent`` mode, inside its
network namespace, exactly as in ``servecheck clients``; the relay keeps the bytes of every
exchange. From them this module takes the client's first request on each route it speaks that
offers tools (the tool task: it carries every field the client sends, and the shape whose answer
a client's parser is most particular about), or its first request on the route when none does,
sanitises it and writes ``<folder>/<client>.json`` in the fixture format
(:func:`servecheck.checks.surfaces.client_shapes.load_shape`).

Sanitising: authorization, key and cookie headers and every hop header are dropped (only the
headers that say who the client is stay: user-agent, ``x-stainless-*`` but its retry timing,
``anthropic-*``, ``openai-beta`` ...); ``model`` becomes ``"MODEL"``; ids a client makes up per
run (a session id, a user id, a prompt-cache key) and the client's scratch folder become stable
placeholders. A fixture names no date but the day of recording on its source line, so two runs
on one day write the same files.
"""

from __future__ import annotations

import datetime
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servecheck.clients import netns
from servecheck.clients.catalog import CLIENTS, ClientSpec, install
from servecheck.clients.run import AGENT_REFERENCE_ARGS, run_one
from servecheck.workflows.support import reference_env, say

ROUTE_PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}
# What says who the client is; all else (auth, cookies, hop headers, lengths) is dropped.
KEPT_HEADERS = re.compile(
    r"^(user-agent|x-stainless-(?!retry-count|timeout|read-timeout|async)[a-z-]+|anthropic-[a-z-]+|"
    r"openai-beta|x-app|originator|version)$",
    re.IGNORECASE,
)
# How clients write the day of the run into a prompt (opencode: "Today's date: Sun Dec 06
# 2026"): only the recording's own day is replaced, never another date, which may be a protocol
# value (anthropic-version 2023-06-01, a beta named interleaved-thinking-2025-05-14).
DAY_FORMATS = ("%Y-%m-%d", "%a %b %d %Y", "%A, %B %d, %Y", "%B %d, %Y", "%Y/%m/%d", "%m/%d/%Y")
SECRET_HEADERS = re.compile(r"auth|key|cookie|token|session", re.IGNORECASE)
RANDOM = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{32,64}\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request the relay carried."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(slots=True)
class ShapesSpec:
    """What ``servecheck clients --record-shapes`` records, and where it writes."""

    folder: Path
    clients: tuple[str, ...] = ()  # names in CLIENTS; empty: all
    timeout_s: float = 180.0
    today: str = field(default_factory=lambda: datetime.date.today().isoformat())


@dataclass(slots=True)
class Recorded:
    """One client's recording: the file written, or why none was."""

    client: str
    path: Path | None = None
    reason: str = ""

    def line(self) -> str:
        return f"{self.client}: {self.path}" if self.path else f"{self.client}: {self.reason}"


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


def parse_request(raw: bytes) -> Request | None:
    """A raw HTTP/1.1 request (as the relay kept it); None when it is no JSON request."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) < 3:
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip()] = value.strip()
    lower = {k.lower(): v for k, v in headers.items()}
    if "chunked" in lower.get("transfer-encoding", "").lower():
        rest = _dechunk(rest)
    elif "content-length" in lower:
        rest = rest[: int(lower["content-length"])]
    try:
        body = json.loads(rest.decode("utf-8"))
    except ValueError:
        return None
    return Request(parts[0], parts[1].split("?")[0], headers, body)


def requests_of(exchanges: list[netns.Exchange]) -> list[Request]:
    """Every JSON request of the relayed connections, in the order the connections opened."""
    from servecheck.clients.run import REQUEST_LINE

    found = []
    for ex in exchanges:
        for raw in REQUEST_LINE.split(bytes(ex.sent)):
            req = parse_request(raw) if raw else None
            if req is not None:
                found.append(req)
    return found


def pick(requests: list[Request], route: str) -> Request | None:
    """The client's first request on ``route`` that offers tools, else its first there."""
    on_route = [
        r for r in requests if r.method == "POST" and r.path.endswith(ROUTE_PATHS.get(route, "?"))
    ]
    with_tools = [r for r in on_route if isinstance(r.body, dict) and r.body.get("tools")]
    # The relay lists connections as they opened, and a client that keeps one alive sends a
    # later turn on an older connection: the tool task's first request is the one with the
    # shortest conversation (its turn 2 carries the call and its result as well).
    with_tools.sort(key=_turns)
    found = with_tools or on_route
    return found[0] if found else None


def _turns(req: Request) -> int:
    said = req.body.get("messages", req.body.get("input"))
    return len(said) if isinstance(said, list) else 0


def days(today: str) -> tuple[str, ...]:
    """The ways a client may write ``today`` (an ISO date) into its prompt."""
    day = datetime.date.fromisoformat(today)
    return tuple(dict.fromkeys(day.strftime(f) for f in DAY_FORMATS))


def _stable(value: Any, folder: str, today: tuple[str, ...] = ()) -> Any:
    """``value`` with the per-run randomness a client adds replaced by placeholders."""
    if isinstance(value, dict):
        return {k: _stable(v, folder, today) for k, v in value.items()}
    if isinstance(value, list):
        return [_stable(v, folder, today) for v in value]
    if isinstance(value, str):
        text = value.replace(folder, "/work/project") if folder else value
        for day in today:
            text = text.replace(day, "DAY")
        return RANDOM.sub("RANDOM-ID", text)
    return value


def sanitise(
    req: Request, folder: str = "", today: str = ""
) -> tuple[dict[str, str], dict[str, Any]]:
    """(headers, body) of ``req`` fit to ship: no secret, the model a placeholder, stable;
    ``folder`` the client's scratch folder, ``today`` the recording's day (ISO)."""
    stamps = days(today) if today else ()
    headers = {
        k: _stable(v, folder, stamps)
        for k, v in req.headers.items()
        if KEPT_HEADERS.match(k) and not SECRET_HEADERS.search(k)
    }
    body = _stable(dict(req.body), folder, stamps)
    if "model" in body:
        body["model"] = "MODEL"
    return headers, body


def fixture_name(spec: ClientSpec, route: str) -> str:
    """The fixture's file stem: the client's name, and the route when it speaks more than one
    (the Agents SDK's chat completions shape keeps the plain name the grid already reads)."""
    return spec.name if route == spec.routes[0] else f"{spec.name}-{route}"


def fixture(spec: ClientSpec, route: str, req: Request, today: str, folder: str = "") -> str:
    """The fixture file's text for ``req``, the request ``spec`` sent on ``route``."""
    headers, body = sanitise(req, folder, today)
    what = "streamed tool task" if body.get("tools") else "first request"
    data = {
        "client": spec.title,
        "package": " + ".join(p.rsplit("@", 1)[0].split("==")[0] for p in spec.packages),
        "version": spec.version,
        "route": ROUTE_PATHS[route],
        "source": f"recorded {today} by servecheck's shape recorder: the {what} of "
        f"{spec.label} ({' '.join(spec.packages)}) against the reference's scripted agent mode, "
        "through the namespace relay; sanitised (no key, auth or cookie header; model MODEL; "
        "per-run ids RANDOM-ID)",
        "headers": headers,
        "body": body,
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _record_one(spec: ClientSpec, target: Any, shapes: ShapesSpec, log_dir: Path) -> list[Recorded]:
    out = []
    for route in spec.routes:
        exchanges: list[netns.Exchange] = []
        verdict, _, reason, _ = run_one(
            spec,
            route,
            target,
            "ref-tiny",
            shapes.timeout_s,
            log_dir / f"{spec.name}-{route}.log",
            record=exchanges,
        )
        req = pick(requests_of(exchanges), route)
        name = fixture_name(spec, route)
        if req is None:
            out.append(Recorded(name, reason=f"no request on {route} ({verdict}: {reason})"))
            continue
        path = shapes.folder / f"{name}.json"
        path.write_text(fixture(spec, route, req, shapes.today, str(spec.folder)))
        out.append(Recorded(name, path))
    return out


def record_shapes(shapes: ShapesSpec) -> list[Recorded]:
    """Run each chosen client against the embedded reference (``--agent``) and write its
    fixtures into ``shapes.folder``; a client that cannot run is a :class:`Recorded` reason."""
    from servecheck.config import load_targets

    chosen = [CLIENTS[n] for n in shapes.clients] or list(CLIENTS.values())
    no_ns = netns.unavailable()
    if no_ns:
        return [Recorded(c.name, reason=f"no network namespace: {no_ns}") for c in chosen]
    shapes.folder.mkdir(parents=True, exist_ok=True)
    recorded: list[Recorded] = []
    log_dir = Path(tempfile.mkdtemp(prefix="servecheck-shapes-"))
    with reference_env(
        ["reference"],
        extra_args=AGENT_REFERENCE_ARGS,
        log_path=log_dir / "reference-server.log",
    ):
        target = load_targets(None).get("reference")
        for client in chosen:
            try:
                install(client)
            except Exception as exc:  # noqa: BLE001 - an install failure is this client's outcome
                recorded.append(Recorded(client.name, reason=f"install failed: {exc}"[:300]))
                continue
            for one in _record_one(client, target, shapes, log_dir):
                say(f"  {one.line()}")
                recorded.append(one)
    return recorded


def default_folder() -> Path | None:
    """The package's fixture folder when servecheck runs from a checkout (a folder that is a
    file tree one can write to), else None: the caller must name one."""
    here = Path(__file__).resolve().parents[1] / "checks" / "data" / "client_shapes"
    checkout = (Path(__file__).resolve().parents[2] / "pyproject.toml").is_file()
    return here if checkout and here.is_dir() else None


__all__ = [
    "Recorded",
    "Request",
    "ShapesSpec",
    "default_folder",
    "fixture",
    "parse_request",
    "pick",
    "record_shapes",
    "requests_of",
    "sanitise",
]
