"""The history database: runs, their metrics and their checks, with versioned migrations.

SQLAlchemy Core over SQLite (the default, ``reports/history.db``, embedded) or PostgreSQL
(``postgresql://user@host/db``, through psycopg: the ``postgres`` extra). The schema is built by
ordered migration steps; ``schema_version`` holds the last one applied, and :func:`open_store`
applies the missing ones under a lock (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a transaction
advisory lock), so two nightly jobs that open a new database at once do not both create it.

Concurrent writers: each run is one transaction. SQLite serialises writers with its file lock;
we begin every transaction ``IMMEDIATE`` (the write lock up front, no deadlock on upgrade) and
wait up to ``BUSY_TIMEOUT_S`` for it, so a second nightly job waits instead of losing its row.
PostgreSQL needs nothing more: every run inserts its own rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from servecheck.errors import SpecError, UsageError
from servecheck.redact import redact

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

DEFAULT_PATH = Path("reports") / "history.db"
BUSY_TIMEOUT_S = 60.0
_PG_LOCK = 0x5EC4EC  # the advisory lock id that serialises migrations on PostgreSQL


@dataclass(slots=True)
class RunEntry:
    """One run as history keeps it: what ran against what, every metric and check outcome."""

    kind: str  # load | conformance
    run_id: str
    target: str
    started_at: str  # ISO 8601, UTC
    verdict: str
    model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    tag: str | None = None  # git or image tag
    run_dir: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    checks: list[tuple[str, str | None, str]] = field(default_factory=list)  # check, model, outcome

    @property
    def night(self) -> str:
        return self.started_at[:10]

    @property
    def key(self) -> str:
        """What makes a run the same run when it is added twice."""
        return f"{self.kind}|{self.target}|{self.run_id}|{self.started_at}"


def _runs_v1(meta: Any) -> Any:
    import sqlalchemy as sa

    return sa.Table(
        "runs",
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_key", sa.String(400), nullable=False, unique=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("model", sa.String(400)),
        sa.Column("engine", sa.String(100)),
        sa.Column("engine_version", sa.String(200)),
        sa.Column("tag", sa.String(200)),
        sa.Column("started_at", sa.String(40), nullable=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("run_dir", sa.Text),
        sa.Column("recorded_at", sa.Float, nullable=False),
    )


def _metrics_v1(meta: Any) -> Any:
    import sqlalchemy as sa

    return sa.Table(
        "metrics",
        meta,
        sa.Column("run", sa.Integer, sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
    )


def _checks_v2(meta: Any) -> Any:
    import sqlalchemy as sa

    return sa.Table(
        "checks",
        meta,
        sa.Column("run", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("check_id", sa.String(200), nullable=False),
        sa.Column("model", sa.String(400)),
        sa.Column("outcome", sa.String(32), nullable=False),
    )


def _version_table(meta: Any) -> Any:
    import sqlalchemy as sa

    return sa.Table(
        "schema_version",
        meta,
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("applied_at", sa.Float, nullable=False),
    )


def _tables() -> Any:
    """The tables as they are now (what the queries use); each migration step below builds its
    own, as they were at its version, so a later change of a table never rewrites an old step."""
    import sqlalchemy as sa

    meta = sa.MetaData()
    return meta, _runs_v1(meta), _metrics_v1(meta), _checks_v2(meta), _version_table(meta)


META, RUNS, METRICS, CHECKS, VERSION = _tables()


def _v1(conn: Connection) -> None:
    """Runs and their metrics (the load side)."""
    import sqlalchemy as sa

    meta = sa.MetaData()
    meta.create_all(conn, tables=[_runs_v1(meta), _metrics_v1(meta)])


def _v2(conn: Connection) -> None:
    """Check outcomes per run (the conformance side)."""
    import sqlalchemy as sa

    meta = sa.MetaData()
    _runs_v1(meta)  # for the foreign key; made by step 1
    meta.create_all(conn, tables=[_checks_v2(meta)])


def _v3(conn: Connection) -> None:
    """The series queries read runs by target in time order, checks by run."""
    import sqlalchemy as sa

    conn.execute(sa.text("CREATE INDEX ix_runs_target_started ON runs (target, started_at)"))
    conn.execute(sa.text("CREATE INDEX ix_checks_run ON checks (run)"))


# Ordered: step N brings a database at version N-1 to N. Never edit a released step; add one.
MIGRATIONS: tuple[Callable[[Connection], None], ...] = (_v1, _v2, _v3)
SCHEMA_VERSION = len(MIGRATIONS)


def engine_url(url: str | None) -> str:
    """The SQLAlchemy URL for ``--history``: none is ``reports/history.db``; a path is a SQLite
    file; ``postgresql://`` goes through psycopg (version 3)."""
    if not url:
        return f"sqlite:///{DEFAULT_PATH}"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith(("sqlite:", "postgresql+")):
        return url
    if "://" in url:
        raise SpecError(
            "{history} {v}: expected a SQLite file path, sqlite:///PATH or postgresql://...",
            v=redact(url),
        )
    return f"sqlite:///{url}"


def _make_engine(url: str) -> Engine:
    import sqlalchemy as sa

    if url.startswith("sqlite"):
        path = url.split("///", 1)[1] if "///" in url else ""
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})

        @sa.event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # we say BEGIN ourselves (SQLAlchemy's recipe)
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

        @sa.event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    try:
        return sa.create_engine(url, pool_pre_ping=True)
    except ModuleNotFoundError as exc:
        raise SpecError(
            "{history} {v}: the PostgreSQL driver is missing ({m}); install servecheck[postgres]",
            v=redact(url),
            m=exc.name,
        ) from None


