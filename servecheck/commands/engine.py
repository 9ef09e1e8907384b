"""``servecheck engine``: install, start, stop and inspect real local engines.

Examples::

    servecheck engine up llamacpp            # build/install if needed, start, wait until ready
    servecheck engine up vllm-chunked        # vLLM with chunked prefill on (port 8012)
    servecheck engine up all
    servecheck engine status
    servecheck engine down all
    servecheck engine model --out /tmp/tiny  # only write the tiny models

Servers run detached (they outlive this command); their pid, port and log path are kept under
``$SERVECHECK_CACHE/state`` (default ``~/.cache/servecheck/state``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from servecheck.errors import UsageError

ACTIONS = ("up", "down", "status", "install", "model")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``servecheck engine``."""
    from servecheck.engines.registry import ENGINE_PORTS

    names = ", ".join(f"{n} ({p})" for n, p in ENGINE_PORTS.items())
    parser.epilog = f"engines and default ports: {names}"
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="install if needed, start and wait until the engine serves")
    up.add_argument("names", nargs="+", metavar="NAME", help="engine name(s) or 'all'")
    up.add_argument(
        "--port",
        type=int,
        metavar="P",
        help="port (default: the engine's fixed port); one engine only",
    )
    up.add_argument(
        "--no-install", action="store_true", help="fail instead of installing a missing engine"
    )
    down = sub.add_parser("down", help="stop an engine (SIGTERM, then SIGKILL)")
    down.add_argument("names", nargs="+", metavar="NAME", help="engine name(s) or 'all'")
    st = sub.add_parser("status", help="show the engines started from this machine's cache")
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    inst = sub.add_parser(
        "install", help="install an engine into its own cache folder (idempotent)"
    )
    inst.add_argument("names", nargs="+", metavar="NAME", help="engine name(s) or 'all'")
    model = sub.add_parser("model", help="write the tiny test models (HF Llama + GGUF)")
    model.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="parent directory (default: $SERVECHECK_CACHE/models)",
    )
    model.add_argument(
        "--seed", type=int, default=1234, metavar="N", help="weights/tokenizer seed (default: 1234)"
    )
    model.add_argument(
        "--kind",
        choices=("tool-caller", "random"),
        metavar="KIND",
        help="tool-caller (answers with a tool call when tools are offered) or random "
        "(default: $SERVECHECK_TINY_MODEL, else tool-caller)",
    )


def _expand(names: list[str]) -> list[str]:
    from servecheck.engines.registry import ENGINE_NAMES, get_engine

    if "all" in names:
        return list(ENGINE_NAMES)
    for name in names:
        get_engine(name)  # raises UsageError with a suggestion
    # keep the registry's order (litellm after llamacpp) and drop duplicates
    return [n for n in ENGINE_NAMES if n in names]


def run(args: argparse.Namespace) -> int:
    """Dispatch one ``engine`` action; returns the process exit code."""
    from servecheck.engines.base import EngineError, progress_to

    try:
        if args.action == "model":
            return _model(args)
        if args.action == "status":
            return _status(args)
        names = _expand(args.names)
        if args.action == "install":
            with progress_to(sys.stdout):
                return _install(names)
        if args.action == "up":
            if args.port is not None and len(names) != 1:
                raise UsageError("--port needs exactly one engine name")
            with progress_to(sys.stdout):
                return _up(names, args.port, install=not args.no_install)
        if args.action == "down":
            return _down(names, all_=("all" in args.names))
    except EngineError as exc:
        print(f"servecheck engine: {exc}", flush=True)
        return 1
    raise UsageError(f"unknown action {args.action!r}")


def _model(args: argparse.Namespace) -> int:
    import dataclasses

    from servecheck.engines.models import default_spec, ensure_tiny_model

    spec = default_spec()
    if args.kind is not None:
        spec = dataclasses.replace(spec, tool_caller=(args.kind == "tool-caller"))
    t0 = time.monotonic()
    m = ensure_tiny_model(dataclasses.replace(spec, seed=args.seed), args.out)
    print(f"tiny model ({time.monotonic() - t0:.1f} s): {m.root}")
    print(f"  hf:   {m.hf_dir}")
    print(f"  gguf: {m.gguf_path}")
    return 0


def _install(names: list[str]) -> int:
    from servecheck.engines.registry import get_engine

    for name in names:
        engine = get_engine(name)
        if name == "vllm-chunked" and "vllm" in names:
            continue  # same install as vllm
        res = engine.install()
        how = "cached" if res.cached else "installed"
        print(f"{name}: install {res.seconds:.0f} s ({how}) -> {res.location}", flush=True)
    return 0


