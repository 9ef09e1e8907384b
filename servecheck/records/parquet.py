"""A run's records in one compact Parquet file (zstd), read back batch by batch.

Why: a run's JSONL costs ~9 bytes per token and used to be on disk twice (the workers' files and
the sorted ``records.jsonl``). :func:`compact_records` turns the workers' files into one
``records.parquet`` and removes them, reading a bounded chunk at a time, so neither the disk nor
the memory holds the run twice. The JSONL writer stays as it is: it is what survives ``kill -9``
line by line, and the compaction is post-run work.

The file's columns, and how each is encoded, are ``records/columns.py``'s: one fixed schema,
integer microseconds delta-encoded, repeated strings as dictionaries, anything unforeseen kept
in a JSON column; a record comes back as the dict its JSONL line was, times to the microsecond.

Order: the rows are the worker files in :func:`records.worker_files` order, each file in chunks
of its own order, every chunk (one row group) sorted by ``(t_sent, worker, seq)``. Sorting the
whole run would need it all in memory; :func:`iter_records` with ``sort_by_sent=True`` merges the
sorted row groups instead (one small batch per row group in memory).

pyarrow is imported inside the functions: ``import servecheck.records.record`` (the generator's
hot path) stays light, and so does this module's import.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from servecheck.records import columns as rc
from servecheck.records.record import (
    LOCAL_DIR,
    MERGED_NAME,
    RECORD_GLOB,
    RECORDS_PARQUET,
    MergeResult,
    iter_lines,
    worker_files,
)

__all__ = [
    "RECORDS_PARQUET",
    "CompactResult",
    "compact_records",
    "describe_records",
    "export_jsonl",
    "iter_records",
    "keep_records",
    "read_run_records",
    "records_file",
]
CHUNK_ROWS: Final = 65_536  # lines per chunk (and per row group) when compacting
CHUNK_BYTES: Final = 32 << 20  # ... or fewer, when long records make the lines large
# Lines parsed into dicts at a time when pyarrow's JSON reader refuses a chunk: a dict costs
# ~3x its line, the reader's columns less than the line.
_DICT_ROWS: Final = 8_192
BATCH_ROWS: Final = rc.BATCH_ROWS
_MERGE_BATCH: Final = 128  # rows of each row group in memory while merging by send time


@dataclass(slots=True)
class CompactResult:
    """What :func:`compact_records` wrote: like :class:`records.MergeResult` (``path``,
    ``count``, ``bad_lines``, ``per_file``, ``iter_records()``), over ``records.parquet``."""

    path: Path
    count: int = 0
    bad_lines: int = 0
    per_file: dict[str, int] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    def iter_records(self, sort_by_sent: bool = True) -> Iterator[dict[str, Any]]:
        """The records one at a time, by send time like ``MergeResult``'s (the row groups
        merged); ``sort_by_sent=False`` reads them in file order, cheaper, for order-free work."""
        if self.count:
            yield from iter_records(self.path, sort_by_sent=sort_by_sent)


def compact_records(
    run_dir: str | os.PathLike[str],
    *,
    remove_sources: bool = True,
    chunk_rows: int = CHUNK_ROWS,
    chunk_bytes: int = CHUNK_BYTES,
) -> CompactResult:
    """Write every worker file of ``run_dir`` into ``records.parquet`` and remove the sources.

    Reads ``chunk_rows`` lines (or ``chunk_bytes``) at a time; a line that is not a JSON object
    (a torn last line) is counted in ``bad_lines``, never fatal. The file appears whole or not at
    all (written beside it, then renamed); only then are the worker files, and the workers' own
    copies under ``local/`` (distributed runs), removed: one copy of the records stays on disk.

    Run again on the same folder (a summary redone), it keeps what ``records.parquet`` holds
    (counted under its own name in ``per_file``) and adds any worker file written since.
    """
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    target = run_dir / RECORDS_PARQUET
    files = worker_files(run_dir)
    result = CompactResult(path=target)
    if target.is_file() and not files:
        result.count = result.per_file[str(target)] = pq.ParquetFile(target).metadata.num_rows
        return result
    schema = rc.schema()
    tmp = target.with_name(target.name + ".tmp")
    try:
        with pq.ParquetWriter(tmp, schema, **rc.writer_options()) as writer:
            if target.is_file():  # an earlier compaction's rows, a row group at a time
                before = pq.ParquetFile(target)
                for i in range(before.num_row_groups):
                    writer.write_table(before.read_row_group(i))
                result.count = result.per_file[str(target)] = before.metadata.num_rows
            for p in files:
                n = 0
                for lines in _chunks(p, chunk_rows, chunk_bytes):
                    for table, bad in _convert(lines, schema):
                        result.bad_lines += bad
                        if table is not None:
                            writer.write_table(table.sort_by(list(rc.SORT_KEY)))
                            n += table.num_rows
                    del lines  # before the next chunk is read: one chunk at a time
                result.per_file[str(p)] = n
                result.count += n
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, target)
    if remove_sources:
        result.removed = _remove_sources(run_dir, files)
    return result


def keep_records(
    run_dir: str | os.PathLike[str], mode: str, merged: MergeResult | None = None
) -> dict[str, Any]:
    """After the summary: one copy of the records on disk, as ``--records`` says.

    ``all``: the per-worker files become one ``records.parquet`` (records/parquet.py) and go;
    ``sample:N``: a uniform sample of N of their lines (seeded, a reservoir of byte lines)
    becomes it; ``none``: no records stay. ``merged`` (the sorted ``records.jsonl`` the summary
    may have made to read them in send order) was a working copy and goes too. A distributed
    worker's own copies in ``local/`` go when the master verified everything it received
    (``transport.json``); otherwise they stay, as the evidence of what the master did not get.
    Returns summary.json's ``records.kept`` (and ``bad_lines``, torn lines left out)."""
    run_dir = Path(run_dir)
    if merged is not None:
        merged.path.unlink(missing_ok=True)
    n = int(mode.split(":", 1)[1]) if mode.startswith("sample:") else None
    if n is not None:
        _sample_lines(run_dir, n)
    out: dict[str, Any] = {"mode": mode, "lines": 0, "file": None}
    if mode != "none" and worker_files(run_dir):
        res = compact_records(run_dir, remove_sources=False)
        out.update(lines=res.count, file=res.path.name, bad_lines=res.bad_lines)
    for p in worker_files(run_dir):
        p.unlink(missing_ok=True)
    local = run_dir / LOCAL_DIR
    if local.is_dir() and _verified(run_dir):
        for p in local.glob(RECORD_GLOB):
            p.unlink(missing_ok=True)
    return out


