"""One module per surface, named after the surface's id (``ctx`` holds CTX-*); importing this
package registers every check.

Every module of the package is imported, found on disk rather than listed here, so a new
surface is its module, its line in ``SURFACES`` (``checks/registry.py``) and its faults: the
suite files and ``--surface`` follow from ``SURFACES`` (``python -m servecheck.docs``).
"""

from __future__ import annotations

import importlib
import pkgutil


def _import_all() -> None:
    """Import each module of this package (in name order, as a written list would)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


_import_all()
