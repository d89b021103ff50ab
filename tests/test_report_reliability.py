"""Reliability of report builds (issue 25): signals during WeasyPrint, images that fail to render,
WeasyPrint's log lines, user templates that would exhaust memory, and output names.

WeasyPrint 70 catches ``BaseException`` around an SVG image's drawing (``weasyprint.images``,
``SVGImage.draw``) and only logs it, so the tests make that drawing fail on purpose: a monkeypatched
``weasyprint.svg.SVG.draw`` raising, or a real signal sent while it runs. The CLI tests use a small
``--templates`` page with one chart, so that WeasyPrint's part takes a fraction of a second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import run

from symbolic.core.errors import Terminated
from symbolic.report import render

ROOT = Path(__file__).resolve().parent.parent
MLP_SPEC = ROOT / "reports" / "article-a-mlp.toml"  # the smallest example report
OLD = b"%PDF-1.7 the previous report\n"
ONE_CHART = '<html><body><p>{{ meta.title }}</p><img src="{{ breakdown.chart.src }}"></body></html>\n'
FAST = 60  # seconds for a child process that builds the small report


@pytest.fixture
def one_chart(tmp_path: Path) -> Path:
    """A templates folder whose page is the title and the breakdown chart (an SVG image)."""
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "report.html.j2").write_text(ONE_CHART, encoding="utf-8")
    return folder


@pytest.fixture
def old_pdf(tmp_path: Path) -> Path:
    """An existing report that a failed build must leave as it is."""
    path = tmp_path / "out" / "report.pdf"
    path.parent.mkdir()
    path.write_bytes(OLD)
    return path


def _svg_draw_raising(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> list[int]:
    """Make the next drawing of an SVG image raise ``error`` once; the list counts the drawings."""
    import weasyprint.svg as wsvg

    real = wsvg.SVG.draw
    calls: list[int] = []

    def draw(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(self, *args, **kwargs)

    monkeypatch.setattr(wsvg.SVG, "draw", draw)
    return calls


def _build(capsys, templates: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    return run(capsys, "report", str(MLP_SPEC), "-q", "--templates", str(templates), "-o", str(out), *extra)


def _only(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# --- 1: a signal or a failed image never leaves a PDF ------------------------------------------------------
def test_interrupt_swallowed_by_weasyprint_exits_130_and_keeps_the_old_pdf(capsys, monkeypatch, one_chart, old_pdf):
    calls = _svg_draw_raising(monkeypatch, KeyboardInterrupt())
    code, out, err = _build(capsys, one_chart, old_pdf)
    assert calls, "the chart was never drawn: the test proves nothing"
    assert code == 130 and err == "symbolic: interrupted\n" and out == "", (code, out, err)
    assert old_pdf.read_bytes() == OLD and _only(old_pdf.parent) == ["report.pdf"]


def test_sigterm_swallowed_by_weasyprint_exits_143_and_keeps_the_old_pdf(capsys, monkeypatch, one_chart, old_pdf):
    _svg_draw_raising(monkeypatch, Terminated(signal.SIGTERM))
    code, out, err = _build(capsys, one_chart, old_pdf)
    assert code == 128 + signal.SIGTERM and err == "symbolic: terminated by SIGTERM\n" and out == "", (code, err)
    assert old_pdf.read_bytes() == OLD and _only(old_pdf.parent) == ["report.pdf"]


def test_an_image_that_fails_to_render_is_an_error_and_writes_nothing(capsys, monkeypatch, one_chart, tmp_path):
    _svg_draw_raising(monkeypatch, ValueError("a chart WeasyPrint cannot draw"))
    out = tmp_path / "new.pdf"
    code, stdout, err = _build(capsys, one_chart, out)
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert err.startswith("symbolic: error:") and "SVG image" in err and "a chart WeasyPrint cannot draw" in err, err
    assert not out.exists() and _only(tmp_path) == ["templates"]


def test_an_image_that_fails_to_render_keeps_the_old_pdf(capsys, monkeypatch, one_chart, old_pdf):
    _svg_draw_raising(monkeypatch, ValueError("broken"))
    code, _, _ = _build(capsys, one_chart, old_pdf)
    assert code == 2 and old_pdf.read_bytes() == OLD and _only(old_pdf.parent) == ["report.pdf"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_whose_exception_weasyprint_swallows_without_a_trace_is_raised_afterwards(signum):
    """The guard notes the signal itself: a handler that swallows the exception and logs nothing is not enough."""
    from symbolic.cli import _signals

    swallowed = []

    def quiet_catch_all() -> None:
        try:
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler raises here, at once
        except BaseException as err:  # what WeasyPrint does around an SVG image or a colour profile
            swallowed.append(err)

    expected = KeyboardInterrupt if signum == signal.SIGINT else Terminated
    with _signals(), pytest.raises(expected):
        render.guarded_weasyprint(quiet_catch_all)
    assert len(swallowed) == 1 and isinstance(swallowed[0], expected)


def test_refused_fetches_fail_the_pdf(tmp_path):
    """A user's template that points an image outside the report's assets gets an error, not a PDF without it."""
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not an image")
    with pytest.raises(render.PdfError, match="refused to fetch"):
        render.html_to_pdf(f'<html><body><p>x</p><img src="{secret.as_uri()}"></body></html>')


CHILD = textwrap.dedent("""
    import sys, time
    import weasyprint.svg as wsvg

    real = wsvg.SVG.draw

    def slow_draw(self, *args, **kwargs):  # the first SVG image: say so, then wait for the signal
        if not getattr(wsvg, "_waited", False):
            wsvg._waited = True
            print("drawing", file=sys.stderr, flush=True)
            time.sleep(30)
        return real(self, *args, **kwargs)

    wsvg.SVG.draw = slow_draw
    sys.argv = ["symbolic", *sys.argv[1:]]
    from symbolic.cli import run
    run()
    """)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_real_signal_while_weasyprint_draws_an_image(tmp_path, one_chart, old_pdf, signum):
    """A child process gets the signal while WeasyPrint draws the chart (it waits there until the signal comes)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, "report", str(MLP_SPEC), "-q", "--templates", str(one_chart),
                             "-o", str(old_pdf)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line = proc.stderr.readline()  # blocks until the child is inside the drawing
        assert line == "drawing\n", line + proc.stderr.read()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=FAST)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum and out == "" and "Traceback" not in err, (proc.returncode, err)
    assert old_pdf.read_bytes() == OLD and _only(old_pdf.parent) == ["report.pdf"]


