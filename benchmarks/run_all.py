"""Run every benchmark (each writes its own section of docs/benchmarks.md): ``make bench``.

They take minutes and want a quiet machine; they are never part of ``make test``.
``bench_peers.py`` runs the peer load tools that ``scripts/install-peers.sh`` installs; without them
it prints that and skips; so does ``bench_capacity.py`` without ``wrk`` (``apt-get install wrk``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bench_peers before bench_load: the load section puts the peers' figures beside its own.
SCRIPTS = [
    "bench_preflight.py",
    "bench_reference.py",
    "bench_suite_time.py",
    "bench_merge.py",
    "bench_keeper.py",
    "bench_postrun.py",
    "bench_peers.py",
    "bench_load.py",
    "bench_capacity.py",
    "bench_server_metrics.py",
    "bench_tree.py",
    "bench_profiles.py",
    "bench_live.py",
]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        print(f"== {name}", flush=True)
        if subprocess.call([sys.executable, str(HERE / name)], cwd=HERE.parent) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
