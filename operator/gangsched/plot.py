"""The occupancy as a picture (`gangsched simulate --plot`, `gangsched top --plot`).

One panel per domain of the levels above the innermost (zone / block), one row per domain
of the innermost level (rack), one cell per node, filled from the left by the gangs holding
its GPUs (a colour per gang, grey for pods of no PodGroup, light for what is free). The
legend names the gangs (an automatic gang with its owner, `(Job/train)`); the gangs still
waiting are listed beside it.

matplotlib is an optional extra (`pip install 'gangsched[plot]'`), imported only here and
only when a picture is asked for, with the non-interactive Agg backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gangsched.occupancy import OTHER, NodeUse, Occupancy, shown

INSTALL_HINT = "pip install 'gangsched[plot]'"
FREE_COLOUR = "#ececec"
OTHER_COLOUR = "#8c8c8c"
# Gangs named in the legend; the rest are counted.
MAX_LEGEND = 24
# Nodes per row when there is no topology level to make rows of.
FLAT_ROW = 16


class PlotError(Exception):
    """No picture: matplotlib is missing or the file cannot be written (one line)."""


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotError(f"--plot needs matplotlib, an optional extra: {INSTALL_HINT}") from None
    return plt


def _short(level: str) -> str:
    return level.rsplit("/", 1)[-1]


def _layout(occ: Occupancy) -> dict[tuple[str, ...], dict[str, list[NodeUse]]]:
    """panel path -> row name -> nodes, sorted."""
    panels: dict[tuple[str, ...], dict[str, list[NodeUse]]] = {}
    if not occ.levels:
        for i, node in enumerate(occ.nodes):
            panels.setdefault((), {}).setdefault(f"{i // FLAT_ROW * FLAT_ROW:>4}", []).append(node)
        return panels
    for node in occ.nodes:
        panels.setdefault(node.path[:-1], {}).setdefault(node.path[-1], []).append(node)
    return {p: dict(sorted(rows.items())) for p, rows in sorted(panels.items())}


def colours(occ: Occupancy) -> dict[str, Any]:
    """A colour per holder, the biggest first (tab20, then tab20b, cycling)."""
    plt = _pyplot()
    ranked = [h for h, _ in sorted(occ.holders().items(), key=lambda kv: (-kv[1], kv[0])) if h != OTHER]
    ranked += sorted({w.name for w in occ.waiting} - set(ranked))
    # Ten distinct hues first, then their lighter twins, then more.
    tab20 = plt.get_cmap("tab20").colors
    palette = [*tab20[0::2], *tab20[1::2], *plt.get_cmap("tab20b").colors]
    out: dict[str, Any] = {name: palette[i % len(palette)] for i, name in enumerate(ranked)}
    out[OTHER] = OTHER_COLOUR
    return out


def _cell_label(node: str, row: str) -> str:
    """A node's name inside its cell: the part after its rack's name, else its last part."""
    if node.startswith(row) and len(node) > len(row) + 1:
        return node[len(row) :].lstrip("-.")
    return node.rsplit("-", 1)[-1]


def plot_occupancy(occ: Occupancy, path: Path, *, title: str | None = None) -> None:
    """Draw `occ` into `path` (PNG, or what its suffix names)."""
    plt = _pyplot()
    from matplotlib.patches import Patch, Rectangle

    layout = _layout(occ)
    colour = colours(occ)
    panels = list(layout.items()) or [((), {})]
    widest = max((len(nodes) for _, rows in panels for nodes in rows.values()), default=1)
    tallest = max((len(rows) for _, rows in panels), default=1)
    ncols = max(1, min(len(panels), 4, 32 // max(4, widest)))
    nrows = math.ceil(len(panels) / ncols)
    panel_w = max(2.6, 0.55 * widest + 1.4)
    panel_h = max(1.4, 0.42 * tallest + 0.9)
    side = 4.2
    width = min(ncols * panel_w + side, 60.0)
    height = min(nrows * panel_h + 1.0, 60.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False)
    labels = len(occ.nodes) <= 400
    for index, (panel, rows) in enumerate(panels):
        ax = axes[index // ncols][index % ncols]
        _panel(ax, occ, panel, rows, widest, colour, Rectangle, labels, index % ncols == 0)
    for index in range(len(panels), nrows * ncols):
        axes[index // ncols][index % ncols].axis("off")
    head = title or f"{occ.resource} by {' > '.join(_short(k) for k in occ.levels) or 'node'}"
    fig.suptitle(f"{head}: {occ.used}/{occ.total} used", fontsize=12)
    held = occ.holders()
    ranked = [h for h, _ in sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))]
    handles = [Patch(facecolor=colour[h], label=f"{shown(occ, h)} ({held[h]})") for h in ranked[:MAX_LEGEND]]
    handles.append(Patch(facecolor=FREE_COLOUR, edgecolor="#999999", label=f"free ({occ.total - occ.used})"))
    if any(n.unavailable for n in occ.nodes):
        handles.append(
            Patch(facecolor=FREE_COLOUR, edgecolor="#999999", hatch="////", label="cordoned or not ready")
        )
    if len(ranked) > MAX_LEGEND:
        handles.append(Patch(facecolor="white", label=f"... {len(ranked) - MAX_LEGEND} more"))
    right = 1 - side / width
    fig.subplots_adjust(
        left=0.6 / width + 0.03,
        right=right - 0.01,
        top=1 - 0.6 / height,
        bottom=0.4 / height,
        hspace=0.6,
        wspace=0.45,
    )
    legend = fig.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(right + 0.01, 1 - 0.6 / height), fontsize=8
    )
    legend.set_frame_on(False)
    # The waiting gangs right under the legend, wherever it ended.
    fig.canvas.draw()
    box = legend.get_window_extent().transformed(fig.transFigure.inverted())
    fig.text(right + 0.02, box.y0 - 0.02, _waiting_text(occ), fontsize=8, va="top", family="monospace")
    try:
        fig.savefig(path, dpi=110)
    except (OSError, ValueError) as exc:
        raise PlotError(f"cannot write {path}: {exc}") from None
    finally:
        plt.close(fig)


def _waiting_text(occ: Occupancy) -> str:
    if not occ.waiting:
        return "not placed: none"
    lines = ["not placed:"]
    for w in occ.waiting[:20]:
        why = f", {w.reason}" if w.reason else ""
        lines.append(shown(occ, w.name))
        lines.append(f"  {w.pods} pods, {w.units} {occ.resource}{why}")
    if len(occ.waiting) > 20:
        lines.append(f"... {len(occ.waiting) - 20} more")
    return "\n".join(lines)


def _panel(
    ax: Any,
    occ: Occupancy,
    panel: tuple[str, ...],
    rows: Mapping[str, Sequence[NodeUse]],
    widest: int,
    colour: Mapping[str, Any],
    rectangle: Any,
    labels: bool,
    first_column: bool,
) -> None:
    names = list(rows)
    for y, row in enumerate(names):
        top = len(names) - 1 - y  # the first row on top
        for x, node in enumerate(rows[row]):
            ax.add_patch(
                rectangle(
                    (x, top + 0.1),
                    0.92,
                    0.8,
                    facecolor=FREE_COLOUR,
                    edgecolor="#999999",
                    lw=0.6,
                    hatch="////" if node.unavailable else None,
                )
            )
            left = float(x)
            for name, units in sorted(node.holders.items(), key=lambda kv: (-kv[1], kv[0])):
                share = 0.92 * units / node.total if node.total else 0.0
                ax.add_patch(
                    rectangle((left, top + 0.1), share, 0.8, facecolor=colour.get(name, OTHER_COLOUR), lw=0)
                )
                left += share
            if labels:
                ax.text(
                    x + 0.46, top + 0.5, _cell_label(node.name, row), ha="center", va="center", fontsize=6
                )
    ax.set_xlim(-0.1, max(widest, 1))
    ax.set_ylim(0, max(len(names), 1))
    ax.set_yticks([len(names) - 1 - y + 0.5 for y in range(len(names))])
    ax.set_yticklabels(names, fontsize=7)
    ax.set_xticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    used = sum(n.used for nodes in rows.values() for n in nodes)
    total = sum(n.total for nodes in rows.values() for n in nodes)
    outer = occ.levels[: len(panel)]
    name = " / ".join(f"{_short(k)} {v}" for k, v in zip(outer, panel, strict=True)) or "cluster"
    ax.set_title(f"{name}  {used}/{total}", fontsize=9)
    if occ.levels and first_column:
        ax.set_ylabel(_short(occ.levels[-1]), fontsize=8)
