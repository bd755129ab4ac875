"""A small SVG writer for the figures of bench/docblocks/figures.py, in plain Python.

Regenerating a figure must give the same bytes (the CPU test `cpu_docgen` compares them with the
committed file), so everything here is fixed: one font family and a few sizes, coordinates with
two decimals, no dates, no random ids, elements in the order they were drawn. Colours are the
Okabe-Ito palette (Okabe & Ito, "Color Universal Design", 2008), safe for colour-blind readers.
"""

import math

FONT = "DejaVu Sans, Arial, sans-serif"
# Okabe-Ito: distinguishable under the common colour-vision deficiencies.
BLACK, ORANGE, SKY, GREEN, YELLOW, BLUE, VERMILLION, PURPLE = (
    "#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
GRID = "#DDDDDD"
AXIS = "#333333"


def num(v):
    """A coordinate: two decimals, trailing zeros dropped ("12.5", "3", "-0.25")."""
    s = "%.2f" % v
    s = s.rstrip("0").rstrip(".") if "." in s else s
    return "0" if s in ("-0", "") else s


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class Svg:
    """One figure: elements appended in drawing order, render() gives the file's text."""

    def __init__(self, width, height, title, desc=""):
        self.width, self.height = width, height
        self.title, self.desc = title, desc
        self.items = []

    def add(self, tag, attrs, text=None):
        a = "".join(' %s="%s"' % (k, esc(v)) for k, v in attrs if v is not None)
        self.items.append("<%s%s/>" % (tag, a) if text is None else "<%s%s>%s</%s>" % (tag, a, esc(text), tag))

    def line(self, x1, y1, x2, y2, stroke=AXIS, width=1.0, dash=None, opacity=None):
        self.add("line", [("x1", num(x1)), ("y1", num(y1)), ("x2", num(x2)), ("y2", num(y2)), ("stroke", stroke),
                          ("stroke-width", num(width)), ("stroke-dasharray", dash), ("stroke-opacity", opacity)])

    def polyline(self, points, stroke, width=2.0, dash=None):
        pts = " ".join("%s,%s" % (num(x), num(y)) for x, y in points)
        self.add("polyline", [("points", pts), ("fill", "none"), ("stroke", stroke), ("stroke-width", num(width)),
                              ("stroke-dasharray", dash), ("stroke-linejoin", "round")])

    def rect(self, x, y, w, h, fill, stroke=None, width=1.0):
        self.add("rect", [("x", num(x)), ("y", num(y)), ("width", num(w)), ("height", num(h)), ("fill", fill),
                          ("stroke", stroke), ("stroke-width", num(width) if stroke else None)])

    def text(self, x, y, s, size=12, anchor="start", colour=BLACK, bold=False, rotate=None, halo=False):
        """Text at (x, y) (its baseline), turned by @p rotate degrees about that point (negative:
        anticlockwise); @p halo: a white outline under it, to read over lines."""
        attrs = [("x", num(x)), ("y", num(y)), ("font-size", str(size)), ("text-anchor", anchor), ("fill", colour),
                 ("font-weight", "bold" if bold else None),
                 ("transform", "rotate(%s %s %s)" % (num(rotate), num(x), num(y)) if rotate else None)]
        if halo:
            attrs += [("stroke", "#FFFFFF"), ("stroke-width", "3"), ("stroke-linejoin", "round"),
                      ("paint-order", "stroke")]
        self.add("text", attrs, s)

    def marker(self, x, y, shape, colour, filled=True, size=5.0):
        """A point: circle, square, diamond or triangle, filled or hollow (white inside)."""
        fill = colour if filled else "#FFFFFF"
        common = [("fill", fill), ("stroke", colour), ("stroke-width", "1.5")]
        if shape == "circle":
            self.add("circle", [("cx", num(x)), ("cy", num(y)), ("r", num(size))] + common)
            return
        if shape == "square":
            s = size * 0.9
            pts = [(x - s, y - s), (x + s, y - s), (x + s, y + s), (x - s, y + s)]
        elif shape == "diamond":
            s = size * 1.25
            pts = [(x, y - s), (x + s, y), (x, y + s), (x - s, y)]
        elif shape == "triangle":
            s = size * 1.2
            pts = [(x, y - s), (x + s, y + s * 0.8), (x - s, y + s * 0.8)]
        else:
            raise ValueError("unknown marker %s" % shape)
        self.add("polygon", [("points", " ".join("%s,%s" % (num(a), num(b)) for a, b in pts))] + common)

    def render(self):
        head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
                'font-family="%s">' % (self.width, self.height, self.width, self.height, FONT))
        out = [head, "<title>%s</title>" % esc(self.title)]
        if self.desc:
            out.append("<desc>%s</desc>" % esc(self.desc))
        out.append('<rect x="0" y="0" width="%d" height="%d" fill="#FFFFFF"/>' % (self.width, self.height))
        return "\n".join(out + self.items + ["</svg>"]) + "\n"


# ---- scales and axes ----------------------------------------------------------------------------


