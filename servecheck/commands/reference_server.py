"""``servecheck reference-server``: run the deterministic reference engine."""

from __future__ import annotations

import argparse
import os

from servecheck.errors import UsageError, did_you_mean


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from servecheck.reference.faults import QUIRKS

    env = os.environ.get
    parser.add_argument(
        "--host",
        default=env("SERVECHECK_REF_HOST", "127.0.0.1"),
        help="bind address (default: %(default)s)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(env("SERVECHECK_REF_PORT", "8000")),
        metavar="P",
        help="port; 0 picks a free one (default: %(default)s, env SERVECHECK_REF_PORT)",
    )
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="served model name, repeatable (default: ref-tiny)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=512,
        metavar="N",
        help="context limit in tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--default-max-tokens",
        type=int,
        default=16,
        metavar="N",
        help="output length when max_tokens is absent (default: %(default)s)",
    )
    parser.add_argument(
        "--ttft-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="delay before the first token (default: %(default)s)",
    )
    parser.add_argument(
        "--itl-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="delay between tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--api-key",
        default=env("SERVECHECK_REF_API_KEY"),
        metavar="KEY",
        help="require this key (env SERVECHECK_REF_API_KEY)",
    )
    parser.add_argument(
        "--loading-s",
        type=float,
        default=0.0,
        metavar="S",
        help="answer 503 'loading' for the first S seconds",
    )
    parser.add_argument(
        "--kv-blocks",
        type=int,
        default=256,
        metavar="N",
        help="KV-cache blocks of 16 tokens (default: %(default)s)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=512,
        metavar="N",
        help="requests running at once; more wait (default: %(default)s)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME",
        help="switch on a defect (repeatable); see --list-faults",
    )
    parser.add_argument(
        "--quirk",
        action="append",
        default=[],
        metavar="NAME",
        help="switch on a legal variation a client must accept (repeatable): " + ", ".join(QUIRKS),
    )
    parser.add_argument(
        "--list-faults", action="store_true", help="list the fault catalogue and exit"
    )
    parser.add_argument(
        "--ready-file", metavar="PATH", help="write the bound port here once listening"
    )
    parser.add_argument(
        "--prefix-cache-blocks",
        type=int,
        default=0,
        metavar="N",
        help="a prefix cache of N blocks: cached_tokens in usage, prefix-cache metrics (default: off)",
    )
    parser.add_argument(
        "--prefix-cache-counted",
        action="store_true",
        help="idle cached prefix blocks count as KV usage (a soak sees a retained-cache plateau)",
    )


def run(args: argparse.Namespace) -> int:
    from servecheck.reference.faults import FAULTS, QUIRKS, list_faults

    if args.list_faults:
        print(list_faults())
        return 0
    for name in args.fault:
        if name not in FAULTS:
            raise UsageError(
                f"--fault: unknown fault {name!r}{did_you_mean(name, FAULTS)}; see --list-faults"
            )
    for name in args.quirk:
        if name not in QUIRKS:
            raise UsageError(
                f"--quirk: unknown quirk {name!r}{did_you_mean(name, QUIRKS)}; choices: {', '.join(QUIRKS)}"
            )
    from servecheck.reference.server import ServerConfig, serve

    config = ServerConfig(
        models=args.models or ["ref-tiny"],
        max_model_len=args.max_model_len,
        default_max_tokens=args.default_max_tokens,
        ttft_ms=args.ttft_ms,
        itl_ms=args.itl_ms,
        api_key=args.api_key,
        faults=frozenset(args.fault),
        quirks=frozenset(args.quirk),
        loading_s=args.loading_s,
        kv_blocks=args.kv_blocks,
        max_num_seqs=args.max_num_seqs,
        prefix_cache_blocks=args.prefix_cache_blocks,
        prefix_cache_counted=args.prefix_cache_counted,
    )
    serve(config, host=args.host, port=args.port, ready_file=args.ready_file)
    return 0
