"""Templates to HTML, LaTeX and PDF.

Two jinja2 environments, both sandboxed and with ``StrictUndefined``:

- HTML: autoescape on; only SVG the project generated reaches the page as ``Markup``.
- LaTeX: delimiters that do not clash with TeX (``\\VAR{...}``, ``\\BLOCK{...}``, ``\\#{...}``),
  no HTML autoescape, and every printed value escaped for TeX unless it is ``TexCode``
  (formulas from the project's printer); ``|tex`` does the same explicitly.

Templates come from the package's ``templates`` folder, or first from a folder the user names
explicitly (``--templates DIR``). WeasyPrint gets a URL fetcher that allows only ``data:`` URIs
and files inside the package's templates folder, and fixed metadata, so the same input gives
a byte-identical PDF.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import mimetypes
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import jinja2
from markupsafe import Markup

from ..core import collector
from ..core.collector import frozen_heap
from ..core.errors import Terminated, UserError, shorten
from .sandbox import BoundedSandbox, TemplateLimit
from .texescape import TexCode, escape

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
HTML_TEMPLATE = "report.html.j2"
TEX_TEMPLATE = "report.tex.j2"
CSS_FILE = "report.css"


class TemplateError(UserError):
    """A missing or broken template, as one line."""


class FetchRefused(UserError):
    """A URL outside the allow-list (data: URIs and the package's own templates folder)."""


class PdfError(UserError):
    """WeasyPrint could not draw part of the report (an image, a stylesheet): no PDF is written."""


MAX_TEMPLATE = 1 << 20  # bytes of one user template or stylesheet


class UserFolderLoader(jinja2.BaseLoader):
    """Templates from a folder the user named, read like every user file: regular files only, size-capped.

    A FIFO or device named ``report.html.j2`` is refused instead of blocking or filling memory; a
    missing file falls through to the built-in template (``TemplateNotFound``).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Any]:
        """The template's text, its path and an up-to-date check (jinja2's loader protocol)."""
        from jinja2.loaders import split_template_path

        from ..core.userfiles import read_user_file

        path = self.folder.joinpath(*split_template_path(template))
        if not path.exists():
            raise jinja2.TemplateNotFound(template)
        raw = read_user_file(path, limit=MAX_TEMPLATE, what="a template", error=TemplateError)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise TemplateError(f"{path}: not UTF-8 text") from None
        mtime = path.stat().st_mtime
        return text, str(path), lambda: path.exists() and path.stat().st_mtime == mtime


def _loader(user_dir: Path | None) -> jinja2.BaseLoader:
    package = jinja2.FileSystemLoader(str(TEMPLATES))
    if user_dir is None:
        return package
    folder = Path(user_dir)
    if not folder.is_dir():
        raise TemplateError(f"templates folder not found: {folder}")
    return jinja2.ChoiceLoader([UserFolderLoader(folder), package])


def html_environment(user_dir: Path | None = None) -> BoundedSandbox:
    """The HTML environment: autoescape on, StrictUndefined, sandboxed and bounded (see ``sandbox``)."""
    return BoundedSandbox(loader=_loader(user_dir), autoescape=True, undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def _tex_finalize(value: Any) -> str:
    return escape(value)


def tex_environment(user_dir: Path | None = None) -> BoundedSandbox:
    """The LaTeX environment: \\VAR{}/\\BLOCK{} delimiters, TeX escaping of every non-TexCode value."""
    env = BoundedSandbox(
        loader=_loader(user_dir), autoescape=False, undefined=jinja2.StrictUndefined,
        block_start_string=r"\BLOCK{", block_end_string="}",
        variable_start_string=r"\VAR{", variable_end_string="}",
        comment_start_string=r"\#{", comment_end_string="}",
        line_statement_prefix=None, line_comment_prefix="%#",
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, finalize=_tex_finalize,
    )
    env.filters["tex"] = env.bounded_filter("tex", escape)
    return env


def _render(env: BoundedSandbox, name: str, context: dict[str, Any], user: bool = False) -> str:
    """``name`` rendered as a stream, its text counted as it grows (``sandbox.MAX_TEXT``); one-line errors.

    With ``user`` (a ``--templates`` folder), anything the template raises is the user's error.
    """
    env.budget = type(env.budget)()
    try:
        parts = []
        for part in env.get_template(name).generate(**context):
            env.budget.spend_text(len(part))
            parts.append(part)
        return "".join(parts)
    except jinja2.TemplateNotFound as err:
        raise TemplateError(f"template not found: {err.name}") from None
    except jinja2.UndefinedError as err:
        raise TemplateError(f"template {name}: {err.message}") from None
    except jinja2.TemplateSyntaxError as err:
        raise TemplateError(f"template {err.filename or name}:{err.lineno}: {err.message}") from None
    except jinja2.exceptions.SecurityError as err:
        raise TemplateError(f"template {name}: refused by the sandbox: {err}") from None
    except TemplateLimit as err:
        raise TemplateError(f"template {name}: {err}") from None
    except Exception as err:  # MemoryError, RecursionError, a TypeError...: the user's template, or a bug of ours
        if not (user or isinstance(err, jinja2.TemplateError)):
            raise
        raise TemplateError(f"template {name}: {type(err).__name__}: {shorten(err, 200)}") from None


def render_html(context: dict[str, Any], user_dir: Path | None = None) -> str:
    """The report as one self-contained HTML page (CSS inlined, SVG inline or as data: URIs)."""
    env = html_environment(user_dir)
    try:
        css, _, _ = env.loader.get_source(env, CSS_FILE)  # type: ignore[union-attr]
    except jinja2.TemplateNotFound:
        raise TemplateError(f"template not found: {CSS_FILE}") from None
    return _render(env, HTML_TEMPLATE, {**context, "css": Markup(css.replace("</", "<\\/"))}, user_dir is not None)


def render_tex(context: dict[str, Any], user_dir: Path | None = None) -> str:
    """The report as a standalone LaTeX document (pdflatex, amsmath, booktabs, longtable)."""
    return _render(tex_environment(user_dir), TEX_TEMPLATE, context, user_dir is not None)


# --- PDF -----------------------------------------------------------------------------------------
def allowed_path(url: str) -> Path:
    """The file a ``file:`` URL names, if it lies inside the templates folder; else FetchRefused."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "file" or parts.netloc not in ("", "localhost"):
        raise FetchRefused(f"refused to fetch {url[:200]!r}: only data: URIs and the report's own assets")
    path = Path(unquote(parts.path)).resolve()
    root = TEMPLATES.resolve()
    if root not in path.parents or not path.is_file():
        raise FetchRefused(f"refused to fetch {url[:200]!r}: outside the report's assets folder")
    return path


