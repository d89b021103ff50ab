"""A linear-time measuring pass for ziamath 0.13's rows (same output, far less work on nested formulas).

Before laying out a row, ziamath's ``Mrow`` lays out every child once more with ``nostretch`` to
learn the row's height without its stretchy operators (the height those operators then stretch
to). That measuring pass is itself a full layout, so a row inside it measures its own children
again: the work doubles with every level of nesting, and a printed number such as
``16{,}060{,}522{,}496`` is several nested groups. Inside a measuring pass the nested measurement
is wasted: it only chooses how far a stretchy operator stretches, and a measuring pass leaves
stretchy operators out of the heights it reports (ziamath's ``Moperator`` skips them when
``nostretch`` is set). So a row being measured skips its own measuring pass and keeps the heights
its enclosing row passed down; the real layout pass is unchanged.

Only the heights of a measuring pass are read, and those come from the same glyphs either way.
When this was written, all 349 formulas of the five example reports and 636 more typeset by the
tests (``latex --width`` layouts among them) gave the same SVG bytes, width and baseline with and
without it, and the example PDFs stayed byte-identical; ``tests/test_report_zialayout.py`` keeps
checking formulas of the same kinds. Applied only to the ziamath version it was written against;
any other version runs unchanged.
"""

from __future__ import annotations

from typing import Any

VERSION = "0.13"


def install(ziamath: Any) -> bool:
    """Make ``ziamath``'s measuring pass linear in the formula's size; whether it was applied."""
    if getattr(ziamath, "__version__", None) != VERSION:
        return False
    from ziafont.fonttypes import BBox
    from ziamath.nodes.mnode import Mnode
    from ziamath.nodes.mrow import Mrow
    from ziamath.nodes.nodetools import elementtext

    if getattr(Mrow, "_symbolic_linear", False):
        return True
    full = Mrow._setup_single_line

    def _setup_single_line(self: Any, line: list, **kwargs: Any) -> None:
        if not kwargs.get("nostretch"):
            return full(self, line, **kwargs)
        # a measuring pass: ziamath 0.13's loop without the nested measurement (see the module docstring)
        ymax = -9999
        ymin = 9999
        x = xmin = xmax = 0.
        for child in line:
            if child.tag == "mo" and elementtext(child) == "":
                continue
            node = Mnode.fromelement(child, parent=self, **kwargs)
            self.nodes.append(node)
            self.nodexy.append((x, 0))
            xmax = max(xmax, x + node.bbox.xmax)
            xmin = min([nxy[0] + n.bbox.xmin for nxy, n in zip(self.nodexy, self.nodes)])
            ymax = max(ymax, node.bbox.ymax)
            ymin = min(ymin, node.bbox.ymin)
            x += node.xadvance()
        self.bbox = BBox(xmin, xmax, ymin, ymax)
        self._xadvance = x
        return None

    Mrow._symbolic_full = full  # ziamath's own, for the test that compares the two
    Mrow._setup_single_line = _setup_single_line
    Mrow._symbolic_linear = True
    return True
