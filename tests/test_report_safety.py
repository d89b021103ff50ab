"""Rendering safety and atomic output: escaping, the URL fetcher's allow-list, templates, writes."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from symbolic.core import atomic as write
from symbolic.report import Outputs, build, render, spec
from symbolic.report.texescape import TexCode, escape

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = r"<script>alert(1)</script> {{ 7*7 }} \input{/etc/passwd} $&#^_%~ \VAR{meta} end"


def toml_string(text: str) -> str:
    """A TOML basic string holding ``text`` exactly."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def hostile_spec(tmp_path: Path) -> Path:
    notes = HOSTILE + "\n\nsecond paragraph {% raw %} \\end{document}"
    text = "\n".join([
        f"title = {toml_string(HOSTILE)}",
        f"author = {toml_string('<b>Mallory</b> ' + chr(92) + 'write18{rm}')}",
        'model = "article-a"',
        f"notes = {toml_string(notes)}",
        f"gpus = [{{ name = {toml_string('<img src=x onerror=alert(1)> & $x$')}, memory = \"4GiB\" }}]",
    ]) + "\n"
    path = tmp_path / "hostile.toml"
    path.write_text(text, encoding="utf-8")
    loaded = spec.load(path)
    assert loaded.title == HOSTILE and loaded.notes == notes
    return path


# --- LaTeX escaping -------------------------------------------------------------------------------
def test_tex_escape_specials_backslash_first():
    assert escape(r"\input{x}") == r"\textbackslash{}input\{x\}"
    assert escape("$&#^_%~") == r"\$\&\#\textasciicircum{}\_\%\textasciitilde{}"
    assert escape("a<b>|c") == r"a\textless{}b\textgreater{}\textbar{}c"
    assert escape("5 × 2 ≈ 10, ∂M/∂x") == r"5 \texttimes{} 2 $\approx$ 10, $\partial$M/$\partial$x"
    assert escape("naïve Ł ħ \x07 \u200b") == "naïve Ł [U+0127]  "
    already = TexCode(r"\frac{1}{2}")
    assert escape(already) is already


def test_tex_escape_leaves_no_active_character():
    out = escape(HOSTILE)
    for sequence in (r"\textbackslash{}", r"\textasciitilde{}", r"\textasciicircum{}", r"\textless{}",
                     r"\textgreater{}", r"\{", r"\}", r"\$", r"\&", r"\#", r"\%", r"\_"):
        out = out.replace(sequence, "")
    assert not set(out) & set("\\{}$&#^_%~<>")


# --- HTML and LaTeX rendering of hostile text --------------------------------------------------------
@pytest.fixture(scope="module")
def hostile_outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    path = hostile_spec(tmp)
    build(path, Outputs(html=tmp / "r.html", tex=tmp / "r.tex"))
    return (tmp / "r.html").read_text(encoding="utf-8"), (tmp / "r.tex").read_text(encoding="utf-8"), tmp


def test_html_escapes_user_text(hostile_outputs):
    html, _, _ = hostile_outputs
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>Mallory" not in html and "&lt;b&gt;Mallory" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt; &amp; $x$" in html
    assert "{{ 7*7 }}" in html and ">49<" not in html  # printed, never evaluated


def test_latex_escapes_user_text(hostile_outputs):
    _, tex, _ = hostile_outputs
    # long words get break points (texescape.breakable) between escaped characters; read without them
    body = tex.split(r"\begin{document}", 1)[1].replace(r"\allowbreak{}", "")
    assert r"\input{/etc/passwd}" not in tex and r"\write18" not in tex
    assert r"\textbackslash{}input\{/etc/passwd\}" in body
    assert r"\$\&\#\textasciicircum{}\_\%\textasciitilde{}" in body
    assert r"\textbackslash{}end\{document\}" in body
    assert body.count(r"\end{document}") == 1


@pytest.mark.slow
def test_hostile_latex_compiles(hostile_outputs, tmp_path):
    if not shutil_which("pdflatex"):
        pytest.skip("pdflatex is not installed (scripts/system-deps.sh installs texlive-latex-base)")
    _, tex, _ = hostile_outputs
    (tmp_path / "r.tex").write_text(tex, encoding="utf-8")
    result = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "r.tex"],
                            cwd=tmp_path, capture_output=True, encoding="utf-8", errors="replace", timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    text = subprocess.run(["pdftotext", "-layout", "r.pdf", "-"], cwd=tmp_path, capture_output=True,
                          text=True).stdout if shutil_which("pdftotext") else ""
    if text:
        assert "alert(1)" in text and "passwd" in text


def shutil_which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