def _up(names: list[str], port: int | None, *, install: bool) -> int:
    from servecheck.engines.base import EngineError, running_states, start
    from servecheck.engines.models import ensure_tiny_model
    from servecheck.engines.registry import get_engine

    t0 = time.monotonic()
    ensure_tiny_model()
    model_s = time.monotonic() - t0
    if model_s > 0.5:
        print(f"tiny model: generated in {model_s:.1f} s", flush=True)
    failed = 0
    for name in names:
        engine = get_engine(name)
        try:
            if (
                name == "litellm"
                and "llamacpp" not in names
                and _litellm_needs_llamacpp(engine)
                and not any(s.name == "llamacpp" for s in running_states())
            ):
                print(
                    "litellm: its upstream llamacpp is not running; starting it first", flush=True
                )
                _up(["llamacpp"], None, install=install)
            if install:
                res = engine.install()
                inst = f"install {res.seconds:.0f} s" + (" (cached)" if res.cached else "")
            else:
                inst = "install skipped"
            want_port = port or engine.default_port
            already = any(s.name == name and s.port == want_port for s in running_states())
            t1 = time.monotonic()
            state = start(engine, port, echo=lambda *_: None)
            if already:
                when = "already running"
            else:
                when = f"ready in {state.ready_s if state.ready_s is not None else time.monotonic() - t1:.0f} s"
            print(
                f"{name}: {inst}, {when}: {state.base_url} model {state.served_model!r} "
                f"context {state.context_length} (pid {state.pid}, log {state.log})",
                flush=True,
            )
            print(_next_step(state.port), flush=True)
        except EngineError as exc:
            failed += 1
            print(f"{name}: FAILED: {exc}", flush=True)
    return 1 if failed else 0


def _next_step(port: int) -> str:
    """The target to test the engine on ``port`` with, and the command to run next (a
    ./targets.yaml of the user's own that does not list it: with the way round it)."""
    from servecheck.config.loader import BUILTIN_FILE, DEFAULT_FILE, shipped_target

    name, listed = shipped_target(port)
    if name is None:
        return f"  target: none shipped for port {port} (add one to targets.yaml: docs/targets.md)"
    if listed:
        return f"  target: {name}; next: servecheck check --target {name}"
    return (
        f"  target: {name} (shipped; ./{DEFAULT_FILE} does not list it); next: "
        f"servecheck check --target {name} --targets-file {BUILTIN_FILE}"
    )


def _litellm_needs_llamacpp(engine: object) -> bool:
    from servecheck.engines.litellm import DEFAULT_UPSTREAM, LiteLlm

    return isinstance(engine, LiteLlm) and engine.upstream() == DEFAULT_UPSTREAM


def _down(names: list[str], *, all_: bool) -> int:
    from servecheck.engines.base import describe, orphaned, running_states, stop_state
    from servecheck.engines.registry import ENGINE_NAMES, get_engine

    stopped = 0
    for state in running_states():
        if not all_ and state.name not in names:
            continue
        t0 = time.monotonic()
        timeout = 20.0
        if state.name in ENGINE_NAMES:  # another servecheck's engine: the default bound
            timeout = get_engine(state.name).stop_timeout_s
        how = f"its server (pid {state.pid}) had exited; " if orphaned(state) else ""
        procs = stop_state(state, timeout_s=timeout)
        stopped += 1
        print(
            f"{state.name}: stopped (port {state.port}) in {time.monotonic() - t0:.1f} s: "
            f"{how}{len(procs)} process(es): {describe(procs) or 'none left'}"
        )
    if not stopped:
        print("no matching engine running")
    return 0


def _status(args: argparse.Namespace) -> int:
    from servecheck.engines.status import status_rows

    rows, notes = status_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no engine running")
        return 0
    header = f"{'NAME':<13} {'PORT':>5} {'PID':>7} {'STATE':<8} {'RSS MB':>7} {'CTX':>5}  MODEL            BASE URL"
    print(header)
    for r in rows:
        print(
            f"{r['name']:<13} {r['port']:>5} {r['pid']:>7} {r['state']:<8} {r['rss_mb']:>7} "
            f"{r['context_length']:>5}  {r['model']:<16} {r['base_url']}"
        )
    for note in notes:
        print(note)
    return 0
