from __future__ import annotations

import sys

from servecheck.cli import main

sys.exit(main())
