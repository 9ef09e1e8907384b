"""The conformance suites, shipped with servecheck: one thin pytest module per surface.

Run them anywhere servecheck is installed: ``pytest --pyargs servecheck.suites --target NAME
--targets-file targets.yaml`` (the plugin is loaded by its ``pytest11`` entry point), or
``servecheck check``. The checks themselves live in :mod:`servecheck.checks.surfaces`; a suite
module only names its ``SURFACE``. The repository's top-level ``suites/`` files import these.
"""
