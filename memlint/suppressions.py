"""`# noqa` comments, in the grammar flake8 and ruff share, where they differ as ruff has it.

- `# noqa` on the reported line, or on the first line of its statement, hides every code there;
  `# noqa: MEM101, MEM2` (codes or prefixes, after the colon, separated by commas and/or
  whitespace) hides those codes only. The list ends at the first item that is not a code, so
  `# noqa: MEM101 keeps the buffer` is MEM101; a `#` ends it too.
- `noqa` must be followed by the end of the comment, whitespace, `#` or `:`; anything else
  (`# noqaxyz`) makes no directive. `# noqa:` with no code hides nothing (flake8 would read it
  as a bare `# noqa`; ruff warns and hides nothing: silence must be asked for).
- A comment that starts with `# memlint: noqa` hides every finding in the file;
  `# memlint: noqa: MEM101` hides those codes in the whole file, as `# ruff: noqa: F401` does.

Only real comments count (found with the tokenizer), so a "# noqa" inside a string does not.
Tokenizing costs over a quarter of a LibCST parse, so a file in which "noqa" appears nowhere, in any
case, is not tokenized: it has no directive.
"""

from __future__ import annotations

import functools
import io
import re
import tokenize
from typing import Dict, FrozenSet, List, Optional, Tuple

from memlint.findings import Finding

_ANY = re.compile(r"noqa", re.IGNORECASE)  # in every directive
_INLINE = re.compile(r"#\s*noqa", re.IGNORECASE)
_FILE = re.compile(r"#\s*memlint\s*:\s*noqa", re.IGNORECASE)
_CODE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)
_SEPARATORS = re.compile(r"[\s,]*")
EVERY_CODE: FrozenSet[str] = frozenset()  # a bare directive


def _codes(text: str) -> Optional[FrozenSet[str]]:
    """The codes of the list after `noqa:`; None when there is none (not a directive)."""
    codes = []
    position = _SEPARATORS.match(text).end()  # type: ignore[union-attr]
    while position < len(text) and text[position] != "#":
        code = _CODE.match(text, position)
        if code is None:
            break
        codes.append(code.group().upper())
        position = code.end()
        if position < len(text) and text[position].isalnum():
            return None  # `MEM101abc`: not a code list (ruff: invalid code suffix)
        position = _SEPARATORS.match(text, position).end()  # type: ignore[union-attr]
    return frozenset(codes) if codes else None


def _directive(text: str, prefix: "re.Pattern[str]") -> Optional[FrozenSet[str]]:
    """What the directive starting at `prefix`'s match in comment `text` hides: EVERY_CODE, some
    codes, or None when the match makes no directive."""
    match = prefix.match(text)
    if match is None:
        return None
    rest = text[match.end():]
    if not rest or rest[0] == "#" or rest[0].isspace():
        return EVERY_CODE
    if rest[0] == ":":
        return _codes(rest[1:])
    return None


class Suppressions:
    def __init__(self, source: str) -> None:
        self._file: Optional[FrozenSet[str]] = None  # codes hidden in the whole file
        self._lines: Dict[int, FrozenSet[str]] = {}
        self.named: List[Tuple[int, FrozenSet[str]]] = []  # (line, codes) of each directive with codes
        if _ANY.search(source) is None:
            return
        try:
            for token in tokenize.generate_tokens(io.StringIO(source).readline):
                if token.type == tokenize.COMMENT:
                    self._comment(token.start[0], token.string)
        except (tokenize.TokenError, SyntaxError):
            pass  # the source compiled; a tokenizer quirk only loses later comments

    def _comment(self, line: int, text: str) -> None:
        whole_file = _directive(text, _FILE)
        if whole_file:
            self.named.append((line, whole_file))
        if whole_file is not None:
            if self._file is None:
                self._file = whole_file
            elif self._file and whole_file:  # two lists of codes: both hold
                self._file |= whole_file
            else:  # one of them is bare
                self._file = EVERY_CODE
            return
        for start in (m.start() for m in _INLINE.finditer(text)):  # `# type: ignore  # noqa`
            codes = _directive(text[start:], _INLINE)
            if codes is not None:
                self._lines[line] = codes
                if codes:
                    self.named.append((line, codes))
                return

    @staticmethod
    def _hidden(code: str, codes: Optional[FrozenSet[str]]) -> bool:
        return codes is not None and (not codes or code.startswith(tuple(codes)))

    def hides(self, finding: Finding) -> bool:
        return self._hidden(finding.code, self._file) or any(
            self._hidden(finding.code, self._lines.get(line)) for line in {finding.line, finding.statement_line}
        )


_NAMES_OURS = re.compile(r"noqa\s*:[^\n]*?\bMEM", re.IGNORECASE)  # cheap: most files never say it


def unknown_codes(source: str) -> List[Tuple[int, str]]:
    """(line, code) for each memlint code (`MEM...`) a directive names that is no rule's code
    nor a prefix of one (`# noqa: MEM999`): it hides nothing, and is most likely a typo.
    Other tools' codes (`E501`) are theirs to judge."""
    if "noqa" not in source.lower() or _NAMES_OURS.search(source) is None:  # `in` is a third of a case-blind search
        return []
    known = _catalogue()
    return [(line, code) for line, codes in Suppressions(source).named for code in sorted(codes)
            if code.startswith("MEM") and not any(rule.startswith(code) for rule in known)]


@functools.lru_cache(maxsize=1)
def _catalogue() -> Tuple[str, ...]:
    from memlint.rules import registry  # here: the rules import the engine, which imports this

    return tuple(registry())
