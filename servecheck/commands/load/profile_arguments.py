"""``servecheck load --profile``: a phased load profile (servecheck/load/workload/phased.py), parsed here
into the spec's typed :class:`~servecheck.load.workload.phased.Profile`."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from servecheck.analysis.steady import parse_slice_s
from servecheck.load.workload.phased import KINDS, PROFILE_SLICE_S, Profile, parse_profile


def add_profile_arguments(g: argparse._ArgumentGroup) -> None:
    """``--profile NAME:PARAMS`` (env SERVECHECK_LOAD_PROFILE)."""
    g.add_argument(
        "--profile",
        metavar="NAME:PARAMS",
        default=os.environ.get("SERVECHECK_LOAD_PROFILE"),
        help=f"a phased load profile ({', '.join(KINDS)}), e.g. burst:n=20,every=5s, "
        "step:2,8,16,8,2@10s or recovery:normal=5,overload=40,for=20s,within=20%%; "
        "each phase gets its own section in the report (docs/load.md); env SERVECHECK_LOAD_PROFILE",
    )


def profile_fields(pick: Callable[[str], Any]) -> dict[str, Any]:
    """The spec's ``profile`` and ``slice_s`` (a profile's default slice is 1 s: its phases are
    read from the slices, which must be narrower than they are)."""
    text = pick("profile")
    profile: Profile | None = None if text is None else parse_profile(str(text))
    slice_text = pick("slice_s")
    if slice_text is None and profile is not None:
        return {"profile": profile, "slice_s": PROFILE_SLICE_S}
    return {"profile": profile, "slice_s": parse_slice_s(slice_text)}
