"""targets.yaml: model, loading, ${VAR} expansion, errors with file:line and did-you-mean."""

from servecheck.config.loader import ConfigError, Targets, load_targets, targets_json_schema
from servecheck.config.model import CAPABILITIES, ENGINES, Capabilities, Target

__all__ = [
    "CAPABILITIES",
    "ENGINES",
    "Capabilities",
    "ConfigError",
    "Target",
    "Targets",
    "load_targets",
    "targets_json_schema",
]
