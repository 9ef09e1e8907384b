"""Load profiles, one class per kind (GuideLLM's ``benchmark/profiles/``): each kind's module
holds its grammar, its arrivals, its phases and its own report figures; ``PROFILES`` registers
them by name, and :func:`profile_class` is the factory ``parse_profile`` picks from.

A new profile is one module here and one line in ``PROFILES`` (its order is the order the help
and the errors list them in).
"""

from __future__ import annotations

from servecheck.errors import UsageError, did_you_mean
from servecheck.load.workload.profiles.base import Phase, Profile, SliceView
from servecheck.load.workload.profiles.burst import Burst
from servecheck.load.workload.profiles.churn import Churn
from servecheck.load.workload.profiles.microburst import Microburst
from servecheck.load.workload.profiles.recovery import Recovery
from servecheck.load.workload.profiles.step import Step
from servecheck.load.workload.profiles.zigzag import Zigzag

PROFILES: dict[str, type[Profile]] = {
    cls.kind: cls for cls in (Burst, Zigzag, Microburst, Step, Recovery, Churn)
}
KINDS: tuple[str, ...] = tuple(PROFILES)


def profile_class(raw: str, kind: str) -> type[Profile]:
    """The class registered as ``kind``; a :class:`UsageError` suggests the nearest name."""
    cls = PROFILES.get(kind)
    if cls is None:
        raise UsageError(
            f"profile {raw!r}: unknown profile {kind!r}{did_you_mean(kind, KINDS)}; "
            f"one of {', '.join(KINDS)}"
        )
    return cls


__all__ = ["KINDS", "PROFILES", "Phase", "Profile", "SliceView", "profile_class"]
