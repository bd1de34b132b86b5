"""Merging the per-process files of ``streamer.timing`` into one table (and a chart)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

__all__ = ["PhaseTotal", "merge", "render_table", "write_chart"]


@dataclass
class PhaseTotal:
    """One phase summed over every process of a run."""

    name: str
    count: int
    total_s: float
    max_s: float
    share: float  # of the processes' summed wall time


def merge(paths: list[str]) -> tuple[list[PhaseTotal], float, int]:
    """(phases sorted by total time, summed wall seconds, process count)."""
    totals: dict[str, list[float]] = {}
    wall = 0.0
    for path in paths:
        with open(path) as file:
            figures = json.load(file)
        wall += float(figures["wall_s"])
        for name, (count, total, peak) in figures["phases"].items():
            merged = totals.setdefault(name, [0, 0.0, 0.0])
            merged[0] += count
            merged[1] += total
            merged[2] = max(merged[2], peak)
    phases = [
        PhaseTotal(name, int(c), t, m, t / wall if wall else 0.0)
        for name, (c, t, m) in totals.items()
    ]
    phases.sort(key=lambda p: p.total_s, reverse=True)
    return phases, wall, len(paths)


def render_table(phases: list[PhaseTotal], wall: float, processes: int) -> str:
    lines = [
        f"{processes} process(es), {wall:.2f} s of wall time in all",
        f"{'phase':<20}{'count':>10}{'total s':>11}{'mean ms':>10}{'max ms':>10}{'share':>8}",
    ]
    for p in phases:
        mean_ms = p.total_s / p.count * 1e3 if p.count else 0.0
        lines.append(
            f"{p.name:<20}{p.count:>10}{p.total_s:>11.3f}{mean_ms:>10.3f}"
            f"{p.max_s * 1e3:>10.2f}{p.share:>8.1%}"
        )
    return "\n".join(lines)


def write_chart(phases: list[PhaseTotal], path: str) -> None:
    """A horizontal bar chart of total time per phase (needs matplotlib: the ``plot`` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(
            "the chart needs matplotlib: pip install 'streamer-audio[plot]'"
        ) from exc
    figure, axes = plt.subplots(figsize=(8, 0.4 * len(phases) + 1.2))
    names = [p.name for p in reversed(phases)]
    axes.barh(names, [p.total_s for p in reversed(phases)])
    axes.set_xlabel("total seconds, all processes")
    axes.set_title(f"streamer phases ({os.path.basename(path)})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
