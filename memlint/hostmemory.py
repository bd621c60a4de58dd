"""How much memory the machine can give new work now: one reading, for the linter's budget per
worker (memlint.jobs) and the verifier's budget of runs at once (memlint.verify)."""

from __future__ import annotations

from typing import Optional


def available() -> Optional[int]:
    """Bytes of memory available now (Linux's MemAvailable), or None where it is not known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