# --- templates --------------------------------------------------------------------------------------
def test_user_templates_only_from_a_named_folder(tmp_path):
    (tmp_path / "report.html.j2").write_text("<p>{{ meta.title }} {{ summary.total }}</p>{{ css }}")
    (tmp_path / "report.css").write_text("p { color: red }")
    out = tmp_path / "out.html"
    build(ROOT / "reports" / "article-a-mlp.toml", Outputs(html=out), templates=tmp_path)
    assert out.read_text() == "<p>Article A&#39;s four-layer network: training memory 520.32 MiB</p>p { color: red }"
    with pytest.raises(render.TemplateError, match="templates folder not found"):
        render.html_environment(tmp_path / "missing")


def test_strict_undefined_and_sandbox(tmp_path):
    (tmp_path / "report.html.j2").write_text("{{ no_such_value }}")
    with pytest.raises(render.TemplateError, match="no_such_value"):
        render.render_html({"meta": {}}, tmp_path)
    (tmp_path / "report.html.j2").write_text("{{ meta.__class__.__mro__ }}")
    with pytest.raises(render.TemplateError):
        render.render_html({"meta": {}}, tmp_path)


def test_tex_environment_escapes_every_value():
    env = render.tex_environment()
    out = env.from_string(r"\VAR{a} \VAR{b} \VAR{c|tex}").render(a="50 %", b=TexCode(r"\frac{1}{2}"), c="#1")
    assert out == r"50 \% \frac{1}{2} \#1"


# --- the URL fetcher ---------------------------------------------------------------------------------
def test_url_fetcher_allow_list():
    fetcher = render.url_fetcher()
    fetch = fetcher.fetch if hasattr(fetcher, "fetch") else fetcher
    for url in ("file:///etc/passwd", "http://example.com/x.png", "https://127.0.0.1/a.css", "ftp://x/y",
                render.TEMPLATES.as_uri() + "/../../../../etc/passwd", "file://otherhost/etc/passwd",
                (render.TEMPLATES / "missing.css").as_uri()):
        with pytest.raises(render.FetchRefused):
            fetch(url)
    response = fetch("data:text/plain;base64,aGk=")
    assert response.read() == b"hi"
    css = fetch((render.TEMPLATES / "report.css").as_uri())
    assert b"@page" in css.read()


def test_pdf_does_not_fetch_outside_the_allow_list(tmp_path):
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"not an image")
    html = (f'<html><body><p>x</p><img src="{secret.as_uri()}"><img src="http://127.0.0.1:9/a.png">'
            f'<link rel="stylesheet" href="file:///etc/passwd"></body></html>')
    calls = []
    real = render.allowed_path

    def spy(url):
        calls.append(url)
        return real(url)

    render.allowed_path = spy
    try:
        with pytest.raises(render.PdfError, match="refused to fetch"):  # a refused fetch fails the PDF (issue 25)
            render.html_to_pdf(html)
    finally:
        render.allowed_path = real
    assert any(secret.name in u for u in calls) and any("passwd" in u for u in calls)


# --- atomic writes ---------------------------------------------------------------------------------
def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "report.pdf"
    target.write_bytes(b"old report")
    with pytest.raises(RuntimeError):
        with write.atomic_open(target) as handle:
            handle.write(b"half of a new rep")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.pdf"]
    with pytest.raises(KeyboardInterrupt):
        with write.atomic_open(tmp_path / "new.pdf") as handle:
            handle.write(b"partial")
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.pdf"]
    write.write_bytes(target, b"new report")
    assert target.read_bytes() == b"new report" and oct(target.stat().st_mode & 0o777) != "0o600"


def test_killed_writer_leaves_no_partial_report(tmp_path):
    target = tmp_path / "report.pdf"
    code = textwrap.dedent(f"""
        import os, signal
        from symbolic.core import atomic as write
        with write.atomic_open({str(target)!r}) as handle:
            handle.write(b"%PDF-1.7 half")
            handle.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert result.returncode == -signal.SIGKILL
    assert not target.exists()
    assert all(p.name.startswith(".report.pdf.") for p in tmp_path.iterdir())


def test_failed_render_writes_nothing(tmp_path, monkeypatch):
    out = tmp_path / "r.pdf"

    def boom(html, warn=None):
        raise OSError("disk full while laying out")

    monkeypatch.setattr(render, "html_to_pdf", boom)
    with pytest.raises(OSError):
        build(ROOT / "reports" / "article-a-mlp.toml", Outputs(pdf=out))
    assert list(tmp_path.iterdir()) == []


def test_missing_output_folder_is_one_line_error(tmp_path):
    from symbolic.cli import main

    code = main(["report", str(ROOT / "reports" / "article-a-mlp.toml"), "-q", "--tex",
                 str(tmp_path / "no" / "r.tex")])
    assert code == 2


def test_imports_stay_light():
    code = ("import sys, symbolic, symbolic.report, symbolic.cli; symbolic.cli.build_parser(); "
            "print(sorted(m for m in ('weasyprint', 'ziamath', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]", out.stderr
