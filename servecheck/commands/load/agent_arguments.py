"""``servecheck load --agent``: agent sessions' knobs (servecheck/load/workload/agent.py), parsed
here into the spec's typed :class:`~servecheck.load.workload.agent.AgentShape`; a sessions file
it names is read once here, so a bad one stops the run before any request."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from servecheck.load.workload.agent import AGENT_KEYS, AgentShape, load_sessions, parse_agent


def add_agent_arguments(g: argparse._ArgumentGroup) -> None:
    """``--agent KEY=VALUE,...`` (env SERVECHECK_LOAD_AGENT)."""
    g.add_argument(
        "--agent",
        metavar="KEY=VALUE,...",
        default=os.environ.get("SERVECHECK_LOAD_AGENT"),
        help="agent sessions (implies --scenario agent): "
        f"{', '.join(AGENT_KEYS)}, e.g. turns=8,tools=12,system_tokens=4000,fork=0.25x3,"
        "tool_wait=exp:1; source=FILE replays AIPerf multi_turn or servecheck trace sessions "
        "(docs/load.md); env SERVECHECK_LOAD_AGENT",
    )


def agent_fields(pick: Callable[[str], Any]) -> dict[str, Any]:
    """The spec's ``agent``: the option's text, else the plan's (load_plan checked it)."""
    raw = pick("agent")
    if raw is None:
        return {"agent": None}
    # A plan's mapping was checked and normalised by load_plan (AgentShape.to_dict's keys).
    shape = AgentShape.from_dict(raw) if isinstance(raw, Mapping) else parse_agent(str(raw))
    if shape.source:
        path = Path(shape.source).expanduser().resolve()
        load_sessions(path, shape.source_format)  # a usage error naming the file and line
        shape = AgentShape.from_dict({**shape.to_dict(), "source": str(path)})
    return {"agent": shape}