def url_fetcher() -> Any:
    """A WeasyPrint URL fetcher that allows only data: URIs and files in the templates folder."""
    import weasyprint.urls as urls

    if hasattr(urls, "URLFetcher"):  # WeasyPrint 68 and later: a class with a fetch method

        class SafeFetcher(urls.URLFetcher):  # type: ignore[misc, name-defined]
            def fetch(self, url: str, headers: Any = None) -> Any:
                if url[:5].lower() == "data:":
                    return super().fetch(url, headers)
                path = allowed_path(url)
                kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                return urls.URLFetcherResponse(url, path.read_bytes(), {"Content-Type": kind})

        return SafeFetcher(allowed_protocols=("data", "file"))

    def fetch(url: str) -> dict[str, Any]:  # older WeasyPrint: a function returning a dict
        if url[:5].lower() == "data:":
            return urls.default_url_fetcher(url)  # type: ignore[attr-defined]
        path = allowed_path(url)
        return {"string": path.read_bytes(), "mime_type": mimetypes.guess_type(path.name)[0], "redirected_url": url}

    return fetch


def require_pdf_renderer() -> None:
    """Import WeasyPrint now (ImportError if it is missing), so that a PDF build fails before its work."""
    import weasyprint  # noqa: F401


def html_to_pdf(html: str, warn: Callable[[str], None] | None = None) -> bytes:
    """PDF bytes from the report's HTML; no dates in the metadata, a content-derived identifier.

    WeasyPrint's warnings go to ``warn`` (one line each), its errors fail the build, and a signal
    it swallowed is raised again (see ``guarded_weasyprint``).
    """
    import weasyprint

    from . import pdfpaths

    identifier = hashlib.sha256(html.encode("utf-8")).hexdigest()[:32].encode("ascii")

    def write() -> bytes:
        document = weasyprint.HTML(string=html, base_url=TEMPLATES.as_uri() + "/", url_fetcher=url_fetcher())
        return document.write_pdf(pdf_identifier=identifier)

    # the same bytes, each glyph outline parsed once (see pdfpaths); fontTools' notices silenced; both
    # for this build only
    fonttools = logging.getLogger("fontTools")
    level = fonttools.level
    fonttools.setLevel(logging.ERROR)
    try:
        with pdfpaths.installed(), collector.when_opted_in(frozen_heap):
            return guarded_weasyprint(write, warn)
    finally:
        fonttools.setLevel(level)


