"""The reference server's options as typed values (:class:`ReferenceOptions`) and their
validation (:func:`validate`), shared by ``servecheck reference-server`` and by every command
that starts the embedded server with ``--reference-arg`` values (validated before the server
starts, so a bad value is a usage error naming it, not a traceback from the child).

The command line itself is parsed in ``servecheck/commands/reference_server.py``: the library
never imports argparse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from servecheck.errors import UsageError, did_you_mean
from servecheck.reference.http import ServerConfig

MAX_PORT = 65535


@dataclass(frozen=True, slots=True)
class ReferenceOptions:
    """Everything ``servecheck reference-server`` takes; the defaults are its defaults."""

    host: str = "127.0.0.1"
    port: int = 8000
    models: tuple[str, ...] = ()
    max_model_len: int = 512
    default_max_tokens: int = 16
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    api_key: str | None = None
    loading_s: float = 0.0
    kv_blocks: int = 256
    max_num_seqs: int = 512
    max_inflight: int = 0
    reasoning: str | None = None
    faults: tuple[str, ...] = ()
    quirks: tuple[str, ...] = ()
    list_faults: bool = False
    ready_file: str | None = None
    prefix_cache_blocks: int = 0
    prefix_cache_counted: bool = False
    vision: bool = False
    lora: bool = False
    agent: bool = False
    livelock_after: str | None = None


@dataclass(frozen=True, slots=True)
class Option:
    """One option of ``servecheck reference-server``, as data: the command layer turns the
    table into argparse options (``commands/options.add_option_table``), so ``--help`` and
    ``--reference-arg`` read the same table."""

    flag: str
    help: str
    kind: str = "str"  # str | int | float | append | flag
    default: Any = None
    metavar: str | None = None
    dest: str | None = None
    env: str | None = None  # the variable that overrides the default


def _quirk_help() -> str:
    from servecheck.reference.faults import QUIRKS

    return "switch on a legal variation a client must accept (repeatable): " + ", ".join(QUIRKS)


OPTIONS: tuple[Option, ...] = (
    Option(
        "--host",
        "bind address (default: %(default)s)",
        default="127.0.0.1",
        env="SERVECHECK_REF_HOST",
    ),
    Option(
        "--port",
        "port; 0 picks a free one (default: %(default)s, env SERVECHECK_REF_PORT)",
        "int",
        8000,
        "P",
        env="SERVECHECK_REF_PORT",
    ),
    Option(
        "--model",
        "served model name, repeatable (default: ref-tiny)",
        "append",
        None,
        "NAME",
        "models",
    ),
    Option("--max-model-len", "context limit in tokens (default: %(default)s)", "int", 512, "N"),
    Option(
        "--default-max-tokens",
        "output length when max_tokens is absent (default: %(default)s)",
        "int",
        16,
        "N",
    ),
    Option("--ttft-ms", "delay before the first token (default: %(default)s)", "float", 0.0, "MS"),
    Option("--itl-ms", "delay between tokens (default: %(default)s)", "float", 0.0, "MS"),
    Option(
        "--api-key",
        "require this key (env SERVECHECK_REF_API_KEY)",
        metavar="KEY",
        env="SERVECHECK_REF_API_KEY",
    ),
    Option("--loading-s", "answer 503 'loading' for the first S seconds", "float", 0.0, "S"),
    Option("--kv-blocks", "KV-cache blocks of 16 tokens (default: %(default)s)", "int", 256, "N"),
    Option(
        "--max-num-seqs",
        "requests running at once; more wait (default: %(default)s)",
        "int",
        512,
        "N",
    ),
    Option(
        "--max-inflight",
        "shed generation requests above N in flight with 429 + Retry-After (default: 0, never)",
        "int",
        0,
        "N",
    ),
    Option(
        "--reasoning",
        "serve a reasoning model: tokens=N,field=reasoning_content|reasoning,markers=OPEN|CLOSE"
        " (each part optional; '' for the defaults: 12 tokens, reasoning_content, <think>|</think>)",
        metavar="SPEC",
    ),
    Option("--fault", "switch on a defect (repeatable); see --list-faults", "append", (), "NAME"),
    Option("--quirk", _quirk_help(), "append", (), "NAME"),
    Option("--list-faults", "list the fault catalogue and exit", "flag"),
    Option("--ready-file", "write the bound port here once listening", metavar="PATH"),
    Option(
        "--prefix-cache-blocks",
        "a prefix cache of N blocks: cached_tokens in usage, prefix-cache metrics (default: off)",
        "int",
        0,
        "N",
    ),
    Option(
        "--prefix-cache-counted",
        "idle cached prefix blocks count as KV usage (a soak sees a retained-cache plateau)",
        "flag",
    ),
    Option(
        "--vision",
        "serve a vision model: image_url parts with data URLs are decoded and counted (default: "
        "text-only, images refused with a 400)",
        "flag",
    ),
    Option(
        "--livelock-after",
        "with --fault livelock: livelock after this long (20s) or this many requests (50); "
        "default: 20 requests",
        metavar="WHEN",
    ),
    Option(
        "--lora",
        "runtime LoRA adapters as vLLM serves them: /v1/load_lora_adapter and "
        "/v1/unload_lora_adapter, adapters listed in /v1/models and answered differently from "
        "the base model (default: off, the endpoints answer 404)",
        "flag",
    ),
    Option(
        "--agent",
        "scripted agent mode: a request offering tools with tool_choice auto calls the first "
        "tool once, then answers the tool result in text (agent clients' tool round trip)",
        "flag",
    ),
)


def from_values(values: Mapping[str, Any]) -> ReferenceOptions:
    """Options from the values the table's options were read into (keyed by their dest)."""
    known = {f.name for f in fields(ReferenceOptions)}
    kw = {k: v for k, v in values.items() if k in known and v is not None}
    kw["models"] = tuple(values.get("models") or ())
    kw["faults"] = tuple(values.get("fault") or ())
    kw["quirks"] = tuple(values.get("quirk") or ())
    return ReferenceOptions(**kw)


