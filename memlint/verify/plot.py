"""--plot: memory over time, before against after, one panel per pair (matplotlib, imported lazily)."""

from __future__ import annotations

import importlib.util
from typing import List, Optional, Sequence, Tuple

Series = Tuple[str, Optional[List[List[float]]]]


class PlotError(Exception):
    """The plot cannot be drawn; the message is one line."""


def available() -> bool:
    """matplotlib can be imported (tried for real: a broken install counts as missing)."""
    if importlib.util.find_spec("matplotlib") is None:
        return False
    try:
        import matplotlib  # noqa: F401
    except Exception:
        return False
    return True


MISSING = "--plot needs matplotlib: pip install matplotlib (or pip install 'memlint[verify]')"


def plot(panels: Sequence[Tuple[str, Sequence[Series]]], memory: str, path: str) -> None:
    if not available():
        raise PlotError(MISSING)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    what = "device memory allocated" if memory == "device" else "host RSS above the script's start"
    figure, axes = plt.subplots(len(panels) or 1, 1, figsize=(9, 3.2 * max(1, len(panels))), squeeze=False)
    for axis, (title, series) in zip(axes[:, 0], panels):
        for label, timeline in series:
            if not timeline:
                axis.plot([], [], label=f"{label} (no timeline recorded)")
                continue
            xs = [max(0.0, t) for t, _ in timeline]
            ys = [b / 2**20 for _, b in timeline]
            line, = axis.step(xs, ys, where="post", label=f"{label} (peak {max(ys):.1f} MiB)")
            top = ys.index(max(ys))
            axis.plot([xs[top]], [ys[top]], "o", color=line.get_color())  # the peak the label explains
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("seconds since the script started")
        axis.set_ylabel(f"MiB ({what})", fontsize=8)
        axis.legend(fontsize=8)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=110)
    except OSError as error:
        raise PlotError(f"cannot write {path}: {error}") from None
    finally:
        plt.close(figure)
