"""docs/load.md's "Records in a notebook": its example runs on a compacted records file, every
column its table names is a column of the frame, and ``pandas.read_parquet`` alone gives one
row per request (the stored columns, as the section warns)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from servecheck.records.parquet import RECORDS_PARQUET, compact_records
from servecheck.records.record import to_dataframe
from tests.load.test_columnar import _variety, _write

DOC = Path(__file__).resolve().parents[2] / "docs" / "load.md"


def _section() -> str:
    return DOC.read_text().split("### Records in a notebook", 1)[1].split("\n### ", 1)[0]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    _write(tmp_path, "w0", _variety("w0"))
    _write(tmp_path, "w1", _variety("w1"))
    compact_records(tmp_path)
    return tmp_path


def test_the_notebook_example_runs(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _section().split("```python\n", 1)[1].split("```", 1)[0]
    assert "reports/RUN_ID" in code
    space: dict[str, object] = {}
    exec(compile(code.replace("reports/RUN_ID", str(run_dir)), str(DOC), "exec"), space)  # noqa: S102
    df, raw = space["df"], space["raw"]
    assert isinstance(df, pd.DataFrame) and isinstance(raw, pd.DataFrame)
    assert len(df) == len(raw) == 2 * len(_variety("w0"))  # one row per request
    assert "http-503" in capsys.readouterr().out


def test_the_documented_columns_are_the_frames(run_dir: Path) -> None:
    table = _section().split("| column | meaning |", 1)[1]
    named = {n for row in table.splitlines() if row.startswith("| `")
             for n in re.findall(r"`([a-z_0-9]+)`", row.split(" | ")[0])}  # fmt: skip
    df = to_dataframe(run_dir / RECORDS_PARQUET)
    assert len(named) > 30 and named <= set(df.columns), sorted(named - set(df.columns))


def test_read_parquet_alone_gives_the_stored_columns(run_dir: Path) -> None:
    raw = pd.read_parquet(run_dir / RECORDS_PARQUET)
    df = to_dataframe(run_dir / RECORDS_PARQUET)
    assert len(raw) == len(df)
    ok = df["error"].isna() & df["e2e"].notna() & ~df["abandoned"]
    # integer microseconds, and tpot stored as what is left of (e2e - ttft) / (tokens - 1)
    assert (raw.loc[ok, "ttft"] == (df.loc[ok, "ttft"] * 1e6).round().astype("int64")).all()
    assert (raw.loc[ok, "tpot"].abs() <= 1).all() and (df.loc[ok, "tpot"] > 0.001).all()


def test_records_frame_reads_a_folder_or_a_file_and_names_a_folder_without_records(
    run_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from servecheck.api import records_frame
    from servecheck.errors import UsageError

    by_folder = records_frame(run_dir)
    by_file = records_frame(run_dir / RECORDS_PARQUET)
    assert len(by_folder) == len(by_file) == 2 * len(_variety("w0"))
    assert list(by_folder.columns) == list(to_dataframe(run_dir / RECORDS_PARQUET).columns)
    empty = tmp_path_factory.mktemp("no-records")
    with pytest.raises(UsageError, match="kept no records"):
        records_frame(empty)
