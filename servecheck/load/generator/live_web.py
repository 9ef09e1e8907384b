"""``servecheck load --web``: the live view inside Locust's own web UI (no second web app).

:func:`install` adds to Locust's Flask app (``environment.web_ui.app``, handed in by
``load/generator/locust_user.py``, so this module needs no locust import):

* an **LLM** tab in Locust's UI (its ``extendedTabs`` / ``extendedTables``: the window's TTFT,
  TTFA, ITL and E2E quantiles, requests and tokens per second, the error classes), filled from
  the ``extended_stats`` that Locust's UI reads with its own ``/stats/requests`` poll;
* ``/llm``: live charts of every slice of the run (SVG drawn by the page, which polls
  ``/llm/live.json`` once a second), linked from Locust's *Download Data* tab;
* ``/llm/live.json``: the :class:`~servecheck.load.generator.live.LiveView` snapshot;
* with ``auth`` (``USER:PASS``), HTTP Basic authentication on every route, Locust's own
  included: what ``--web`` bound beyond loopback requires (checked by the command's spec).
"""

from __future__ import annotations

import base64
import hmac
import json
from importlib import resources
from typing import Any

from servecheck.load.generator.live import LiveView

__all__ = ["install", "live_page", "tab_rows"]


def live_page() -> str:
    """The ``/llm`` page: a file the report package ships (``report/pages/live.html``: the page
    is for people, so it lives beside the other pages), read as data, not imported."""
    return resources.files("servecheck.report").joinpath("pages/live.html").read_text("utf-8")


TAB_KEY = "llm"
_TABLE = [
    {"key": "metric", "title": "Metric (last complete window)"},
    {"key": "value", "title": "Value"},
    {"key": "p50", "title": "p50 ms"},
    {"key": "p95", "title": "p95 ms"},
    {"key": "p99", "title": "p99 ms"},
]


def tab_rows(snap: dict[str, Any]) -> list[dict[str, Any]]:
    """The LLM tab's rows from a snapshot (an empty table before the first complete window)."""
    win = snap.get("window")
    tot = snap["totals"]
    rows: list[dict[str, Any]] = []
    if win is not None:
        span = f"{win['start_s']:.0f}-{win['end_s']:.0f} s"
        for m, name in (("ttft", "TTFT"), ("ttfa", "TTFA"), ("itl", "ITL"), ("e2e", "E2E")):
            q = win[f"{m}_ms"]
            rows.append({"metric": name, "value": span, **{k: q[k] for k in ("p50", "p95", "p99")}})
        for key, name in (
            ("requests_per_s", "requests/s"),
            ("output_tokens_per_s", "output tokens/s"),
            ("in_flight", "in flight (mean)"),
            ("error_ratio", "error ratio"),
        ):
            rows.append({"metric": name, "value": win[key], "p50": "", "p95": "", "p99": ""})
        for cls, n in win["error_classes"].items():
            rows.append({"metric": f"errors: {cls}", "value": n, "p50": "", "p95": "", "p99": ""})
    rows.append(
        {
            "metric": "run so far: requests ok / failed",
            "value": f"{tot['ok']} / {sum(tot['errors'].values())}",
            "p50": "",
            "p95": "",
            "p99": "",
        }
    )
    return rows


def _authorised(header: str | None, auth: str) -> bool:
    if not header or not header.startswith("Basic "):
        return False
    try:
        given = base64.b64decode(header[6:], validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return False
    return hmac.compare_digest(given.encode(), auth.encode())


def install(web_ui: Any, view: LiveView, auth: str | None = None) -> None:
    """Hook the live view into Locust's web UI (its ``web_ui`` object: ``app``,
    ``template_args``)."""
    from flask import Response, jsonify, request

    app = web_ui.app
    page = live_page()
    if auth:

        @app.before_request
        def _basic_auth() -> Any:
            if _authorised(request.headers.get("Authorization"), auth):
                return None
            return Response(
                "servecheck load: the live view needs authentication\n",
                401,
                {"WWW-Authenticate": 'Basic realm="servecheck load"'},
            )

    web_ui.template_args["extendedTabs"] = [{"title": "LLM", "key": TAB_KEY}]
    web_ui.template_args["extendedTables"] = [{"key": TAB_KEY, "structure": _TABLE}]
    web_ui.template_args["extendedCsvFiles"] = [
        {"href": "./llm", "title": "LLM live charts (servecheck: TTFT, TTFA, ITL, E2E per window)"},
        {"href": "./llm/live.json", "title": "LLM live view as JSON (servecheck)"},
    ]

    @app.route("/llm")
    def _llm_page() -> Any:
        return Response(page, mimetype="text/html")

    @app.route("/llm/live.json")
    def _llm_json() -> Any:
        return jsonify(view.snapshot())

    @app.after_request
    def _extend_stats(response: Any) -> Any:
        if request.path.rstrip("/").endswith("/stats/requests") and response.is_json:
            body = response.get_json()
            body["extended_stats"] = [{"key": TAB_KEY, "data": tab_rows(view.snapshot())}]
            response.set_data(json.dumps(body))
        return response
