"""The Locust scenarios (locustfiles), shipped with servecheck: ``servecheck load --scenario
NAME`` finds ``NAME.py`` here (after ``./scenarios/``). Each module imports Locust first, so only
a Locust process imports them; the library never does (ARCHITECTURE.md). The repository's
top-level ``scenarios/`` files import these.
"""