class Store:
    """An open history database (schema migrated to :data:`SCHEMA_VERSION`)."""

    def __init__(self, engine: Engine, url: str, shown: str | None = None) -> None:
        self.engine = engine
        self.url = url
        self.shown = redact(shown or url)  # as the user wrote it, credentials hidden

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        import sqlalchemy.exc

        try:
            with self.engine.begin() as conn:
                yield conn
        except sqlalchemy.exc.OperationalError as exc:
            why = redact(str(exc.orig or exc)).strip().splitlines()
            raise UsageError(f"history {self.shown}: {why[0] if why else 'error'}") from None

    def version(self) -> int:
        import sqlalchemy as sa

        with self._tx() as conn:
            if not sa.inspect(conn).has_table("schema_version"):
                return 0
            return int(conn.execute(sa.select(sa.func.max(VERSION.c.version))).scalar() or 0)

    def migrate(self) -> int:
        """Apply the missing steps in one locked transaction; return the version reached."""
        import sqlalchemy as sa

        with self._tx() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})
            META.create_all(conn, tables=[VERSION])
            have = int(conn.execute(sa.select(sa.func.max(VERSION.c.version))).scalar() or 0)
            if have > SCHEMA_VERSION:
                raise UsageError(
                    f"history {self.shown}: schema version {have} is newer than this "
                    f"servecheck's {SCHEMA_VERSION}; upgrade servecheck"
                )
            for number, step in enumerate(MIGRATIONS[have:], start=have + 1):
                step(conn)
                conn.execute(VERSION.insert().values(version=number, applied_at=time.time()))
        return SCHEMA_VERSION

    def add(self, entry: RunEntry) -> bool:
        """Record one run in one transaction; False when it was recorded already."""
        import sqlalchemy as sa

        with self._tx() as conn:
            seen = conn.execute(sa.select(RUNS.c.id).where(RUNS.c.run_key == entry.key)).first()
            if seen is not None:
                return False
            row = {
                k: getattr(entry, k)
                for k in (
                    "kind",
                    "run_id",
                    "target",
                    "model",
                    "engine",
                    "engine_version",
                    "tag",
                    "started_at",
                    "verdict",
                    "run_dir",
                )
            }
            key = conn.execute(
                RUNS.insert().values(run_key=entry.key, recorded_at=time.time(), **row)
            ).inserted_primary_key
            assert key is not None  # an INSERT of one row always has it
            run = key[0]
            if entry.metrics:
                conn.execute(
                    METRICS.insert(),
                    [{"run": run, "name": k, "value": v} for k, v in entry.metrics.items()],
                )
            if entry.checks:
                conn.execute(
                    CHECKS.insert(),
                    [
                        {"run": run, "check_id": c, "model": m, "outcome": o}
                        for c, m, o in entry.checks
                    ],
                )
        return True

    def runs(
        self, target: str, kind: str, *, model: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The target's runs of ``kind`` in time order (the last ``limit``), with their metrics."""
        import sqlalchemy as sa

        q = sa.select(RUNS).where(RUNS.c.target == target, RUNS.c.kind == kind)
        if model:
            q = q.where(RUNS.c.model == model)
        q = q.order_by(RUNS.c.started_at.desc(), RUNS.c.id.desc())
        if limit:
            q = q.limit(limit)
        with self._tx() as conn:
            rows = [dict(r._mapping) for r in conn.execute(q)][::-1]
            ids = [r["id"] for r in rows]
            values: dict[int, dict[str, float]] = {i: {} for i in ids}
            for m in conn.execute(sa.select(METRICS).where(METRICS.c.run.in_(ids))):
                values[m.run][m.name] = m.value
            checks: dict[int, list[tuple[str, str | None, str]]] = {i: [] for i in ids}
            for c in conn.execute(sa.select(CHECKS).where(CHECKS.c.run.in_(ids))):
                checks[c.run].append((c.check_id, c.model, c.outcome))
        for r in rows:
            r["metrics"], r["checks"] = values[r["id"]], checks[r["id"]]
        return rows

    def targets(self) -> list[tuple[str, str, int]]:
        """(target, kind, runs) for every target history holds."""
        import sqlalchemy as sa

        q = sa.select(RUNS.c.target, RUNS.c.kind, sa.func.count()).group_by(
            RUNS.c.target, RUNS.c.kind
        )
        with self._tx() as conn:
            return [(str(t), str(k), int(n)) for t, k, n in conn.execute(q)]

    def count(self) -> int:
        import sqlalchemy as sa

        with self._tx() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(RUNS)).scalar() or 0)


def open_store(url: str | None = None) -> Store:
    """Open (and migrate) the history database ``url`` names (default ``reports/history.db``)."""
    full = engine_url(url)
    store = Store(_make_engine(full), full, url or str(DEFAULT_PATH))
    store.migrate()
    return store


def runs_per_night(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Each night (the UTC date a run started) of ``rows`` and how many runs it holds, in time
    order: three runs of one night are one night, not three."""
    out: dict[str, int] = {}
    for r in rows:
        night = str(r["started_at"])[:10]
        out[night] = out.get(night, 0) + 1
    return out


def last_nights(rows: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The runs of the last ``n`` nights of ``rows`` (time order), every run of each."""
    keep = set(list(runs_per_night(rows))[-n:])
    return [r for r in rows if str(r["started_at"])[:10] in keep]


def entries_metrics(rows: Sequence[dict[str, Any]], metric: str) -> list[float | None]:
    """One metric's values over ``rows`` (None where a run lacks it)."""
    return [r["metrics"].get(metric) for r in rows]