def _sample_lines(run_dir: Path, n: int) -> None:
    """Keep a uniform sample of ``n`` of the worker files' lines, in one worker file."""
    import random

    files = worker_files(run_dir)
    rng = random.Random(0)
    chosen: list[bytes] = []
    seen = 0
    for p in files:
        with open(p, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    continue  # a torn last line
                if len(chosen) < n:
                    chosen.append(line)
                elif (j := rng.randrange(seen + 1)) < n:
                    chosen[j] = line
                seen += 1
    if seen <= n and len(files) <= 1:
        return  # already the sample (one process sampled as it went)
    target = run_dir / "records-sample.jsonl"
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(b"".join(chosen))
    for p in files:
        p.unlink(missing_ok=True)
    os.replace(tmp, target)


def _verified(run_dir: Path) -> bool:
    try:
        report = json.loads((run_dir / "transport.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(report.get("verified"))


def _remove_sources(run_dir: Path, files: Sequence[Path]) -> list[str]:
    removed = [str(p) for p in files]
    for p in files:
        p.unlink(missing_ok=True)
    local = run_dir / LOCAL_DIR
    if local.is_dir():
        for p in sorted(local.glob(RECORD_GLOB)):
            removed.append(str(p))
            p.unlink(missing_ok=True)
        if not any(local.iterdir()):
            shutil.rmtree(local, ignore_errors=True)
    return removed


def _chunks(path: Path, rows_max: int, bytes_max: int) -> Iterator[list[bytes]]:
    """The non-blank lines of one JSONL file, at most ``rows_max`` / ``bytes_max`` at a time."""
    lines: list[bytes] = []
    size = 0
    with open(path, "rb") as fh:
        for line in fh:
            if not line.strip():
                continue
            lines.append(line if line.endswith(b"\n") else line + b"\n")
            size += len(line)
            if len(lines) >= rows_max or size >= bytes_max:
                yield lines
                lines, size = [], 0
    if lines:
        yield lines


def _convert(lines: list[bytes], schema: Any) -> Iterator[tuple[Any, int]]:
    """(a table of the file's schema, or None when no line was a record; the lines that are
    not JSON objects) for one chunk: one table from pyarrow's JSON reader, or when it refuses
    the chunk, one per :data:`_DICT_ROWS` lines parsed line by line."""
    cols = rc.json_table(b"".join(lines))
    if cols is not None:
        yield rc.table_of(cols, schema), 0
        return
    for start in range(0, len(lines), _DICT_ROWS):
        rows: list[dict[str, Any]] = []
        bad = 0
        for line in lines[start : start + _DICT_ROWS]:
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                rows.append(obj)
            else:
                bad += 1
        yield (rc.table_of(rows, schema) if rows else None), bad


# ------------------------------------------------------------------ columns -> dicts


def iter_records(
    path: str | os.PathLike[str],
    columns: Iterable[str] | None = None,
    batch_size: int = BATCH_ROWS,
    *,
    sort_by_sent: bool = False,
) -> Iterator[dict[str, Any]]:
    """The records of a ``records.parquet`` as dicts shaped like the JSONL lines (the same keys,
    times in float seconds, ITLs as float seconds), one batch of ``batch_size`` rows in memory.

    ``columns``: the record keys wanted (the others are not read). ``sort_by_sent``: in send-time
    order, by merging the row groups (each sorted when written), ``_MERGE_BATCH`` rows of each in
    memory at a time; else in file order (see the module docstring)."""
    import pyarrow.parquet as pq

    keys = rc.KEYS if columns is None else tuple(columns)
    everything = columns is None
    phys = rc.physical_columns(keys)
    pf = pq.ParquetFile(path, buffer_size=1 << 16)
    if not sort_by_sent or pf.num_row_groups <= 1:
        for batch in pf.iter_batches(batch_size=batch_size, columns=phys):
            yield from rc.dicts_of(batch, keys, everything)
        return
    sort_cols = sorted({*phys, "t_sent", "worker", "seq"})

    def group(i: int) -> Iterator[tuple[tuple[float, str, int], dict[str, Any]]]:
        for batch in pf.iter_batches(batch_size=_MERGE_BATCH, row_groups=[i], columns=sort_cols):
            us, workers, seqs = (batch.column(k).to_pylist() for k in ("t_sent", "worker", "seq"))
            for j, d in enumerate(rc.dicts_of(batch, keys, everything)):
                # Arrow sorted a missing send time last: so does the merge.
                sent = math.inf if us[j] is None else us[j]
                yield (sent, workers[j] or "", seqs[j] or 0), d

    for _, d in heapq.merge(*(group(i) for i in range(pf.num_row_groups)), key=lambda t: t[0]):
        yield d


# ------------------------------------------------------------------ run folders


def records_file(run_dir: str | os.PathLike[str]) -> Path | None:
    """The run folder's one records file: ``records.parquet``, else ``records.jsonl`` (folders
    from before the compact form, and soak runs), else None (see :func:`read_run_records`)."""
    for name in (RECORDS_PARQUET, MERGED_NAME):
        p = Path(run_dir) / name
        if p.is_file():
            return p
    return None


def read_run_records(
    run_dir: str | os.PathLike[str], columns: Iterable[str] | None = None
) -> Iterator[dict[str, Any]]:
    """A run folder's records one at a time, whichever form it holds: ``records.parquet``,
    else ``records.jsonl``, else the per-worker files (a run killed before its summary).
    ``columns`` narrows a Parquet read to those keys (a JSONL line comes whole)."""
    path = records_file(run_dir)
    if path is not None and path.suffix == ".parquet":
        yield from iter_records(path, columns)
        return
    for p in [path] if path is not None else worker_files(run_dir):
        for obj in iter_lines(p):
            if obj is not None:
                yield obj


def describe_records(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Rows, bytes on disk and bytes per request of a records file (Parquet or JSONL)."""
    p = Path(path)
    size = p.stat().st_size
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = int(pq.ParquetFile(p).metadata.num_rows)
    else:
        with open(p, "rb") as fh:
            rows = sum(1 for line in fh if line.strip())
    return {
        "rows": rows,
        "bytes": size,
        "bytes_per_request": round(size / rows, 1) if rows else None,
    }


def export_jsonl(src: str | os.PathLike[str], out: str | os.PathLike[str]) -> int:
    """Write a ``records.parquet`` (or a run folder holding one) as JSONL, batch by batch, in
    send-time order like the old ``records.jsonl``; returns the number of lines."""
    path = Path(src)
    if path.is_dir():
        path = path / RECORDS_PARQUET
    n = 0
    target = Path(out)
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for d in iter_records(path, sort_by_sent=True):
            fh.write(json.dumps(d, separators=(",", ":")) + "\n")
            n += 1
    os.replace(tmp, target)
    return n
