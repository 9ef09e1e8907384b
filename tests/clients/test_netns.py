"""The namespace a third-party client runs in reaches the target and nothing else: from inside,
a connect to a public address and to this host's own non-loopback address fails with
"network is unreachable", while the target answers through the relay. Skipped, with the
reason, where no namespace can be made (not root, no unshare)."""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servecheck.clients import netns

PROBE = r"""
import json, socket, sys, urllib.request
def connect(host, port):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, port))
        return "connected"
    except OSError as exc:
        return exc.errno
    finally:
        s.close()
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=30).read().decode()
print(json.dumps({"public": connect("1.1.1.1", 80), "host": connect(sys.argv[2], int(sys.argv[3])),
                  "target": body}))
"""


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args: object) -> None:
        pass


def _host_address() -> str:
    """This host's non-loopback address (the one a default route would use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
            return str(s.getsockname()[0])
        except OSError:
            pytest.skip("this host has no non-loopback IPv4 address to prove unreachable")


@pytest.fixture
def target():
    server = ThreadingHTTPServer(("0.0.0.0", 0), _Hello)  # noqa: S104 - reachable on every address
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_only_the_target_is_reachable_from_the_namespace(tmp_path, target):
    why = netns.unavailable()
    if why:
        pytest.skip(f"no network namespace here: {why}")
    port = target.server_address[1]
    host = _host_address()
    with socket.create_connection((host, port), timeout=10):
        pass  # control: from the host, that address and port do answer
    relay = netns.Relay(tmp_path, "127.0.0.1", port).start()
    try:
        inner = netns.free_port()
        argv = netns.inside_argv(
            relay.sock, inner, [sys.executable, "-c", PROBE, str(inner), host, str(port)]
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        relay.stop()
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"public": errno.ENETUNREACH, "host": errno.ENETUNREACH, "target": "hello"}
    assert relay.exchanges and bytes(relay.exchanges[0].sent).startswith(b"GET / HTTP/1.1")


def test_unavailable_names_the_reason_without_root(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert netns.unavailable() == (
        "network namespaces need root (unshare --net); run as root or in a root container"
    )
