"""The one place that builds an httpx client for a target (httpx's own ``BaseClient`` idea).

Every client that talks to a target comes from :func:`sync_client` or :func:`async_client` over
one :class:`ClientSettings`: the timing client of the checks and load runs, the soak cycle, the
abandon probe, cold start, the cutover probes, ``servecheck init``, wait-ready, the telemetry
scrapes of a target's /metrics and /tokenize. So what every request shares is decided here,
once, and no caller can forget it:

- **proxies**: never taken from the environment (``trust_env=False``): ``HTTP(S)_PROXY`` and
  ``.netrc`` of the shell do not change where a target's requests go or what they carry; a
  proxy of your own goes in as a ``transport``;
- **TLS**: the target's ``verify_tls`` (a private CA in ``SSL_CERT_FILE`` is still honoured);
  one SSL context per verify setting and CA environment, shared by the process's clients
  (loading the CA bundle took ~35 ms for every client, most of a load run's own start-up
  requests; every client here speaks HTTP/1.1, so the context's ALPN is the same for all);
- **timeouts and limits**: the settings' ``timeout_s`` / ``connect_timeout_s`` and
  ``max_connections`` / ``keepalive``;
- **TCP_NODELAY** on every connection: a request's small writes are not held back by Nagle's
  algorithm (a delayed ACK would add up to 40 ms to a measured time);
- **headers**: the target's headers and auth (``ClientSettings.for_target``), registered for
  redaction when the target was built; settings from raw values (``ClientSettings.for_url``)
  register their header values here, so no error message or report can show them.

``tests/test_client_factory.py`` fails if any other module constructs an httpx client.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from dataclasses import dataclass, replace
from typing import Any

import httpx

from servecheck.client.bounded import MAX_BODY_BYTES, bounded_transports
from servecheck.client.stalls import StallGuard
from servecheck.config.model import Target
from servecheck.redact import register_headers

_NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


@dataclass(slots=True)
class ClientSettings:
    """What every request to one target shares."""

    base_url: str
    headers: dict[str, str]
    timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    verify_tls: bool = True
    max_connections: int = 100
    keepalive: bool = True
    max_body_bytes: int = MAX_BODY_BYTES
    # The check run's memory of routes whose responses never complete (client/stalls.py):
    # shared by every client made from these settings or a copy of them; None outside a run.
    stall_guard: StallGuard | None = None

    @classmethod
    def for_target(cls, target: Target, **overrides: Any) -> ClientSettings:
        """The target's base URL, headers and auth, timeouts and TLS; ``overrides`` replace fields."""
        headers = {**target.headers, **target.auth_headers()}
        values: dict[str, Any] = {
            "base_url": target.base_url,
            "headers": headers,
            "timeout_s": target.timeout_s,
            "connect_timeout_s": target.connect_timeout_s,
            "verify_tls": target.verify_tls,
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def for_url(
        cls, url: str, headers: dict[str, str] | None = None, **overrides: Any
    ) -> ClientSettings:
        """Settings for a URL that is no targets.yaml entry (yet): a metrics URL, ``init``'s probe."""
        hdrs = dict(headers or {})
        register_headers(hdrs)
        return cls(url, hdrs, **overrides)

    def with_(self, **changes: Any) -> ClientSettings:
        """A copy with ``changes`` (a probe's own timeout or connection cap)."""
        return replace(self, **changes)

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)

    def limits(self) -> httpx.Limits:
        return httpx.Limits(
            max_connections=self.max_connections,
            max_keepalive_connections=self.max_connections if self.keepalive else 0,
        )


def _options(settings: ClientSettings, default_headers: bool) -> dict[str, Any]:
    return {
        "timeout": settings.timeout(),
        "headers": settings.headers if default_headers else None,
        "follow_redirects": False,
        "trust_env": False,
    }


_CONTEXTS: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}
_CONTEXTS_LOCK = threading.Lock()


def _ssl_context(verify: bool) -> ssl.SSLContext:
    """The process's SSL context for ``verify`` and the current ``SSL_CERT_FILE`` / ``_DIR``
    (what httpx's transport would build for each client, built once)."""
    key = (verify, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _CONTEXTS_LOCK:
        ctx = _CONTEXTS.get(key)
        if ctx is None:
            ctx = _CONTEXTS[key] = httpx.create_ssl_context(verify=verify, trust_env=True)
        return ctx


def ssl_context(verify: bool) -> ssl.SSLContext:
    """The process's shared SSL context for ``verify``: for a reader that opens its own sockets
    (the load generator's load/generator/wire.py), so it trusts what every httpx client trusts."""
    return _ssl_context(verify)


def sync_client(
    settings: ClientSettings,
    *,
    transport: httpx.BaseTransport | None = None,
    default_headers: bool = True,
    bound_body: bool = False,
) -> httpx.Client:
    """A blocking httpx client for ``settings``.

    ``default_headers=False``: the caller merges ``settings.headers`` into each request itself
    (the timing client, which can leave the auth headers out of one request).
    ``transport``: one of your own (a client certificate for mTLS, a proxy).
    ``bound_body``: every response's whole body within ``timeout_s`` and ``max_body_bytes``
    (a side probe that reads a body to its end: /tokenize, /metrics, /v1/models). httpx's own
    timeout is per read, so a server that streams forever would hold such a read for ever.
    """
    transport = transport or httpx.HTTPTransport(
        socket_options=_NODELAY, verify=_ssl_context(settings.verify_tls), limits=settings.limits()
    )
    if bound_body:
        bounded, _ = bounded_transports(httpx)
        transport = bounded(transport, settings.timeout_s, settings.max_body_bytes)
    return httpx.Client(transport=transport, **_options(settings, default_headers))


def async_client(
    settings: ClientSettings,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    default_headers: bool = True,
) -> httpx.AsyncClient:
    """The asyncio twin of :func:`sync_client`."""
    transport = transport or httpx.AsyncHTTPTransport(
        socket_options=_NODELAY, verify=_ssl_context(settings.verify_tls), limits=settings.limits()
    )
    return httpx.AsyncClient(transport=transport, **_options(settings, default_headers))


__all__ = ["MAX_BODY_BYTES", "ClientSettings", "async_client", "ssl_context", "sync_client"]