# --- 3: WeasyPrint's log lines ------------------------------------------------------------------------------
WARNED = '<html><body><p style="colr: red">{{ meta.title }}</p></body></html>\n'  # an unknown CSS property


def test_weasyprint_warnings_are_silent_under_quiet(tmp_path):
    """In a process of its own: there a library's ``logging.debug`` call has given the root logger a stderr handler."""
    (tmp_path / "report.html.j2").write_text(WARNED, encoding="utf-8")
    out = tmp_path / "r.pdf"
    proc = subprocess.run([sys.executable, "-m", "symbolic", "report", str(MLP_SPEC), "-q", "--templates", str(tmp_path),
                           "-o", str(out)], capture_output=True, text=True, timeout=FAST, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and proc.stdout == f"{out}\n" and proc.stderr == "", proc.stderr
    assert out.read_bytes().startswith(b"%PDF")


def test_weasyprint_warnings_are_progress_lines_without_quiet(capsys, tmp_path):
    (tmp_path / "report.html.j2").write_text(WARNED, encoding="utf-8")
    code, _, err = run(capsys, "report", str(MLP_SPEC), "--templates", str(tmp_path), "-o", str(tmp_path / "r.pdf"))
    warned = [line for line in err.splitlines() if "colr" in line]
    assert code == 0 and len(warned) == 1, err
    assert warned[0].startswith("symbolic report: [") and "] WeasyPrint: Ignored `colr: red`" in warned[0], err
    assert all(line.startswith("symbolic report: ") for line in err.splitlines()), err


# --- 2: user templates are bounded --------------------------------------------------------------------------
HOSTILE = [  # (template, what the one-line error says)
    ("{{ range(10**9)|list }}", "range() of more than"),
    ("{{ '%0999999999d'|format(1) }}", "format would make more than"),
    ("{{ '%0999999999d' % 1 }}", "format would make more than"),
    ("{{ '%0*d' % (10**9, 1) }}", "format would make more than"),
    ("{{ '{:>999999999}'.format(1) }}", "format would make more than"),
    ("{{ 'a' * 10**12 }}", "repetition would make more than"),
    ("{{ [0] * 10**10 }}", "repetition would make more than"),
    ("{{ 'x'.center(10**9) }}", "str.center of width"),
    ("{{ 'x'|center(10**9) }}", "|center of width"),
    ("{{ 'x'|indent(10**9, true) }}", "|indent would make more than"),
    ("{{ 'x'.zfill(10**9) }}", "str.zfill of width"),
    ("{{ 'a'|replace('', 'b' * 60000000) }}", "replace would make more than"),
    ("{{ 7 ** 1000000 }}", "bits"),
    ("{{ lipsum(10**6) }}", "lipsum of"),
    ("{{ [1]|batch(10**9, 'x')|list }}", "|batch would make more than"),
    ("{{ ('a' * 60000000)|list|length }}", "|list of a string"),
    ("{% set a = ['x' * 60000000] * 100000 %}{{ a|join }}", "would make more than"),
    ("{% set a = ['x' * 60000000] * 100000 %}{{ a }}", "printed value would make more than"),
    ("{% set a = 'x' * 60000000 %}{% set b = a ~ a %}{{ b|length }}", "concatenation would make more than"),
    ("{% macro f(s, n) %}{{ f(s ~ s, n - 1) if n else s|length }}{% endmacro %}{{ f('ab', 40) }}", "concatenation"),
    ("{% macro m() %}{% for i in range(1000) %}{{ 'a' * 30000000 }}{% endfor %}{% endmacro %}{{ m() }}",
     "rendered text passes"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loop iterations"),
    ("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", "RecursionError"),
]


@pytest.mark.parametrize("source, message", HOSTILE)
def test_a_template_cannot_exhaust_memory_or_time(tmp_path, source, message):
    (tmp_path / "report.html.j2").write_text(source, encoding="utf-8")
    start = time.monotonic()
    with pytest.raises(render.TemplateError, match="template report.html.j2: ") as caught:
        render.render_html({"meta": {}}, tmp_path)
    assert message in str(caught.value) and "\n" not in str(caught.value), caught.value
    assert time.monotonic() - start < 10


def test_the_text_cap_stops_the_stream_as_it_passes(tmp_path, monkeypatch):
    """The document is counted as it is generated: rendering stops at the cap, not after building everything."""
    from symbolic.report import sandbox

    monkeypatch.setattr(sandbox, "MAX_TEXT", 10_000)
    (tmp_path / "report.html.j2").write_text("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", "utf-8")
    env = render.html_environment(tmp_path)
    with pytest.raises(render.TemplateError, match="rendered text passes"):
        render._render(env, "report.html.j2", {}, user=True)
    assert env.budget.steps <= 10_000 // 100 + 1 and env.budget.text <= 10_000 + 100  # a hundred of 100,000 loops


FEATURES = ("{{ 2 + 3 }} {{ '%5.2f'|format(3.14159) }} {{ '%(n)d' % {'n': 7} }} {{ '{:,}'.format(123456789) }} "
            "{% for x in [1, 2, 3] if x > 1 %}{{ loop.index }}{{ loop.last }}{{ loop.length }}{% else %}none{% endfor %} "
            "{{ [1, 2] * 3 }} {{ 'ab' ~ 'cd' }} {{ [3, 1, 2]|sort|join(',') }} {{ 'x'|center(7) }}|{{ 'a b'|replace(' ', '-') }} "
            "{% set ns = namespace(a=1) %}{% for i in range(3) %}{% set ns.a = ns.a * 2 %}{% endfor %}{{ ns.a }} "
            "{% for a in [[1, 2], [3]] recursive %}{{ a }}{% endfor %} {{ '<b>' }} {% filter upper %}x{% endfilter %} "
            "{% macro m(x) %}[{{ x }}]{% endmacro %}{{ m('y') }} {{ [1, 2, 3]|sum }} {{ 2 ** 10 }} {{ 'ab' * 2 }} "
            "{{ {'k': [1, (2, 3)]} }} {{ 'a\\tb'.expandtabs(4) }} {{ '-'.join(['a', 'b']) }} {{ 'x'.ljust(3) }}|")


def test_ordinary_templates_render_as_in_jinja2s_own_sandbox():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    plain = ImmutableSandboxedEnvironment(autoescape=True, undefined=jinja2.StrictUndefined)
    assert render.html_environment().from_string(FEATURES).render() == plain.from_string(FEATURES).render()


@pytest.mark.parametrize("source", ["{{ range(10**9)|list }}", "{{ 'a' * 10**12 }}"])
def test_template_errors_exit_2_on_one_line(capsys, tmp_path, source):
    (tmp_path / "report.html.j2").write_text(source, encoding="utf-8")
    code, out, err = run(capsys, "report", str(MLP_SPEC), "-q", "--templates", str(tmp_path), "--html",
                         str(tmp_path / "r.html"))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("symbolic: error: template "), err
    assert not (tmp_path / "r.html").exists()


# --- 4: an output's name says its format ----------------------------------------------------------------------
@pytest.mark.parametrize("flag, name, kind", [
    ("-o", "x.docx", "PDF"), ("--pdf", "report.html", "PDF"), ("--output", "x.tex", "PDF"),
    ("--html", "x.pdf", "HTML"), ("--html", "page.txt", "HTML"), ("--tex", "x.pdf", "LaTeX"), ("--tex", "doc.latex", "LaTeX"),
])
def test_an_output_with_another_formats_extension_is_refused_before_any_work(capsys, monkeypatch, tmp_path, flag, name,
                                                                            kind):
    from symbolic.report import adapter

    monkeypatch.setattr(adapter, "scenario_for", lambda *a, **k: pytest.fail("worked before refusing the name"))
    code, out, err = run(capsys, "report", str(MLP_SPEC), "-q", flag, str(tmp_path / name))
    assert code == 2 and out == "" and err.count("\n") == 1 and kind in err and name in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag, name", [("-o", "r.PDF"), ("--html", "r.htm"), ("--html", "r.HTML"), ("--tex", "r.tex"),
                                        ("--tex", "r")])
def test_the_formats_own_extension_in_any_case_or_none_is_written(capsys, tmp_path, flag, name):
    code, out, err = run(capsys, "report", str(MLP_SPEC), "-q", flag, str(tmp_path / name))
    assert code == 0 and out == f"{tmp_path / name}\n" and (tmp_path / name).stat().st_size > 0, err


def test_a_device_without_an_extension_still_takes_a_pdf(capsys):
    code, out, err = run(capsys, "report", str(MLP_SPEC), "-q", "-o", os.devnull)
    assert code == 0 and out == f"{os.devnull}\n", err
