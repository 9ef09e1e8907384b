"""``servecheck reference-server``: run the deterministic reference engine."""

from __future__ import annotations

import argparse

from servecheck.reference.options import add_arguments, check_names


def run(args: argparse.Namespace) -> int:
    from servecheck.reference.faults import list_faults

    if args.list_faults:
        print(list_faults())
        return 0
    check_names(args)
    from servecheck.reference.reasoning import parse_spec
    from servecheck.reference.server import ServerConfig, serve

    mode = None if args.reasoning is None else parse_spec(args.reasoning)  # checked above

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
        max_inflight=args.max_inflight,
        reasoning=mode,
        prefix_cache_blocks=args.prefix_cache_blocks,
        prefix_cache_counted=args.prefix_cache_counted,
    )
    serve(config, host=args.host, port=args.port, ready_file=args.ready_file)
    return 0


__all__ = ["add_arguments", "run"]
