"""A conformance surface is its module, its ``SURFACES`` line and its faults: ``--surface``'s
choices and the suite files (packaged and the checkout's shims) are derived from ``SURFACES``,
and the surfaces package imports every module it holds."""

from __future__ import annotations

import pkgutil
import sys

import pytest

from servecheck import docs
from servecheck.checks import surfaces
from servecheck.checks.registry import SURFACES, load_all, suite_file
from servecheck.workflows.conformance import SURFACE_FILES, suites_dir, surface_files


def test_surface_files_follow_the_registry() -> None:
    assert list(SURFACE_FILES) == [s.lower() for s in SURFACES]
    assert SURFACE_FILES["chat"] == "test_chat.py"
    assert SURFACE_FILES["reason"] == "test_reasoning.py"  # the node ids kept their old name
    for name in SURFACE_FILES.values():
        assert (suites_dir() / name).is_file(), name
        assert (docs.ROOT / "suites" / name).is_file(), name


def test_a_new_surface_needs_no_other_edit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SURFACES, "FAKE", "a surface only this test has")
    assert surface_files()["fake"] == suite_file("FAKE") == "test_fake.py"
    written = docs.suite_files()
    suite = written[docs.ROOT / "servecheck" / "suites" / "test_fake.py"]
    shim = written[docs.ROOT / "suites" / "test_fake.py"]
    assert 'SURFACE = "FAKE"' in suite and "def test_conformance(sc_case, sc_ctx):" in suite
    assert "from servecheck.suites.test_fake import *" in shim


def test_every_surface_module_is_imported() -> None:
    load_all()
    names = [m.name for m in pkgutil.iter_modules(surfaces.__path__)]
    missing = [n for n in names if f"servecheck.checks.surfaces.{n}" not in sys.modules]
    assert names and not missing, missing
    empty = [s for s in SURFACES if not any(c.surface == s for c in load_all().values())]
    assert not empty, f"surfaces with no check: {empty}"
