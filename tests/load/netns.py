"""Test hosts for distributed self-tests: Linux network namespaces joined by a bridge.

Each :class:`Lan` makes one namespace per host, all on one bridge (in a namespace of its own), with
addresses in a private /24 that exists only inside these namespaces: nothing is routed to or from
the machine's own network. Everything is torn down by :meth:`Lan.close` (processes still in a
namespace are killed by pid first), which callers run in a ``finally``. Needs root and ``ip``;
:func:`unavailable` says why not where they are missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field

SUBNET = "10.213.77"  # only ever configured inside the namespaces a Lan makes


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can (probed by making one)."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    probe = f"scprobe-{secrets.token_hex(3)}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"'ip netns add' failed: {made.stderr.strip()}"
    try:
        bridge = _ip("-n", probe, "link", "add", "br0", "type", "bridge", check=False)
        if bridge.returncode != 0:
            return f"cannot make a bridge inside a namespace: {bridge.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


_OURS = re.compile(r"^sc(\d+)x[0-9a-f]{4}-\w+$")


def sweep_orphans() -> list[str]:
    """Delete the namespaces a Lan made in a process that no longer exists (killed before its
    teardown); returns their names. Namespaces of live processes are left alone."""
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    gone = []
    for line in listed:
        name = line.split(" ")[0].strip()
        m = _OURS.match(name)
        if m is None or _alive(int(m.group(1))):
            continue
        for pid in _ip("netns", "pids", name, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", name, check=False)
        gone.append(name)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(slots=True)
class Lan:
    """Hosts (name -> address) on one private /24; ``exec`` prefixes a command to run on a host."""

    hosts: list[str]
    # The creating process's pid is in every name, so a later Lan can remove the namespaces of a
    # test process that was killed before its teardown ran (SIGKILL, a CI timeout).
    tag: str = field(default_factory=lambda: f"{os.getpid()}x{secrets.token_hex(2)}")
    made: list[str] = field(default_factory=list)
    addr: dict[str, str] = field(default_factory=dict)

    def ns(self, host: str) -> str:
        return f"sc{self.tag}-{host}"

    def up(self) -> Lan:
        sweep_orphans()
        lan = self.ns("lan")
        _ip("netns", "add", lan)
        self.made.append(lan)
        _ip("-n", lan, "link", "add", "br0", "type", "bridge")
        _ip("-n", lan, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts, start=1):
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self.made.append(ns)
            # Both ends are made inside the namespaces, so no name ever exists on the machine.
            _ip(
                "-n", lan, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0",
                "netns", ns,
            )  # fmt: skip
            _ip("-n", lan, "link", "set", f"p{i}", "master", "br0", "up")
            address = f"{SUBNET}.{i}"
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self.addr[host] = address
        return self

    def exec(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(host)]

    def close(self) -> None:
        """Kill what still runs in the namespaces (by pid), then delete them."""
        for ns in reversed(self.made):
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        for ns in reversed(self.made):
            _ip("netns", "del", ns, check=False)
        self.made.clear()

    def __enter__(self) -> Lan:
        try:
            return self.up()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
