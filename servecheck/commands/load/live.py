"""``servecheck load``'s live-view options: Locust's web UI with an LLM tab, an OpenMetrics
endpoint, OTLP export (load/generator/live.py, live_web.py, live_otlp.py), and their spec fields."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

FIELD_OPTIONS = {
    "web": "--web",
    "web_auth": "--web-auth",
    "metrics_port": "--metrics-port",
    "otlp": "--otlp",
}


def add_live_arguments(g: argparse._ArgumentGroup) -> None:
    """Watching a run live (docs/load.md, "Watching a run live")."""
    env = os.environ.get
    g.add_argument(
        "--web",
        nargs="?",
        const="127.0.0.1:8089",
        metavar="[HOST:]PORT",
        default=env("SERVECHECK_LOAD_WEB"),
        help="serve Locust's web UI while the run goes, with an LLM tab (TTFT, TTFA, ITL, E2E, "
        "tokens/s and error classes per window) and live charts at /llm (default address "
        "127.0.0.1:8089; beyond loopback --web-auth is required); env SERVECHECK_LOAD_WEB",
    )
    g.add_argument(
        "--web-auth",
        metavar="USER:PASS",
        default=env("SERVECHECK_WEB_AUTH"),
        help="HTTP Basic credentials for --web (required when it is bound beyond loopback); "
        "better given as env SERVECHECK_WEB_AUTH, which no process list shows",
    )
    g.add_argument(
        "--metrics-port",
        metavar="[HOST:]PORT",
        default=env("SERVECHECK_LOAD_METRICS_PORT"),
        help="serve the generator's live stats as OpenMetrics at http://HOST:PORT/metrics for "
        "Prometheus (default host 127.0.0.1; names in docs/load.md, dashboard in "
        "deploy/grafana/); env SERVECHECK_LOAD_METRICS_PORT",
    )

    g.add_argument(
        "--otlp",
        metavar="URL",
        default=env("SERVECHECK_LOAD_OTLP"),
        help="push the same live stats as OpenTelemetry metrics over OTLP/HTTP to URL (e.g. "
        "http://127.0.0.1:4318/v1/metrics) every 5 s; needs pip install 'servecheck[otlp]'; "
        "env SERVECHECK_LOAD_OTLP",
    )


def live_fields(o: Callable[[str], Any]) -> dict[str, Any]:
    """The spec's ``web`` / ``web_auth`` / ``metrics_port`` / ``otlp`` (load/run.py checks
    them)."""
    names = ("web", "web_auth", "metrics_port", "otlp")
    return {name: o(name) for name in names}
