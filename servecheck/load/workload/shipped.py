"""Finding the traces, load plans and scenarios a command names, in the folder or the package.

``--trace synthetic``, ``--plan smoke`` and ``--scenario chat`` name files shipped inside the
package (``servecheck/loadtests/traces/``, ``servecheck/loadtests/``, ``servecheck/scenarios/``);
the checkout-relative paths of the README (``loadtests/traces/synthetic.jsonl``,
``loadtests/smoke.yaml``, ``scenarios/chat.py``) work from any folder too, since an installed
package holds the same files under the same names. A file that exists where the user points
always wins. A name that is nowhere is a :class:`UsageError` listing what is shipped, raised
before any request reaches the target.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path, PurePosixPath

from servecheck.errors import UsageError, did_you_mean

# (folder inside the package, suffix a bare name gets, what the error calls it)
TRACES = ("loadtests/traces", ".jsonl", "trace")
PLANS = ("loadtests", ".yaml", "load plan")
SCENARIOS = ("scenarios", ".py", "scenario")


def _package_dir() -> Path:
    # The package is installed as files (setuptools, pipx, uv): its folder is a real path that a
    # Locust subprocess can open too.
    return Path(str(resources.files("servecheck")))


def _known(folders: list[Path], suffix: str) -> list[str]:
    stems = {p.stem for d in folders if d.is_dir() for p in d.glob(f"*{suffix}")}
    return sorted(s for s in stems if not s.startswith("_"))


def resolve(name: str, kind: tuple[str, str, str], local: Path | None = None) -> Path:
    """The file ``name`` means: a path that exists as given; else ``local/<name><suffix>`` (the
    folder's own ``loadtests/`` or ``scenarios/``); else the packaged file of that name or at
    that checkout-relative path."""
    folder, suffix, what = kind
    given = Path(name).expanduser()
    if given.is_file():
        return given.resolve()
    pkg = _package_dir()
    rel = PurePosixPath(name.replace("\\", "/"))
    bare = len(rel.parts) == 1
    candidates: list[Path] = []
    if bare:
        stem = name if name.endswith(suffix) else name + suffix
        if local is not None:
            candidates.append(local / stem)
        candidates.append(pkg / folder / stem)
    elif not rel.is_absolute() and ".." not in rel.parts:
        candidates.append(pkg / Path(*rel.parts))  # loadtests/traces/synthetic.jsonl
        candidates.append(pkg / folder / rel.name)  # ./my-clone/loadtests/smoke.yaml
    for p in candidates:
        if p.is_file():
            return p.resolve()
    known = _known([*([local] if local is not None else []), pkg / folder], suffix)
    listing = f"{what}s: {', '.join(known) or '(none found)'}"
    if bare:
        stem = name.removesuffix(suffix)
        raise UsageError(f"unknown {what} {name!r}{did_you_mean(stem, known)}; {listing}")
    raise UsageError(f"{what} file {name!r} not found; shipped {listing} (or give a path)")


def trace_path(name: str) -> Path:
    """``--trace``: a trace file, or a shipped trace by name (``synthetic``)."""
    return resolve(name, TRACES)


def plan_path(name: str) -> Path:
    """``--plan``: a plan file, ``./loadtests/<name>.yaml``, or a shipped plan (``smoke``)."""
    return resolve(name, PLANS, Path("loadtests"))


def scenario_path(name: str) -> Path:
    """``--scenario``: a locustfile, ``./scenarios/<name>.py``, or a shipped one (``chat``)."""
    return resolve(name, SCENARIOS, Path("scenarios"))


__all__ = ["plan_path", "resolve", "scenario_path", "trace_path"]
