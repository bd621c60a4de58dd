"""What memlint reports on real code: per repository, its files, lines and findings per rule.

    python bench/real_code.py DIR [--select ALL] [--findings] [--json OUT]

DIR holds one folder per repository (a checkout, or the corpus built as ../shared/corpus says).
Every rule runs (`--select` narrows it), with each file's fixes held to its project's declared
torch (memlint.torch_target). `--findings` also lists every finding, for a review one by one;
`--json` writes them all (repository, path, line, code, message, fix safety).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Dict, List

from memlint.config import Config, Selection
from memlint.rules import registry
from memlint.run import Options, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--select", default="ALL", help="codes or prefixes, comma-separated (default: ALL)")
    parser.add_argument("--findings", action="store_true", help="list every finding")
    parser.add_argument("--json", type=Path, help="write every finding to this file")
    args = parser.parse_args()

    rules = registry()
    selection = Selection(select=[s.strip() for s in args.select.split(",") if s.strip()])
    repositories = sorted(p for p in args.folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    codes = [code for code in rules if any(_selects(s, code) for s in selection.select or [])]
    rows: List[Dict[str, object]] = []
    everything: List[Dict[str, object]] = []
    for repository in repositories:
        config = Config(root=repository, selection=selection)
        outcomes = run([str(repository)], config, rules, Options())
        lines = 0
        for outcome in outcomes:
            try:
                lines += _line_count(Path(outcome.display))
            except OSError:
                pass
        counts = Counter(f.code for o in outcomes for f in o.findings)
        errors = sum(1 for o in outcomes if o.error is not None)
        rows.append({"repository": repository.name, "files": len(outcomes), "lines": lines,
                     "errors": errors, **{code: counts.get(code, 0) for code in codes}})
        for outcome in outcomes:
            for f in outcome.findings:
                everything.append({"repository": repository.name, "path": outcome.display, "line": f.line,
                                   "code": f.code, "message": f.message,
                                   "fix": f.fix.safety.value if f.fix is not None else None})
    shown = [code for code in codes if any(row[code] for row in rows)]
    header = ["repository", "files", "lines", "errors", *shown]
    total = {"repository": "TOTAL", **{k: sum(int(r[k]) for r in rows) for k in header[1:]}}  # type: ignore[call-overload]
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" --- " for _ in header) + "|")
    for row in [*rows, total]:
        print("| " + " | ".join(str(row[k]) for k in header) + " |")
    if args.findings:
        for item in everything:
            print(f"{item['path']}:{item['line']}: {item['code']} [{item['fix'] or 'no fix'}] {item['message']}")
    if args.json is not None:
        args.json.write_text(json.dumps(everything, indent=1), encoding="utf-8")
    return 0


def _selects(selector: str, code: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


def _line_count(path: Path) -> int:
    with open(path, "rb") as file:
        return sum(1 for _ in file)


if __name__ == "__main__":
    sys.exit(main())
