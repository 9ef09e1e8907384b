"""Nightly history: every run's summary kept in a database, its series, steps and first failures.

``store.py`` keeps the rows (SQLAlchemy Core; SQLite in ``reports/history.db`` by default, a
PostgreSQL server by URL) and its versioned migrations; ``ingest.py`` turns a run folder
(``servecheck load`` or ``servecheck check``) into one entry; ``analysis.py`` finds the steps of a
series (change points) and judges a night against the nights before it; ``figures.py`` draws a
series. ``servecheck history`` (``servecheck/commands/history.py``) calls them through
``servecheck.api``.
"""
