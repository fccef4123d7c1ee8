"""Configs are data: YAML validated by the JSON schemas (src/tapernorm/schemas), read into one
typed RunConfig.

load.py   YAML loading, the schemas' validation and defaults, resolve_run_config (the one builder
          of a run's settings)
run.py    RunConfig: a run's settings, typed and frozen, one dataclass per section
"""

from .load import (
    ConfigError,
    check_yaml_files,
    config_text,
    load_run_config,
    load_schema,
    parse_overrides,
    resolve_run_config,
    section_defaults,
    section_schema,
    set_key,
    validate,
    validate_section,
    yaml_load,
)
from .run import RunConfig

__all__ = [
    "ConfigError",
    "RunConfig",
    "check_yaml_files",
    "config_text",
    "load_run_config",
    "load_schema",
    "parse_overrides",
    "resolve_run_config",
    "section_defaults",
    "section_schema",
    "set_key",
    "validate",
    "validate_section",
    "yaml_load",
]
