"""Text charts: block sparklines for histories, a braille x/y plot for the ramp curves.

Pure functions from numbers to characters (no Textual, no colour) so they are unit-testable;
widgets add styles. Unknown points (None) leave a gap rather than drawing a made-up 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

BLOCKS = " ▁▂▃▄▅▆▇█"
# One glyph per arm so plots stay readable without colour (NO_COLOR).
ARM_GLYPHS = "●▲■◆✚★"
# Queue time over half of TTFT: a letter, not a shape, so that it is never read as an arm's glyph.
QUEUE_MARK = "Q"


def arm_glyph(index: int) -> str:
    return ARM_GLYPHS[index % len(ARM_GLYPHS)]


def spark_rows(values: Sequence[Optional[float]], width: int, height: int = 1,
               lo: Optional[float] = None, hi: Optional[float] = None) -> list[str]:
    """The last `width` values as `height` rows of block characters, top row first.

    lo/hi fix the scale (e.g. 0..1 for a usage share); by default 0..max, and a series that
    never changes is a low line (one eighth) whatever its value; a flat zero stays at the bottom.
    """
    # Each panel draws ~10 of these a tick at ~70 columns: one comprehension for the cells'
    # eighths and one glyph table per row (a Python loop with min/max per cell cost ~80 us each,
    # a fifth of a 3-arm tick). `v != v` is NaN's test.
    width = max(width, 0)
    height = max(height, 1)
    vals = list(values)[-width:] if width else []
    known = [v for v in vals if v is not None and v == v]
    if lo is None:
        lo = min(0.0, min(known)) if known else 0.0
    if hi is None:
        hi = max(known) if known else 1.0
        if known and hi > lo and min(known) == hi:
            # a flat series on its own scale would fill every cell (a full bar reads as 'at the
            # top'): nothing changed, so it is drawn as a low line of one eighth
            hi = lo + (hi - lo) * height * 8
    span = hi - lo if hi > lo else 1.0
    levels = height * 8
    # a cell's eighths from the bottom; -1 a gap (the glyph tables end with a blank for it).
    # A known non-zero value never vanishes: at least one eighth of a cell.
    # (v > lo makes the share positive: only its top is clamped, and round() of a positive
    # share under one eighth is 0, made 1)
    cols = [-1 if v is None or v != v else
            0 if v <= lo else
            (round(f * levels) or 1) if (f := (v - lo) / span) < 1.0 else levels
            for v in vals]
    pad = " " * (width - len(cols))
    rows = []
    for r in range(height):
        floor = (height - 1 - r) * 8  # eighths below this row
        glyph = [BLOCKS[min(max(c - floor, 0), 8)] for c in range(levels + 1)] + [" "]
        rows.append(pad + "".join([glyph[c] for c in cols]))
    return rows


def bar(frac: Optional[float], width: int) -> tuple[str, str]:
    """A horizontal bar as (filled, empty) strings with eighth-cell resolution."""
    if width <= 0:
        return "", ""
    if frac is None:
        return "", "·" * width
    frac = min(max(frac, 0.0), 1.0)
    eighths = round(frac * width * 8)
    full, part = divmod(eighths, 8)
    partials = " ▏▎▍▌▋▊▉"
    filled = "█" * full + (partials[part] if part and full < width else "")
    return filled, " " * (width - len(filled))


# --------------------------------------------------------------------------------------------
# x/y plot


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]  # (x, y), x ascending
    knee_x: Optional[float] = None  # confirmed knee
    predicted_x: Optional[float] = None  # predicted knee (drawn fainter)


@dataclass
class Plot:
    """A rendered plot: `cells[row][col]` is (char, series index or -1 for axes, kind)."""

    rows: list[list[tuple[str, int, str]]] = field(default_factory=list)
    y_labels: list[str] = field(default_factory=list)
    x_axis: str = ""


_BRAILLE_BITS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))


def xy_plot(series: Sequence[Series], width: int, height: int, y_fmt=lambda v: f"{v:g}",
            log_x: Optional[bool] = None) -> Plot:
    """Lines through each series' points in braille, a glyph at each point, the knee marked.

    Kinds in the cells: "line", "point", "knee" (confirmed), "pred" (predicted), "axis", "".
    x is logarithmic when the levels span 8x or more (ramps are usually geometric).
    """
    label_w = 7
    pw = max(width - label_w, 4)
    ph = max(height - 1, 2)  # last row is the x axis labels
    xs = sorted({x for s in series for x, _ in s.points})
    ys = [y for s in series for _, y in s.points if y is not None]
    plot = Plot()
    if not xs or not ys:
        blank = [(" ", -1, "")] * pw
        plot.rows = [list(blank) for _ in range(ph)]
        plot.y_labels = [""] * ph
        plot.x_axis = " " * (label_w + pw)
        return plot
    x_lo, x_hi = xs[0], xs[-1]
    if log_x is None:
        log_x = x_lo > 0 and x_hi / x_lo >= 8
    y_hi = max(ys) * 1.05 or 1.0
    y_lo = 0.0

    def fx(x: float) -> float:  # 0..1
        if x_hi == x_lo:
            return 0.5
        if log_x:
            return (math.log(x) - math.log(x_lo)) / (math.log(x_hi) - math.log(x_lo))
        return (x - x_lo) / (x_hi - x_lo)

    def fy(y: float) -> float:
        return (y - y_lo) / (y_hi - y_lo) if y_hi > y_lo else 0.0

    dots_w, dots_h = pw * 2, ph * 4
    bits = [[0] * pw for _ in range(ph)]
    owner = [[-1] * pw for _ in range(ph)]
    overlay: dict[tuple[int, int], tuple[str, int, str]] = {}

    def dot(dx: int, dy: int, si: int) -> None:
        if 0 <= dx < dots_w and 0 <= dy < dots_h:
            r, c = dy // 4, dx // 2
            bits[r][c] |= _BRAILLE_BITS[dy % 4][dx % 2]
            owner[r][c] = si

    def to_dots(x: float, y: float) -> tuple[int, int]:
        return (round(fx(x) * (dots_w - 1)), round((1 - fy(y)) * (dots_h - 1)))

    for si, s in enumerate(series):
        pts = [to_dots(x, y) for x, y in s.points if y is not None]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            n = max(abs(x1 - x0), abs(y1 - y0), 1)
            for i in range(n + 1):
                dot(round(x0 + (x1 - x0) * i / n), round(y0 + (y1 - y0) * i / n), si)
        for x, y in s.points:
            if y is None:
                continue
            dx, dy = to_dots(x, y)
            overlay[(dy // 4, dx // 2)] = (arm_glyph(si), si, "point")
        for kx, kind in ((s.predicted_x, "pred"), (s.knee_x, "knee")):
            if kx is None or not (x_lo <= kx <= x_hi):
                continue
            col = round(fx(kx) * (dots_w - 1)) // 2
            for r in range(ph):
                if (r, col) not in overlay or overlay[(r, col)][2] in ("pred",):
                    overlay[(r, col)] = ("┆" if kind == "knee" else "┊", si, kind)
            # The confirmed knee's own point gets a distinct marker.
            if kind == "knee":
                for x, y in s.points:
                    if x == kx and y is not None:
                        dx, dy = to_dots(x, y)
                        overlay[(dy // 4, dx // 2)] = ("◆", si, "knee")

    for r in range(ph):
        row = []
        for c in range(pw):
            if (r, c) in overlay:
                row.append(overlay[(r, c)])
            elif bits[r][c]:
                row.append((chr(0x2800 + bits[r][c]), owner[r][c], "line"))
            else:
                row.append((" ", -1, ""))
        plot.rows.append(row)

    # y labels on the top, middle and bottom rows
    plot.y_labels = [""] * ph
    for r, frac in ((0, 1.0), (ph // 2, 0.5), (ph - 1, 0.0)):
        v = y_lo + (y_hi - y_lo) * (1 - r / max(ph - 1, 1)) if ph > 1 else y_hi
        plot.y_labels[r] = y_fmt(v)
    # x labels at each level that fits
    axis = [" "] * pw
    for x in xs:
        lab = f"{x:g}"
        col = round(fx(x) * (pw - 1))
        start = min(max(col - len(lab) // 2, 0), pw - len(lab))
        if all(axis[i] == " " for i in range(max(start - 1, 0), min(start + len(lab) + 1, pw))):
            axis[start:start + len(lab)] = lab
    plot.x_axis = " " * label_w + "".join(axis)
    return plot
