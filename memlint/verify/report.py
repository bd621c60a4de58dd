"""The verifier's output: a text table or JSON, over the judged rows."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from typing import Dict, List, Optional, Sequence

from memlint.verify.judge import median as judge_median
from memlint.verify.judge import show
from memlint.verify.loopclock import WARMUP_SHARE
from memlint.verify.session import Row, attributed

COLUMNS = ("code", "where", "claim", "metric", "before", "after", "ratio", "verdict")


def per_device(runs) -> Optional[List[List[float]]]:
    """[[GPU index, median peak over the finished runs], ...] when the runs saw two or more GPUs."""
    peaks: Dict[int, List[int]] = {}
    for m in runs:
        if m.status == "ok":
            for index, peak, _ in m.devices or ():
                peaks.setdefault(index, []).append(peak)
    if len(peaks) < 2:
        return None
    return [[index, statistics.median(values)] for index, values in sorted(peaks.items())]


def _imbalance(devices: List[List[float]]) -> str:
    used = [peak for _, peak in devices if peak > 0]
    return "-" if len(used) < 2 else f"{(max(used) - min(used)) / max(used) * 100:.0f}%"


def _device_lines(rows: Sequence[Row]) -> List[str]:
    lines = []
    for row in rows:
        sides = []
        for side, runs, program in (("before", row.before, row.comparison.before),
                                    ("after", row.after, row.comparison.after)):
            devices = per_device(runs)
            if devices is None:
                continue
            started = f" ({program.launcher.describe()})" if program.launcher else ""
            peaks = ", ".join(f"cuda:{index} {show(peak, 'bytes')}" for index, peak in devices)
            sides.append(f"{side}{started} {peaks} (imbalance {_imbalance(devices)})")
        if sides:
            lines.append(f"  {_label(row)}: " + "; ".join(sides))
    return lines


def environment_line(target: str, device: Dict[str, object], repeat: int, jobs: int = 1) -> str:
    runs = f"{repeat} run{'s' if repeat != 1 else ''} each, medians"
    if jobs > 1:
        runs += f"; up to {jobs} runs at once (timed runs alone)"
    if device.get("runs"):
        runs += f"; {device['runs']}"
    if device.get("kind") == "cuda":
        count = device.get("count") or 1
        name = f"{count} CUDA devices ({device.get('name') or '?'})" if count > 1 else \
            f"CUDA device {device.get('name') or '?'}"
        return (f"memlint verify {target}: {name}, "
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


def _loop_lines(rows: Sequence[Row]) -> List[str]:
    """Per row judged by time per iteration: which loop, how many iterations, and the whole runs."""
    lines = []
    for row in rows:
        for j in row.judgements:
            if j.loop is None:
                continue
            before, after = j.loop["before"], j.loop["after"]
            if row.comparison.fixture:
                where = f"before.py:{before} (after.py:{after})"
            else:
                where = f"line {before}" + (f" (line {after} after the fix)" if after != before else "")
            counts = [f"{count:g}" for count in j.loop["iterations"]]
            ran = counts[0] if counts[0] == counts[1] else " and ".join(counts)
            whole = [judge_median([m.seconds for m in runs if m.status == "ok"]) for runs in (row.before, row.after)]
            lines.append(f"  {_label(row)}: the loop at {where}, {ran} iterations a run; whole runs "
                         f"{show(whole[0], 'seconds')} before, {show(whole[1], 'seconds')} after")
    return lines


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
    loops = _loop_lines(rows)
    if loops:
        notes += ["", f"time per iteration (steady state: the first {WARMUP_SHARE:.0%} of each run's iterations "
                      "left out as warm-up):", *loops]
    devices = _device_lines(rows)
    if devices:
        notes += ["", "peak per GPU (max allocated, medians; imbalance: (largest - smallest) / largest):", *devices]
    peaks = [f"  {_label(row)}: {found['summary']}" for row in rows for found in (attributed(row),) if found]
    if peaks:
        notes += ["", "where the peak is (memory alive at the peak, by the script line that allocated it):", *peaks]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = [header, ""]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in table]
    if notes:
        lines += notes if notes[0] == "" else ["", *notes]
    if skipped:
        lines += ["", "not verified:"]
        lines += [f"  {code} line {line}: {why}" if line else f"  {code}: {why}" for code, line, why in skipped]
    return "\n".join(lines) + "\n"


def _launcher(program) -> Optional[str]:
    return program.launcher.describe() if program.launcher else None


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
            "devices": {"before": per_device(row.before), "after": per_device(row.after)},
            "launcher": {"before": _launcher(c.before), "after": _launcher(c.after)},
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
