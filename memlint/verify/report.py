"""The verifier's output: a text table or JSON, over the judged rows."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Dict, List, Optional, Sequence

from memlint.verify.judge import show
from memlint.verify.session import Row, attributed

COLUMNS = ("code", "where", "claim", "metric", "before", "after", "ratio", "verdict")


def environment_line(target: str, device: Dict[str, object], repeat: int, jobs: int = 1) -> str:
    runs = f"{repeat} run{'s' if repeat != 1 else ''} each, medians"
    if jobs > 1:
        runs += f"; up to {jobs} runs at once (timed runs alone)"
    if device.get("runs"):
        runs += f"; {device['runs']}"
    if device.get("kind") == "cuda":
        return (f"memlint verify {target}: CUDA device {device.get('name') or '?'}, "
                f"torch {device.get('torch')}; device memory (max allocated); {runs}")
    return (f"memlint verify {target} on the CPU ({device.get('note', '')}, torch {device.get('torch')}): "
            f"memory is host memory (peak RSS the script added), not GPU memory; {runs}")


def _where(row: Row) -> str:
    comparison = row.comparison
    if comparison.fixture:
        return comparison.fixture
    return "-" if comparison.line is None else f"line {comparison.line}"


def _label(row: Row) -> str:
    comparison = row.comparison
    if comparison.code == "all":
        return "all fixes"
    return f"{comparison.code} {_where(row)}"


def _stderr(measurement) -> str:
    return "\n".join("      " + line for line in measurement.stderr_tail.splitlines()[-5:])


def _failure_notes(rows: Sequence[Row]) -> List[str]:
    """The original's last stderr lines once; a fix's only where they differ from the original's."""
    notes: List[str] = []
    shown = set()
    for row in rows:
        original = next((m for m in row.before if m.status not in ("ok", "error")), None)
        for side, runs in (("original", row.before), ("fixed", row.after)):
            failed = next((m for m in runs if m.status not in ("ok", "error")), None)
            if failed is None or not failed.stderr_tail:
                continue
            if side == "fixed" and original is not None and failed.stderr_tail == original.stderr_tail:
                continue
            who = (f"{row.comparison.fixture}/before.py" if row.comparison.fixture else "the original script") \
                if side == "original" else f"{_label(row)}" + ("/after.py" if row.comparison.fixture else "")
            if failed.stderr_tail in shown:
                continue
            shown.add(failed.stderr_tail)
            notes.append(f"  {who}: last stderr lines:\n{_stderr(failed)}")
    return notes


def text(rows: Sequence[Row], skipped: Sequence[tuple], header: str) -> str:
    table: List[List[str]] = [list(COLUMNS)]
    notes: List[str] = []
    for row in rows:
        for index, j in enumerate(row.judgements):
            ratio = "-" if j.ratio is None else f"{j.ratio:.2f}"
            table.append([row.comparison.code if index == 0 else "", _where(row) if index == 0 else "",
                          j.claim, j.metric, show(j.before, j.unit), show(j.after, j.unit), ratio, j.verdict])
            if j.reason and (j.verdict != "confirmed" or j.reason.startswith("out-of-memory")):
                notes.append(f"  {_label(row)} ({j.claim}): {j.reason}")
    notes += _failure_notes(rows)
    if rows and all(any(m.status != "ok" for m in row.before) for row in rows):
        notes.insert(0, "  the original script fails, so nothing could be compared "
                        "(are its arguments given after `--`?)")
    peaks = [f"  {_label(row)}: {found['summary']}" for row in rows for found in (attributed(row),) if found]
    if peaks:
        notes += ["", "where the peak is (memory alive at the peak, by the script line that allocated it):", *peaks]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = [header, ""]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]
    if notes:
        lines += ["", *notes]
    if skipped:
        lines += ["", "not verified:"]
        lines += [f"  {code} line {line}: {why}" if line else f"  {code}: {why}" for code, line, why in skipped]
    return "\n".join(lines) + "\n"


def _run(m) -> dict:
    data = asdict(m)
    data.pop("timeline", None)
    return data


def as_json(rows: Sequence[Row], skipped: Sequence[tuple], target: str, device: Optional[Dict[str, object]],
            repeat: int, message: str = "") -> str:
    results = []
    for row in rows:
        c = row.comparison
        results.append({
            "code": c.code, "line": c.line, "fixture": c.fixture or None, "safety": c.safety or None,
            "description": c.description, "verdict": row.verdict,
            "claims": [asdict(j) for j in row.judgements],
            "peak_attribution": attributed(row),
            "before_runs": [_run(m) for m in row.before], "after_runs": [_run(m) for m in row.after],
        })
    summary: Dict[str, int] = {}
    for row in rows:
        summary[row.verdict] = summary.get(row.verdict, 0) + 1
    return json.dumps({
        "version": 1, "target": target, "device": device, "repeat": repeat, "results": results,
        "skipped": [{"code": code, "line": line or None, "why": why} for code, line, why in skipped],
        "summary": summary, **({"message": message} if message else {}),
    }, indent=2)
