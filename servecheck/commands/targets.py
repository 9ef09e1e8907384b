"""``servecheck targets``: validate targets.yaml and list what it defines."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from servecheck.config import load_targets, targets_json_schema
from servecheck.config.loader import ConfigError
from servecheck.engines.registry import resolve_capabilities


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--targets-file",
        default=os.environ.get("SERVECHECK_TARGETS_FILE", "targets.yaml"),
        metavar="PATH",
        help="targets file (default: %(default)s, env SERVECHECK_TARGETS_FILE)",
    )
    parser.add_argument(
        "--schema",
        action="store_true",
        help="print the JSON Schema of targets.yaml (for editors) and exit",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    if args.schema:
        print(json.dumps(targets_json_schema(), indent=2))
        return 0
    loaded = load_targets(args.targets_file)
    rows: list[dict[str, Any]] = []
    for target in loaded.targets.values():
        caps = resolve_capabilities(target)
        rows.append(
            {
                "name": target.name,
                "engine": target.engine,
                "base_url": target.base_url,
                "api_key": "set" if target.api_key else "none",
                "models": target.models or "discover",
                "context_length": target.context_length or "discover",
                "capabilities_off": sorted(k for k, v in caps.items() if not v),
                "problems": [],
            }
        )
    for name, problems in loaded.broken.items():
        rows.append({"name": name, "problems": problems})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            if row["problems"]:
                print(f"{row['name']}: NOT USABLE")
                for problem in row["problems"]:
                    print(f"  {problem}")
                continue
            models = ", ".join(row["models"]) if isinstance(row["models"], list) else row["models"]
            print(
                f"{row['name']}: {row['engine']} at {row['base_url']} (key {row['api_key']}; models {models};"
                f" context {row['context_length']})"
            )
            if row["capabilities_off"]:
                print(f"  capabilities off: {', '.join(row['capabilities_off'])}")
    if loaded.broken:
        raise ConfigError([p for plist in loaded.broken.values() for p in plist])
    return 0
