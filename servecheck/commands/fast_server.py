"""``python -m servecheck.commands.fast_server``: the calibration server's command line.

The server is :mod:`servecheck.reference.fast` (started by ``benchmarks/_truth.py``); it is no
``servecheck`` subcommand, only a module to run. Parsing lives here so that the library never
imports argparse.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servecheck.reference import fast


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m servecheck.commands.fast_server",
        description=(fast.__doc__ or "").split("\n\n")[0],
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100, help="0 picks a free port (see --ready-file)")
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument(
        "--tokens",
        type=int,
        default=64,
        help="tokens per answer when the request sets no max_tokens",
    )
    ap.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="the first N tokens of every chat answer are reasoning (reasoning_content)",
    )
    ap.add_argument("--ready-file", type=Path, help="write the bound port here once listening")
    args = ap.parse_args(argv)
    timing = fast.Timing(
        args.ttft_ms / 1000, args.itl_ms / 1000, args.tokens, args.reasoning_tokens
    )
    return fast.run_server(args.host, args.port, timing, args.ready_file)


if __name__ == "__main__":
    raise SystemExit(main())
