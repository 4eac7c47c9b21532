"""``rgb_array`` rendering: the GPU-state timeline as an image (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STATE_COLOURS: dict[str, str] = {
    "training": "#1f77b4",  # blue
    "lent": "#17becf",  # cyan: training on borrowed inference GPUs
    "inference-running": "#d62728",  # red
    "protect": "#ff7f0e",  # orange: warm pod kept for the next request
    "sleep": "#f2d28b",  # pale yellow: sleeping pod (lendable)
    "idle": "#e6e6e6",  # light grey
}
"""One colour per GPU state (the keys are :data:`~deepboot_env.sim.metrics.GPU_STATES`), shared by
the env's rendering and every plot of the harness."""


def timeline_rgb(
    timeline: Sequence[tuple[float, ...]], title: str = "", size: tuple[int, int] = (640, 320)
) -> np.ndarray:
    """Stacked GPUs by state over time, as an (H, W, 3) uint8 array."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    dpi = 80
    fig = Figure(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
    ax = fig.add_subplot()
    if timeline:
        data = np.asarray(timeline, dtype=float)
        hours = data[:, 0] / 3600.0
        ax.stackplot(
            hours, data[:, 1:7].T, labels=list(STATE_COLOURS), colors=list(STATE_COLOURS.values()), step="post"
        )
        ax.set_xlim(hours[0], max(hours[-1], hours[0] + 1e-6))
    ax.set_xlabel("time (h)")
    ax.set_ylabel("GPUs")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper right", fontsize=6, ncol=3)
    fig.tight_layout()
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgba = np.asarray(canvas.buffer_rgba())
    return rgba[:, :, :3].copy()
