"""Learning-curve figures: one colour per run, its seeds as a shaded band (PNG, matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pipelines.compare.aggregate import CARRIED, Band
from pipelines.files import atomic_path

FIGURE_INCHES = (8.0, 4.5)
FIGURE_DPI = 100  # 800 x 450 pixels


def plot_bands(
    series: Sequence[tuple[str, Band]],
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
) -> None:
    """Each run's mean curve over seeds, with the range of its seeds shaded; atomic write."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=FIGURE_INCHES, dpi=FIGURE_DPI)
    colours = plt.get_cmap("tab10" if len(series) <= 10 else "tab20")
    for i, (label, curve) in enumerate(series):
        colour = colours(i % colours.N)
        seeds = f"{curve.seeds} seed{'s' if curve.seeds != 1 else ''}"
        ax.plot(curve.x, curve.mean, color=colour, lw=1.8, label=f"{label} ({seeds})")
        if curve.seeds > 1:
            ax.fill_between(curve.x, curve.low, curve.high, color=colour, alpha=0.18, lw=0)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    if series:
        legend = ax.legend(loc="best", fontsize="small")
        if any(curve.seeds > 1 for _, curve in series):
            legend.set_title(f"mean, min-max of seeds; {CARRIED}", prop={"size": "x-small"})
    else:
        ax.text(0.5, 0.5, "no curves to show", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=FIGURE_DPI)
    plt.close(fig)