# option -> (attribute, the least value it takes)
_LOWER_BOUNDS: dict[str, tuple[str, float]] = {
    "--max-model-len": ("max_model_len", 1),
    "--default-max-tokens": ("default_max_tokens", 1),
    "--ttft-ms": ("ttft_ms", 0),
    "--itl-ms": ("itl_ms", 0),
    "--loading-s": ("loading_s", 0),
    "--kv-blocks": ("kv_blocks", 1),
    "--max-num-seqs": ("max_num_seqs", 1),
    "--max-inflight": ("max_inflight", 0),
    "--prefix-cache-blocks": ("prefix_cache_blocks", 0),
}


def validate(opts: ReferenceOptions) -> None:
    """Raise :class:`UsageError` naming the option for a value the server cannot run with: a
    port outside 0-65535, a negative or zero size, an unknown ``--fault`` or ``--quirk`` (with a
    did-you-mean), a bad ``--reasoning`` spec."""
    from servecheck.reference.faults import FAULTS, QUIRKS

    if not 0 <= opts.port <= MAX_PORT:
        raise UsageError(f"--port: {opts.port} is not a port (0-{MAX_PORT}; 0 picks a free one)")
    for flag, (attr, least) in _LOWER_BOUNDS.items():
        value = getattr(opts, attr)
        if value < least:
            raise UsageError(f"{flag}: {value:g} is too small (at least {least:g})")
    for name in opts.faults:
        if name not in FAULTS:
            raise UsageError(
                f"--fault: unknown fault {name!r}{did_you_mean(name, FAULTS)}; see --list-faults"
            )
    for name in opts.quirks:
        if name not in QUIRKS:
            raise UsageError(
                f"--quirk: unknown quirk {name!r}{did_you_mean(name, QUIRKS)}; choices: {', '.join(QUIRKS)}"
            )
    if opts.livelock_after is not None:
        from servecheck.reference.livelock import parse_after

        try:
            parse_after(opts.livelock_after)
        except (ValueError, UsageError) as exc:
            raise UsageError(f"--livelock-after: {exc}") from None
    if opts.reasoning is not None:
        from servecheck.reference.reasoning import parse_spec

        try:
            parse_spec(opts.reasoning)
        except ValueError as exc:
            raise UsageError(f"--reasoning: {exc}") from None


def to_config(opts: ReferenceOptions) -> ServerConfig:
    """The server config of validated options."""
    from servecheck.reference import livelock
    from servecheck.reference.reasoning import parse_spec

    return ServerConfig(
        models=list(opts.models) or ["ref-tiny"],
        max_model_len=opts.max_model_len,
        default_max_tokens=opts.default_max_tokens,
        ttft_ms=opts.ttft_ms,
        itl_ms=opts.itl_ms,
        api_key=opts.api_key,
        faults=frozenset(opts.faults),
        quirks=frozenset(opts.quirks),
        loading_s=opts.loading_s,
        kv_blocks=opts.kv_blocks,
        max_num_seqs=opts.max_num_seqs,
        max_inflight=opts.max_inflight,
        reasoning=None if opts.reasoning is None else parse_spec(opts.reasoning),
        prefix_cache_blocks=opts.prefix_cache_blocks,
        prefix_cache_counted=opts.prefix_cache_counted,
        vision=opts.vision,
        lora=opts.lora,
        agent=opts.agent,
        livelock_after_s=livelock.parse_after(opts.livelock_after)[0],
        livelock_after_requests=livelock.parse_after(opts.livelock_after)[1],
    )


__all__ = [
    "MAX_PORT",
    "OPTIONS",
    "Option",
    "ReferenceOptions",
    "from_values",
    "to_config",
    "validate",
]
