"""The README stays true: two commands first, and the rules table equal to `memlint rules`."""

from __future__ import annotations

import re
from pathlib import Path

from memlint.docs import rules_table
from memlint.rules import registry

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_readme_opens_with_exactly_two_commands():
    first_block = re.search(r"```sh\n(.*?)```", README, re.S)
    assert first_block is not None and README.index("```") == first_block.start()
    commands = first_block.group(1).strip().splitlines()
    assert len(commands) == 2
    assert "memlint examples/" in commands[0] and "--diff examples/" in commands[0]
    assert "pytest" in commands[1] and "constraints-test.txt" in commands[1]


def test_rules_table_matches_the_registry():
    table = re.search(r"<!-- rules-table[^\n]*-->\n(.*?)\n<!-- end rules-table -->", README, re.S)
    assert table is not None
    assert table.group(1) == rules_table(registry())
