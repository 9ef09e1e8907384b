"""Inside the namespace: ``127.0.0.1:PORT`` relayed to the host's Unix socket, then the command.

``python -m servecheck.clients.inside SOCK PORT -- CMD ...`` (started by
:func:`servecheck.clients.netns.inside_argv`): listens on ``127.0.0.1:PORT``, hands every
connection to ``SOCK`` (the host's :class:`~servecheck.clients.netns.Relay`, which alone
reaches the target), runs ``CMD`` and exits with its exit status.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

from servecheck.clients.netns import pump


def _accept(listener: socket.socket, sock: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            up.connect(sock)
        except OSError:
            conn.close()
            continue
        threading.Thread(target=pump, args=(up, conn), daemon=True).start()
        threading.Thread(target=pump, args=(conn, up), daemon=True).start()


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m servecheck.clients.inside SOCK PORT -- CMD ...", file=sys.stderr)
        return 2
    sock, port, cmd = argv[0], int(argv[1]), argv[3:]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    threading.Thread(target=_accept, args=(listener, sock), daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the client has its own
    try:
        return subprocess.call(cmd, env=env)
    except OSError as exc:
        print(f"servecheck: cannot run {cmd[0]}: {exc}", file=sys.stderr)
        return 127
    finally:
        listener.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
