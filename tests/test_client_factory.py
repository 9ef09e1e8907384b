"""Every httpx client that talks to a target comes from servecheck.client.factory."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from servecheck.client.factory import ClientSettings, async_client, sync_client

ROOT = Path(__file__).resolve().parents[1]
FACTORY = "servecheck/client/factory.py"
# httpx.get(...) and friends build a client of their own, with httpx's defaults (env proxies).
BUILDERS = {
    *("Client", "AsyncClient"),
    *("get", "post", "put", "patch", "delete", "head", "options", "request", "stream"),
}


def _builders(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every ``httpx.X(...)`` / ``from httpx import X; X(...)`` that builds a client."""
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "httpx"
        for alias in node.names
        if alias.name in BUILDERS
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "httpx":
            if f.attr in BUILDERS:
                found.append((node.lineno, f"httpx.{f.attr}"))
        elif isinstance(f, ast.Name) and f.id in imported:
            found.append((node.lineno, f.id))
    return found


def test_only_the_factory_builds_an_httpx_client() -> None:
    offenders = [
        f"{path.relative_to(ROOT).as_posix()}:{line}: {name}(...)"
        for path in sorted((ROOT / "servecheck").rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != FACTORY
        for line, name in _builders(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not offenders, "build it with servecheck.client.factory:\n" + "\n".join(offenders)


def test_the_walk_sees_both_spellings() -> None:
    """The guard itself: it finds ``httpx.Client(...)`` and ``from httpx import AsyncClient``."""
    tree = ast.parse(
        "import httpx\nfrom httpx import AsyncClient as A\nhttpx.Client()\nA()\nhttpx.get('u')\n"
    )
    assert sorted(_builders(tree)) == [(3, "httpx.Client"), (4, "A"), (5, "httpx.get")]


@pytest.mark.parametrize("make", [sync_client, async_client], ids=["sync", "async"])
def test_a_target_client_ignores_proxy_settings_of_the_environment(
    make: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    settings = ClientSettings("http://example.invalid/v1", {"X-Api-Key": "k"}, verify_tls=False)
    client = make(settings)  # type: ignore[operator]
    assert client.trust_env is False
    assert not client._mounts, "an environment proxy was mounted"
    assert client.headers["X-Api-Key"] == "k"
    pool = client._transport._pool
    assert pool._ssl_context.verify_mode.name == "CERT_NONE"
    assert pool._max_connections == settings.max_connections


def test_the_engines_loopback_requests_ignore_proxy_settings_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """engines/base.http (readiness of a local engine) is the one request outside the factory:
    stdlib urllib, which sent even 127.0.0.1 through $HTTP_PROXY, so a proxy-configured shell
    saw every engine as never ready."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from servecheck.engines.base import http

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        got = http("GET", f"http://127.0.0.1:{server.server_address[1]}/health", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert (got.status, got.body) == (200, "ok"), got


def test_clients_share_one_ssl_context_per_verify_setting_and_ca_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import certifi

    def ctx(verify: bool) -> object:
        settings = ClientSettings("http://127.0.0.1:9/v1", {}, verify_tls=verify)
        with sync_client(settings) as client:
            return client._transport._pool._ssl_context  # type: ignore[attr-defined]

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert ctx(True) is ctx(True)
    assert ctx(False) is ctx(False) and ctx(False) is not ctx(True)
    assert ctx(False).verify_mode.name == "CERT_NONE"  # type: ignore[attr-defined]
    assert ctx(True).verify_mode.name == "CERT_REQUIRED"  # type: ignore[attr-defined]
    before = ctx(True)
    private = tmp_path / "ca.pem"  # a private CA bundle (here: certifi's, copied)
    private.write_bytes(Path(certifi.where()).read_bytes())
    monkeypatch.setenv("SSL_CERT_FILE", str(private))
    assert ctx(True) is not before, "a CA file set later must give its own context"
    assert ctx(True) is ctx(True)