# --- WeasyPrint's swallowed signals and logged failures -------------------------------------------------
# WeasyPrint 70 catches BaseException around an SVG image's drawing (and a colour profile's loading) and
# only logs it: a Ctrl-C or SIGTERM landing there would give exit 0 and a PDF without that picture.
PDF_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
WEASYPRINT_LOGGER = "weasyprint"
_DATA_URI = re.compile(r"data:[^\s'\"]{40,}")
T = TypeVar("T")


class _Records(logging.Handler):
    """Every record WeasyPrint logs during one call (debug ones too: they carry the exceptions it caught)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def guarded_weasyprint(work: Callable[[], T], warn: Callable[[str], None] | None = None) -> T:
    """``work()`` (a WeasyPrint call) with what WeasyPrint hides brought back.

    A signal that arrived during the call (SIGINT, SIGTERM, SIGHUP: noted by a wrapper of their
    handlers, main thread only) or a ``KeyboardInterrupt``/``Terminated`` found in a log record
    is raised again after the call; an ERROR record (an image that failed to render or load, a
    stylesheet refused) is a ``PdfError``; WARNING records go to ``warn``, one line each. WeasyPrint's
    records do not reach the root logger meanwhile, so nothing else prints them.
    """
    noted: list[int] = []
    records = _Records()
    with _noting_signals(noted), _captured(records):
        try:
            result = work()
        except BaseException as err:
            if noted and not isinstance(err, (KeyboardInterrupt, Terminated)):
                raise _signal_exception(noted[0]) from None
            raise
    _raise_swallowed(noted, records.records)
    for record in records.records:
        if record.levelno == logging.WARNING and warn is not None:
            warn(_one_line(record))
    return result


@contextlib.contextmanager
def _noting_signals(noted: list[int]) -> Iterator[None]:
    """Each callable handler of ``PDF_SIGNALS`` wrapped so that it appends its signal to ``noted`` first."""
    wrapped: dict[int, tuple[Any, Any]] = {}
    for name in PDF_SIGNALS:
        number = getattr(signal, name, None)
        previous = signal.getsignal(number) if number is not None else None
        if not callable(previous):  # SIG_DFL, SIG_IGN or not set from Python: left alone
            continue
        note = _noting(previous, noted)
        try:
            signal.signal(number, note)
        except ValueError:  # not the main thread: signals are left alone
            break
        wrapped[number] = (note, previous)
    try:
        yield
    finally:
        for number, (note, previous) in wrapped.items():
            if signal.getsignal(number) is note:  # a handler that replaced itself (SIG_IGN while cleaning up) stays
                signal.signal(number, previous)


def _noting(handler: Callable[[int, Any], Any], noted: list[int]) -> Callable[[int, Any], Any]:
    def note(signum: int, frame: Any) -> Any:
        noted.append(signum)
        return handler(signum, frame)

    return note


@contextlib.contextmanager
def _captured(records: _Records) -> Iterator[None]:
    """WeasyPrint's logger sends every record to ``records`` only, for the duration of the block."""
    logger = logging.getLogger(WEASYPRINT_LOGGER)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
        logger.propagate = propagate


def _signal_exception(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def _raise_swallowed(noted: list[int], records: list[logging.LogRecord]) -> None:
    """Raise what WeasyPrint caught and only logged: a signal first, then an exception, then an error."""
    if noted:
        raise _signal_exception(noted[0])
    caught = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1] is not None]
    for err in caught:
        if not isinstance(err, Exception):  # KeyboardInterrupt, Terminated, SystemExit
            raise err
    errors = [r for r in records if r.levelno >= logging.ERROR]
    if errors:
        message = _one_line(errors[0])
        if caught and str(caught[0]) not in message:  # 'Failed to render SVG image': say why
            message += f" ({type(caught[0]).__name__}: {shorten(caught[0], 200)})"
        raise PdfError(f"the PDF was not written: WeasyPrint: {message}")


def _one_line(record: logging.LogRecord) -> str:
    """A log record's message on one short line, long data: URIs cut."""
    text = _DATA_URI.sub(lambda m: f"{m.group()[:40]}… ({len(m.group()):,} characters)", record.getMessage())
    return shorten(" ".join(text.split()), 300)


__all__ = ["PdfError", "TexCode", "allowed_path", "frozen_heap", "guarded_weasyprint", "html_environment", "html_to_pdf",
           "render_html", "render_tex", "require_pdf_renderer", "tex_environment", "url_fetcher"]
