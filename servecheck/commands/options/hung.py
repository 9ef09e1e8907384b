"""``--hung-after`` and ``--canary``: the hung-but-healthy watch's options (analysis/hung.py),
declared once for ``servecheck load`` and ``servecheck soak``; each parses them into its spec."""

from __future__ import annotations

import argparse

# command -> (N's default, when the canary asks and its default period)
DEFAULTS = {
    "load": (
        "4 x the TTFT SLO or 50 x the ITL SLO, at least 10s; 30s without one",
        "during a load of two periods or more (default: every 30s)",
    ),
    "soak": ("30s", "in each idle phase (default: every 10s)"),
}


def add_hung_arguments(g: argparse._ActionsContainer, command: str) -> None:
    """The two options, worded with ``command``'s defaults (:data:`DEFAULTS`)."""
    n_default, canary_when = DEFAULTS[command]
    g.add_argument(
        "--hung-after",
        metavar="N",
        default=None,
        help="stop and fail as 'hung but healthy' when health answers 2xx while no open stream "
        "got a token, or the engine's generated-token counter stayed flat with requests "
        f"running, for N (e.g. 30s); 'off' never stops (default: {n_default})",
    )
    g.add_argument(
        "--canary",
        metavar="EVERY[,WITHIN]",
        default=None,
        help=f"{canary_when}, one streamed 1-token request every EVERY must get its token "
        "within WITHIN (WITHIN defaults to N); 'off' sends none",
    )


__all__ = ["add_hung_arguments"]
