"""Readiness probing shared by the HEALTH checks and ``servecheck wait-ready``."""

from __future__ import annotations

import time
from dataclasses import dataclass

from servecheck.client.http import Exchange, ServeClient
from servecheck.config.model import Target
from servecheck.engines.registry import profile_for


@dataclass(slots=True)
class HealthState:
    state: str  # ready | loading | down | unhealthy
    detail: str
    exchange: Exchange | None = None


def health_url(target: Target) -> str:
    if target.health_url:
        return target.health_url
    path = profile_for(target).health_path
    return (
        target.base_url + path.removeprefix("/v1")
        if path.startswith("/v1")
        else target.server_root + path
    )


def probe_health(client: ServeClient, target: Target, timeout_s: float = 5.0) -> HealthState:
    """One look at the health endpoint: ready (2xx), loading (503), down (no connection), unhealthy."""
    url = health_url(target)
    ex = client.get(url, timeout_s=timeout_s)
    if ex.error == "connect":
        return HealthState("down", f"nothing answers at {url}: {ex.error_message}", ex)
    if ex.error:
        return HealthState("down", f"{url} did not answer: {ex.describe()}", ex)
    if ex.status is not None and 200 <= ex.status < 300 and "html" in ex.content_type:
        # No engine answers health with a web page; a sign-in proxy or a wrong base_url does.
        return HealthState(
            "unhealthy",
            f"{url} answered {ex.status} with an HTML page, not the server's health "
            f"(a sign-in proxy or the wrong URL?): {ex.describe(200)}",
            ex,
        )
    if ex.status is not None and 200 <= ex.status < 300:
        return HealthState("ready", f"{url} answered {ex.status}", ex)
    if ex.status == 503:
        return HealthState("loading", f"{url} answered 503 (still loading): {ex.describe(200)}", ex)
    return HealthState("unhealthy", f"{url} answered {ex.describe(300)}", ex)


def wait_ready(
    client: ServeClient,
    target: Target,
    *,
    timeout_s: float,
    initial_s: float = 0.25,
    max_interval_s: float = 5.0,
    on_poll: object = None,
) -> HealthState:
    """Poll with exponential back-off until ready or ``timeout_s``; return the last state seen."""
    deadline = time.monotonic() + timeout_s
    interval = initial_s
    state = probe_health(client, target, timeout_s=min(5.0, timeout_s))
    while state.state != "ready":
        if callable(on_poll):
            on_poll(state)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(interval, remaining))
        interval = min(interval * 2, max_interval_s)
        state = probe_health(
            client, target, timeout_s=min(5.0, max(0.5, deadline - time.monotonic()))
        )
    return state