class Scale:
    """Data -> pixels along one axis, linear or log10, from [lo, hi] onto [p0, p1]."""

    def __init__(self, lo, hi, p0, p1, log=False):
        if log and (lo <= 0 or hi <= 0):
            raise ValueError("a log scale needs positive bounds (%r, %r)" % (lo, hi))
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log

    def _t(self, v):
        return math.log10(v) if self.log else v

    def __call__(self, v):
        a, b = self._t(self.lo), self._t(self.hi)
        return self.p0 + (self._t(v) - a) / (b - a) * (self.p1 - self.p0)

    def ticks(self):
        """(value, label or None) of the major ticks, and the minor tick values."""
        if self.log:
            e0, e1 = int(math.floor(math.log10(self.lo) + 1e-9)), int(math.ceil(math.log10(self.hi) - 1e-9))
            decades = e1 - e0
            major, minor = [], []
            for e in range(e0, e1 + 1):
                for m in (1, 2, 5) if decades <= 4 else (1,):
                    v = m * 10.0 ** e
                    if self.lo * (1 - 1e-9) <= v <= self.hi * (1 + 1e-9):
                        major.append((v, tick_text(v)))
                for m in range(2, 10):
                    v = m * 10.0 ** e
                    if self.lo < v < self.hi and (decades > 4 or m not in (2, 5)):
                        minor.append(v)
            return major, minor
        step = nice_step((self.hi - self.lo) / 5.0)
        v = math.ceil(self.lo / step - 1e-9) * step
        major = []
        while v <= self.hi + step * 1e-9:
            major.append((v, tick_text(v)))
            v += step
        return major, []


def nice_step(raw):
    e = 10.0 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * e >= raw * (1 - 1e-9):
            return m * e
    return 10 * e


def tick_text(v):
    """1000 -> "1000", 0.5 -> "0.5", 0.001 -> "0.001", 1e5 -> "100k"."""
    if v >= 1e5 and v % 1000 == 0:
        return "%dk" % round(v / 1000)
    if abs(v - round(v)) < 1e-9:
        return "%d" % round(v)
    return ("%.4f" % v).rstrip("0").rstrip(".")


def frame(svg, box, xs, ys, xlabel, ylabel, xticks=None, grid=True):
    """Axes of the plot area @p box = (left, top, right, bottom): grid, ticks, tick labels and the
    axis labels. @p xticks: [(value, label)] to use instead of the scale's (categories)."""
    left, top, right, bottom = box
    xmajor, xminor = (xticks, []) if xticks is not None else xs.ticks()
    ymajor, yminor = ys.ticks()
    if grid:
        for v in yminor:
            svg.line(left, ys(v), right, ys(v), GRID, 0.5, opacity="0.6")
        for v, _ in ymajor:
            svg.line(left, ys(v), right, ys(v), GRID, 1.0)
        for v in xminor:
            svg.line(xs(v), top, xs(v), bottom, GRID, 0.5, opacity="0.6")
        for v, _ in xmajor:
            svg.line(xs(v), top, xs(v), bottom, GRID, 1.0)
    svg.rect(left, top, right - left, bottom - top, "none", AXIS, 1.0)
    for v, label in ymajor:
        svg.line(left - 5, ys(v), left, ys(v), AXIS, 1.0)
        svg.text(left - 8, ys(v) + 4, label, 11, "end")
    for v, label in xmajor:
        svg.line(xs(v), bottom, xs(v), bottom + 5, AXIS, 1.0)
        for i, part in enumerate(label.split("\n")):
            svg.text(xs(v), bottom + 18 + 13 * i, part, 11, "middle")
    lines = max([label.count("\n") + 1 for _, label in xmajor] or [1])
    svg.text((left + right) / 2.0, bottom + 24 + 13 * lines, xlabel, 12, "middle")
    svg.text(left - 48, (top + bottom) / 2.0, ylabel, 12, "middle", rotate=-90)


def legend(svg, x, y, entries, columns=1):
    """A legend box at (x, y): entries of (kind, colour, label, style) with kind "marker" (style: (shape,
    filled)), "line" (style: dash or None) or "both" (style: (dash, shape, filled)), in @p columns
    columns filled row by row; returns (width, height)."""
    w, h = legend_size(entries, columns)
    cw = w / columns
    svg.rect(x, y, w, h, "#FFFFFF", "#BBBBBB", 1.0)
    for i, (kind, colour, label, style) in enumerate(entries):
        cx, cy = x + cw * (i % columns), y + 14 + 18 * (i // columns)
        if kind in ("line", "both"):
            svg.line(cx + 6, cy, cx + 36, cy, colour, 2.0, dash=style[0] if kind == "both" else style)
        if kind == "marker":
            svg.marker(cx + 21, cy, style[0], colour, style[1], 4.5)
        elif kind == "both":
            svg.marker(cx + 21, cy, style[1], colour, style[2], 3.5)
        svg.text(cx + 44, cy + 4, label, 11)
    return w, h


def legend_size(entries, columns=1):
    """(width, height) of legend()'s box."""
    rows = (len(entries) + columns - 1) // columns
    return (12 + 38 + max(6.4 * len(e[2]) for e in entries)) * columns, 8 + 18 * rows


def spread(ys, gap, lo, hi):
    """Label positions near @p ys, at least @p gap apart and within [lo, hi]: labels that would touch
    form a block centred on its points (blocks merge while they overlap); the same for the same input."""
    order = sorted(range(len(ys)), key=lambda i: (ys[i], i))
    blocks = []  # [first position, members]
    for i in order:
        blocks.append([ys[i], [i]])
        while len(blocks) > 1 and blocks[-2][0] + gap * len(blocks[-2][1]) > blocks[-1][0]:
            members = blocks[-2][1] + blocks[-1][1]
            blocks[-2:] = [[sum(ys[m] for m in members) / len(members) - gap * (len(members) - 1) / 2.0, members]]
    pos = [0.0] * len(ys)
    for first, members in blocks:
        for k, m in enumerate(members):
            pos[m] = first + gap * k
    prev = None
    for i in order:  # within the bounds, still apart
        pos[i] = max(pos[i], lo, prev + gap if prev is not None else lo)
        prev = pos[i]
    nxt = None
    for i in reversed(order):
        pos[i] = min(pos[i], hi, nxt - gap if nxt is not None else hi)
        nxt = pos[i]
    return pos
