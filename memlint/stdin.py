"""Standard input linted as a file: `memlint - --stdin-filename path/train.py`, for editors
and formatters-on-save that pipe a buffer. The text gets what the file it names would get in
a run (memlint.run.lint_text): that file's configuration and per-file ignores, `exclude` with
--force-exclude, notebook handling by its suffix. With --fix the fixed source is the output,
in the encoding it came in; when nothing can be fixed (the text does not parse, or is
excluded) it is the input unchanged, so that a pipe never loses the buffer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Mapping, Optional, Tuple, Type

from memlint.config import AnyConfig
from memlint.rule import Rule
from memlint.run import FileOutcome, Options, lint_text
from memlint.sourcefile import UnreadableFile, decode


def lint_stdin(name: Optional[str], config: AnyConfig, registry: Mapping[str, Type[Rule]],
               options: Options) -> Tuple[List[FileOutcome], Optional[bytes]]:
    """The outcome of standard input linted as the file `name` ("-" when unnamed), and with
    --fix the bytes to write out."""
    data = sys.stdin.buffer.read()
    display = name or "-"
    path = Path(display)
    echo = data if options.fix else None
    if options.force_exclude and name is not None and config.for_file(path).is_excluded(path):
        return [], echo
    try:
        source = decode(data)
    except UnreadableFile as error:
        return [FileOutcome(display, error=str(error))], echo
    outcome = lint_text(source, path, display, config, registry, options)
    if options.fix and outcome.text is not None:
        return [outcome], outcome.text.encode(source.encoding, "surrogateescape")
    return [outcome], echo
