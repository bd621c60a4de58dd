"""`# noqa` comments: `# noqa`, `# noqa: MEM101`, `# noqa: MEM101,MEM2` (codes or prefixes) on
the reported line or on the first line of its statement, and `# memlint: noqa` for a whole file.

Only real comments count (found with the tokenizer), so a "# noqa" inside a string does not.
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, FrozenSet, Optional

from memlint.findings import Finding

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]*(?:\s*,\s*[A-Za-z]+[0-9]*)*))?",
                   re.IGNORECASE)
_FILE_NOQA = re.compile(r"#\s*memlint\s*:\s*noqa\b", re.IGNORECASE)


class Suppressions:
    def __init__(self, source: str) -> None:
        self.whole_file = False
        self._lines: Dict[int, FrozenSet[str]] = {}
        try:
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type == tokenize.COMMENT:
                    self._comment(token.start[0], token.string)
        except (tokenize.TokenError, SyntaxError):
            pass  # the source parsed with LibCST; a tokenizer quirk only loses later comments

    def _comment(self, line: int, text: str) -> None:
        if _FILE_NOQA.search(text):
            self.whole_file = True
        match = _NOQA.search(text)
        if match is None:
            return
        codes = match.group("codes")
        # an empty set: a bare `# noqa` suppresses every code on its line
        self._lines[line] = (
            frozenset() if codes is None
            else frozenset(code.strip().upper() for code in codes.split(","))
        )

    def _suppresses(self, line: int, code: str) -> bool:
        codes: Optional[FrozenSet[str]] = self._lines.get(line)
        if codes is None:
            return False
        return not codes or any(code.startswith(prefix) for prefix in codes)

    def hides(self, finding: Finding) -> bool:
        return self.whole_file or any(
            self._suppresses(line, finding.code) for line in {finding.line, finding.statement_line}
        )
