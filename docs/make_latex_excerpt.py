"""Regenerate docs/latex-two-column.png: `symbolic latex --width \\columnwidth` output set in a two-column article.

Usage: ``python docs/make_latex_excerpt.py [--output PNG] [--keep DIR]``. The equations come from the
command itself (``symbolic latex llm.peak --width \\columnwidth --env multline`` in the left column,
the composed form of ``llm.peak`` with ``--env align`` in the right one), wrapped in the minimal
document that ``--document`` writes, with a little text around them so the page reads as a paper.
pdflatex compiles it (any overfull box is an error), pdftoppm renders the page and Pillow crops
it to what is printed. Needs pdflatex and pdftoppm (Debian: texlive-latex-base, poppler-utils).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "latex-two-column.png"
RESOLUTION = 110  # dots per inch of the rendered page
OVERFULL = re.compile(r"Overfull \\hbox \((\d+(?:\.\d+)?)pt too wide\)")

LEFT = r"""\section*{Peak training memory}
Article B counts the peak memory of one training step as the model states, the activations
and the logits. Printed by \texttt{symbolic latex llm.peak --width \textbackslash columnwidth
--env multline}, the total breaks at its top-level terms, in the author's order:
"""
LEFT_AFTER = r"""Each term keeps its source: $4N + 8N + 4N$ are the fp32 weights, Adam states and gradients,
$8BD$ the int64 inputs, $6BSV$ the cross-entropy logits and $4BSV$ the extra allocation at the
start of backward.
"""
RIGHT = r"""\section*{Composed}
With $N$ and $E$ replaced by their own formulas (\texttt{--form composed --env align}), the
total overflows the column by 144\,pt on one line; broken at its terms, it fits:
"""
RIGHT_AFTER = r"""The widths are estimated without \TeX{}, so the breaks are conservative; the test suite
compiles every library formula this way and fails on any overfull box.
"""


def latex(*args: str) -> str:
    """What ``symbolic latex ARGS`` prints (run as a child process, as a user would)."""
    result = subprocess.run([sys.executable, "-m", "symbolic", "latex", *args], capture_output=True,
                            text=True, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"symbolic latex {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def document() -> str:
    """The two-column article: the preamble ``--document`` writes, the equations and the text around them."""
    width = "\\columnwidth"
    whole = latex("llm.peak", "--width", width, "--env", "multline", "--document")
    head, _, rest = whole.partition("\\begin{document}")
    left = rest.rpartition("\\end{document}")[0].strip()
    right = latex("llm.peak", "--form", "composed", "--width", width, "--env", "align", "--label", "eq:composed")
    body = "\n".join([r"\pagestyle{empty}", LEFT, left, LEFT_AFTER, r"\newpage", RIGHT, right, RIGHT_AFTER])
    return f"{head}\\begin{{document}}\n{body}\n\\end{{document}}\n"


def render(tex: str, work: Path, output: Path) -> None:
    """Compile ``tex`` in ``work`` and write the cropped first page to ``output``."""
    from PIL import Image, ImageOps

    for tool in ("pdflatex", "pdftoppm"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: texlive-latex-base, poppler-utils)")
    (work / "excerpt.tex").write_text(tex, encoding="utf-8")
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "excerpt.tex"], cwd=work,
                            capture_output=True, timeout=300, check=False)
    log = (work / "excerpt.log").read_text(encoding="utf-8", errors="replace")
    if result.returncode != 0:
        raise SystemExit("pdflatex failed:\n" + log[-2000:])
    overfull = [float(m.group(1)) for m in OVERFULL.finditer(log)]
    if overfull:
        raise SystemExit(f"overfull boxes (pt too wide): {overfull}")
    subprocess.run(["pdftoppm", "-png", "-r", str(RESOLUTION), "-f", "1", "-l", "1", "-singlefile",
                    "excerpt.pdf", "page"], cwd=work, check=True, timeout=120)
    page = Image.open(work / "page.png").convert("L")
    box = ImageOps.invert(page).getbbox()
    if box is None:
        raise SystemExit("the rendered page is empty")
    pad = RESOLUTION // 6
    left, top, right, bottom = box
    crop = page.crop((max(left - pad, 0), max(top - pad, 0), min(right + pad, page.width), min(bottom + pad, page.height)))
    output.parent.mkdir(parents=True, exist_ok=True)
    crop.save(output, optimize=True)


def main(argv: list[str] | None = None) -> int:
    """Build the picture (by default docs/latex-two-column.png)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="where to write the PNG (default %(default)s)")
    parser.add_argument("--keep", type=Path, help="keep the .tex, .log and .pdf in this folder")
    args = parser.parse_args(argv)
    tex = document()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        render(tex, args.keep, args.output)
    else:
        with tempfile.TemporaryDirectory() as work:
            render(tex, Path(work), args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
