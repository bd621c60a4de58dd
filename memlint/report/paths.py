"""Paths as code-scanning tools resolve them: from the root of the repository (the folder with
`.git` at or above the working folder), not from wherever memlint happened to run. GitHub
reads an annotation's `file=` and a SARIF location that way; run from `tests/`, memlint's
`test_x.py` is the repository's `tests/test_x.py`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional


def repository_root(start: Optional[Path] = None) -> Path:
    """The repository holding `start` (the working folder), else `start` itself."""
    here = Path(os.path.realpath(start or Path.cwd()))
    for folder in (here, *here.parents):
        if os.path.exists(folder / ".git"):
            return folder
    return here


def from_root(display: str, root: Path) -> str:
    """`display` (relative to the working folder, or absolute) relative to `root`, with `/`;
    absolute when it lies outside `root`."""
    absolute = Path(os.path.abspath(display))
    real = Path(os.path.realpath(absolute.parent), absolute.name)  # a link is named as it is
    try:
        return real.relative_to(root).as_posix()
    except ValueError:
        return str(absolute)
