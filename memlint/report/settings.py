"""`memlint --show-settings FILE`: the settings that apply to one file and where they come
from, written as the TOML that would say them, so that a surprise in a monorepo (which
configuration won, what the command line changed, which rules run) is seen at a glance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Mapping, Sequence, Type

from memlint.config import Configurations
from memlint.rule import Rule


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(key)} = {_toml(item)}" for key, item in value.items()) + "}"
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value)


def _codes(codes: Sequence[str]) -> str:
    return _toml(list(codes))


def describe(path: Path, configs: Configurations, registry: Mapping[str, Type[Rule]]) -> List[str]:
    config = configs.for_file(path)
    if config.source is None:
        origin = "none (defaults)"
    elif config.source.name == "pyproject.toml":
        origin = f"{config.source} [tool.memlint]"
    else:
        origin = str(config.source)
    lines = [f"Settings for {path}", f"configuration: {origin}"]
    overrides = configs.overrides.describe()
    if overrides:
        lines.append(f"command line: {' '.join(overrides)}")
    selection = config.selection
    lines.append(f"select = {_codes(selection.select)}" if selection.select is not None
                 else "# select: the default rules")
    lines += [
        f"extend-select = {_codes(selection.extend_select)}",
        f"ignore = {_codes(selection.ignore)}",
        f"per-file-ignores = {_toml(config.per_file_ignores)}",
        f"exclude = {_codes(config.exclude)}",
        f"unsafe-fixes = {_toml(config.unsafe_fixes)}",
    ]
    target = config.target_for(path)
    if config.target_torch is not None:
        lines.append(f'target-torch = "{target}"')
    elif target is not None:
        lines.append(f'target-torch = "{target}"  # declared by the project\'s torch requirement')
    else:
        lines.append("# target-torch: none set or declared: every fix is offered")
    lines += [
        f"file-timeout = {_toml(config.file_timeout)}",
        f"rules = {', '.join(rule.CODE for rule in config.rules_for(path, registry))}",
        f"excluded = {_toml(config.is_excluded(path))}",
    ]
    return lines
