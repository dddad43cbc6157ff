"""Reader fidelity (issue #16): how much Markdown structure survives a round trip.

Every Markdown file of the corpora is rendered to HTML (markdown-it-py), to PDF
(that HTML printed by headless Chromium) and to DOCX (pandoc), into a temporary
folder; each rendering is read back with kb.readers, and its structure compared
with the original's: headings with their level, table rows with their header,
list items and code blocks (recall: the share of the original's found again).
Also times each reader (MB/s, and pages/s for PDF) on the same files, in the
same run, beside what a user would reach for instead (`PEERS`): the library the
reader is built on used directly for flat text (pypdfium2, lxml, zip + lxml),
LangChain's loaders (PyPDFLoader, BSHTMLLoader, Docx2txtLoader; skipped with a
note when langchain-community is not installed) and, for PDF, pdfplumber; with
the headings each one's text keeps (flat text keeps none). Each file is also
read in a forked child process, as the worker reads it (kb.limits): the
difference is that isolation's cost per file.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
import time
import unicodedata
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

from kb import limits, readers
from kb.parsing import MAX_NESTING

CORPORA_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpora"
FORMATS = ("html", "docx", "pdf")
KINDS = ("headings", "table_rows", "list_items", "code_blocks")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
# Ruled tables and shaded code, as documentation sites print them.
CSS = (
    "body{font-family:sans-serif;font-size:11pt;max-width:50em}"
    "table{border-collapse:collapse}td,th{border:1px solid #555;padding:3px 6px}"
    "pre{background:#f3f3f3;padding:6px}"
)
# --unruled: the same tables printed without borders, as many documents are
UNRULED_CSS = CSS.replace("border:1px solid #555;", "")
_FRONT_MATTER_RE = re.compile(r"\A---[ \t]*\n.*?\n(?:---|\.\.\.)[ \t]*\n", re.S)
_IMAGE_RE = re.compile(r"!\[([^\]]*)\]\([^)]*\)|!\[([^\]]*)\]\[[^\]]*\]")
_MARKUP_RE = re.compile(r"[*_`\\]")
_SPACE_RE = re.compile(r"\s+")


def _md() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING})
    return md.enable(["table", "strikethrough"])


@dataclass
class Structure:
    headings: Counter = field(default_factory=Counter)
    table_rows: Counter = field(default_factory=Counter)
    list_items: Counter = field(default_factory=Counter)
    code_blocks: Counter = field(default_factory=Counter)


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).replace("\u200b", "")
    return _SPACE_RE.sub(" ", _MARKUP_RE.sub("", text)).strip().lower()


def _code_norm(text: str) -> str:
    return _SPACE_RE.sub("", unicodedata.normalize("NFKC", text))


def structure(markdown: str) -> Structure:
    """The structures of a Markdown text that the fidelity figures count."""
    found = Structure()
    tokens = _md().parse(markdown)
    header: list[str] = []
    row: list[str] = []
    in_head = False
    item_depth: list[bool] = []  # per open list item: its first text taken
    for i, token in enumerate(tokens):
        kind = token.type
        if kind == "heading_open":
            found.headings[(int(token.tag[1]), _norm(_plain(tokens[i + 1])))] += 1
        elif kind == "thead_open":
            in_head, header = True, []
        elif kind == "thead_close":
            in_head = False
        elif kind == "tr_open":
            row = []
        elif kind in ("th_open", "td_open"):
            (header if in_head else row).append(_norm(_plain(tokens[i + 1])))
        elif kind == "tr_close" and not in_head:
            found.table_rows[(" | ".join(header), " | ".join(row))] += 1
        elif kind == "list_item_open":
            item_depth.append(False)
        elif kind == "list_item_close":
            item_depth.pop()
        elif kind == "inline" and item_depth and not item_depth[-1]:
            item_depth[-1] = True
            found.list_items[_norm(_plain(token))] += 1
        elif kind in ("fence", "code_block") and token.content.strip():
            found.code_blocks[_code_norm(token.content)] += 1
    return found


def _plain(token) -> str:
    if token.type != "inline" or not token.children:
        return token.content
    parts = []
    for child in token.children:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(child.content)
    return "".join(parts)


def recall(original: Structure, read: Structure) -> dict[str, tuple[int, int]]:
    """Per kind: (found again, in the original)."""
    out = {}
    for kind in KINDS:
        want: Counter = getattr(original, kind)
        got: Counter = getattr(read, kind)
        out[kind] = (sum((want & got).values()), sum(want.values()))
    return out


# --- rendering ------------------------------------------------------------------


def render_html(markdown: str, title: str, css: str = CSS) -> str:
    body = _md().render(_FRONT_MATTER_RE.sub("", markdown))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{css}</style></head><body><main>{body}</main></body></html>"
    )


def render_pdf(html_path: Path, pdf_path: Path) -> None:
    subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--print-to-pdf={pdf_path}", html_path.as_uri()],
        check=True,
        capture_output=True,
        timeout=120,
    )


# pandoc filter: raw HTML blocks read as HTML (its DOCX writer drops them)
RAW_HTML_FILTER = Path(__file__).with_name("raw_html.lua")


def render_docx(markdown: str, docx_path: Path) -> None:
    """pandoc's rendering; images become their alt text (pandoc would fetch them).
    Raw HTML blocks are converted as HTML (RAW_HTML_FILTER): pandoc's DOCX writer
    would drop them, and with them text the HTML and PDF renderings show."""
    markdown = _IMAGE_RE.sub(
        lambda m: m.group(1) or m.group(2) or "", _FRONT_MATTER_RE.sub("", markdown)
    )
    subprocess.run(
        ["pandoc", "-f", "gfm", "--lua-filter", str(RAW_HTML_FILTER)]
        + ["-o", str(docx_path)],
        input=markdown.encode("utf-8"),
        check=True,
        capture_output=True,
        timeout=120,
    )


# --- the run --------------------------------------------------------------------


@dataclass
class Report:
    # (format, corpus) -> kind -> (found, total)
    recall: dict[tuple[str, str], dict[str, list[int]]] = field(default_factory=dict)
    seconds: Counter = field(default_factory=Counter)  # reading time per format
    # the same reading in a forked child, as the worker runs it (kb.limits)
    child_seconds: Counter = field(default_factory=Counter)
    files: Counter = field(default_factory=Counter)  # files read per format
    size: Counter = field(default_factory=Counter)  # bytes read per format
    pages: int = 0
    plumber_seconds: float = 0.0
    # peer label -> seconds, and headings found again in its text (found, total)
    peer_seconds: Counter = field(default_factory=Counter)
    peer_headings: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # one long PDF (a whole corpus printed as one document): pages, seconds
    long_pdf: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def run(
    corpora_dir: Path = CORPORA_DIR,
    formats: tuple[str, ...] = FORMATS,
    progress: Callable[[str], None] = lambda line: None,
    css: str = CSS,
    timings: bool = True,
) -> Report:
    """Every corpus's renderings read back and their structure compared
    (`report.recall`, `pages`, `errors`); with `timings`, also the readers'
    speed beside their peers', in a forked child, and on one long PDF. Without
    them the reading and its figures are the same, only sooner."""
    missing = [
        tool
        for tool, fmt in ((CHROMIUM, "pdf"), ("pandoc", "docx"))
        if fmt in formats and not shutil.which(tool)
    ]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} not found")
    report = Report()
    if timings:
        report.notes = peer_notes()
    with tempfile.TemporaryDirectory(prefix="kb-formats-") as tmp:
        for corpus in sorted(p for p in corpora_dir.iterdir() if p.is_dir()):
            files = sorted(corpus.rglob("*.md"))
            if not files:
                continue
            progress(f"{corpus.name}: {len(files)} files")
            rendered = _render_all(files, corpus.name, Path(tmp), formats, css)
            for path, paths in zip(files, rendered, strict=True):
                _read_back(path, corpus.name, paths, formats, report, timings)
        if "pdf" in formats and timings:
            report.long_pdf = _long_pdf(corpora_dir, Path(tmp))
    return report


def _long_pdf(corpora_dir: Path, tmp: Path) -> dict[str, float]:
    """The largest corpus as one PDF: the reader's and pdfplumber's speed on it."""
    corpus = max(
        (p for p in corpora_dir.iterdir() if p.is_dir()),
        key=lambda p: sum(f.stat().st_size for f in p.rglob("*.md")),
    )
    texts = [
        _FRONT_MATTER_RE.sub("", f.read_text("utf-8"))
        for f in sorted(corpus.rglob("*.md"))
    ]
    html_path = tmp / "long.html"
    html_path.write_text(render_html("\n\n".join(texts), corpus.name), "utf-8")
    render_pdf(html_path, tmp / "long.pdf")
    data = (tmp / "long.pdf").read_bytes()
    started = time.perf_counter()
    reading = readers.read("long.pdf", data)
    seconds = time.perf_counter() - started
    long = {
        "corpus": corpus.name,
        "pages": reading.summary["pages"],
        "mb": len(data) / 1e6,
        "reader": seconds,
        "pdfplumber": _plumber_seconds(data),
    }
    for label, extract in peers("pdf"):
        started = time.perf_counter()
        extract(tmp / "long.pdf", data)
        long[label] = time.perf_counter() - started
    return long


def _render_all(
    files: list[Path], corpus: str, tmp: Path, formats, css: str = CSS
) -> list[dict]:
    """Each file rendered to every format (Chromium two at a time)."""
    rendered = []
    for n, path in enumerate(files):
        markdown = path.read_text("utf-8")
        stem = f"{corpus}-{n:03d}-{path.stem}"
        html_path = tmp / f"{stem}.html"
        html_path.write_text(render_html(markdown, path.stem, css), "utf-8")
        paths = {"html": html_path, "pdf": tmp / f"{stem}.pdf"}
        if "docx" in formats:
            paths["docx"] = tmp / f"{stem}.docx"
            render_docx(markdown, paths["docx"])
        rendered.append(paths)
    if "pdf" in formats:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda p: render_pdf(p["html"], p["pdf"]), rendered))
    return rendered


def _read_back(
    path: Path, corpus: str, files: dict, formats, report: Report, timings: bool
) -> None:
    markdown = path.read_text("utf-8")
    original = structure(_FRONT_MATTER_RE.sub("", markdown))
    for fmt in formats:
        data = files[fmt].read_bytes()
        started = time.perf_counter()
        try:
            reading = readers.read(files[fmt].name, data)
        except readers.ReaderError as exc:
            report.errors.append(f"{corpus}/{path.name} {fmt}: {exc}")
            text = ""
        else:
            text = reading.text
            if fmt == "pdf":
                report.pages += reading.summary["pages"]
        report.seconds[fmt] += time.perf_counter() - started
        report.size[fmt] += len(data)
        report.files[fmt] += 1
        if timings:
            _time_peers(fmt, files[fmt], data, original, report)
        counts = report.recall.setdefault(
            (fmt, corpus), {kind: [0, 0] for kind in KINDS}
        )
        for kind, (found, total) in recall(original, structure(text)).items():
            counts[kind][0] += found
            counts[kind][1] += total


def _time_peers(
    fmt: str, path: Path, data: bytes, original: Structure, report: Report
) -> None:
    """The same file read in a forked child and by the peers, timed."""
    report.child_seconds[fmt] += _child_seconds(path.name, data)
    if fmt == "pdf":
        report.plumber_seconds += _plumber_seconds(data)
    for label, extract in peers(fmt):
        started = time.perf_counter()
        flat = extract(path, data)
        report.peer_seconds[label] += time.perf_counter() - started
        found, total = recall(original, structure(flat))["headings"]
        kept = report.peer_headings.setdefault(label, [0, 0])
        kept[0] += found
        kept[1] += total


# --- recall@k of the golden sets on each rendering (kb_eval --match text) -------

GOLDEN = {  # corpus -> golden file, relative to the repository
    "handbook": "evals/handbook.jsonl",
    "rq-docs": "evals/rq-docs.jsonl",
    "poetry-docs": "evals/poetry-docs.jsonl",
}
REPO_DIR = Path(__file__).resolve().parents[2]


def render_corpus(corpus: Path, out: Path, fmt: str) -> list[str]:
    """Every Markdown file of `corpus` rendered to `fmt` under `out`, in the same
    folders with the same stems ("docs/a.md" -> "docs/a.pdf"), so that golden
    spans find their file. Returns the files that could not be rendered."""
    failed = []
    jobs = []
    for path in sorted(corpus.rglob("*.md")):
        target = out / path.relative_to(corpus).with_suffix(f".{fmt}")
        target.parent.mkdir(parents=True, exist_ok=True)
        markdown = published(path.read_text("utf-8"))
        try:
            if fmt == "docx":
                render_docx(markdown, target)
                continue
            target.with_suffix(".html").write_text(
                render_html(markdown, path.stem), "utf-8"
            )
        except (OSError, subprocess.SubprocessError) as exc:
            failed.append(f"{path.name}: {exc}")
            continue
        if fmt == "pdf":
            jobs.append(target)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda t: _print_pdf(t, failed), jobs))
    return failed


def published(markdown: str) -> str:
    """The page as its site publishes it: a front matter title (which kb takes
    as the source's title) shown as the page's heading unless the page opens
    with one. kb takes a converted file's title from its first heading when that
    is a level-1 one (`parsing.markdown_title`), so a level-1 heading further
    down (a stray `# Name` late in the page) does not stand for the title."""
    found = _FRONT_MATTER_RE.match(markdown)
    title = found and re.search(r"^title:[ \t]*(.+?)[ \t]*$", found.group(), re.M)
    if not title:
        return markdown
    body = markdown[found.end() :]
    first = next((t for t in _md().parse(body) if t.type == "heading_open"), None)
    if first is not None and first.tag == "h1":
        return body
    return f"# {title.group(1).strip(chr(34) + chr(39))}\n\n{body}"


def _print_pdf(target: Path, failed: list[str]) -> None:
    html_path = target.with_suffix(".html")
    try:
        render_pdf(html_path, target)
    except (OSError, subprocess.SubprocessError) as exc:
        failed.append(f"{html_path.name}: {exc}")
    html_path.unlink()


def eval_recall(
    corpora_dir: Path = CORPORA_DIR,
    corpora: tuple[str, ...] = tuple(GOLDEN),
    formats: tuple[str, ...] = ("md", *FORMATS),
    progress: Callable[[str], None] = lambda line: None,
) -> list[dict]:
    """`kb_eval --match text` of each corpus's golden set on each rendering (and
    the Markdown itself, "md"): one row per run, with recall@k and the cases
    whose spans could not be located. Each run indexes the corpus afresh with the
    configured embedder: minutes per run."""
    import json

    from django.core.management import call_command

    rows = []
    for corpus in corpora:
        cases = REPO_DIR / GOLDEN[corpus]
        for fmt in formats:
            with tempfile.TemporaryDirectory(prefix=f"kb-eval-{fmt}-") as tmp:
                folder, failed = corpora_dir / corpus, []
                if fmt != "md":
                    folder = Path(tmp) / corpus
                    failed = render_corpus(corpora_dir / corpus, folder, fmt)
                out = Path(tmp) / "run.json"
                started = time.perf_counter()
                call_command(
                    "kb_eval",
                    cases=cases,
                    corpus=folder,
                    match="text",
                    json_out=out,
                    stdout=io.StringIO(),
                )
                result = json.loads(out.read_text("utf-8"))
            agg = result["aggregate"]
            rows.append(
                {
                    "corpus": corpus,
                    "format": fmt,
                    "k": agg["k"],
                    "n": agg["n"],
                    "recall_at_k": agg["recall_at_k"],
                    "mrr": agg["mrr"],
                    "unlocatable": agg.get("unlocatable", 0),
                    "seconds": round(time.perf_counter() - started, 1),
                    "render_failed": failed,
                    "hits": {c["id"]: c["hit"] for c in result["cases"]},
                }
            )
            progress(
                f"{corpus} {fmt}: recall@{agg['k']} {agg['recall_at_k']:.3f} "
                f"(n={agg['n']}, unlocatable {agg.get('unlocatable', 0)}, "
                f"{rows[-1]['seconds']:.0f} s)"
            )
    return rows


def eval_markdown(rows: list[dict]) -> str:
    """The recall rows as a table, each format's difference to Markdown beside it."""
    md = {r["corpus"]: r["recall_at_k"] for r in rows if r["format"] == "md"}
    md_hits = {r["corpus"]: r["hits"] for r in rows if r["format"] == "md"}
    lines = [
        "| corpus | format | recall@k | vs md (points) | MRR | n | unlocatable |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = md.get(r["corpus"])
        delta = (
            ""
            if base is None or r["format"] == "md"
            else (f"{100 * (r['recall_at_k'] - base):+.1f}")
        )
        lines.append(
            f"| {r['corpus']} | {r['format']} | {r['recall_at_k']:.3f} "
            f"(@{r['k']}) | {delta} | {r['mrr']:.3f} | {r['n']} | "
            f"{r['unlocatable']} |"
        )
    notes = []
    for r in rows:
        base = md_hits.get(r["corpus"], {})
        lost = sorted(i for i, hit in r["hits"].items() if base.get(i) and not hit)
        won = sorted(i for i, hit in r["hits"].items() if hit and base.get(i) is False)
        if r["format"] != "md" and (lost or won):
            notes.append(
                f"- {r['corpus']} {r['format']}: missed {', '.join(lost) or 'none'}; "
                f"gained {', '.join(won) or 'none'} (against md)"
            )
        if r["render_failed"]:
            notes.append(
                f"- {r['corpus']} {r['format']} not rendered: "
                + "; ".join(r["render_failed"])
            )
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


# --- what a user would reach for instead: flat text, timed on the same files -----


def _pdfium_flat(path: Path, data: bytes) -> str:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    try:
        texts = []
        for page in document:
            textpage = page.get_textpage()
            texts.append(textpage.get_text_range())
            textpage.close()
            page.close()
        return "\n".join(texts)
    finally:
        document.close()


def _lxml_flat(path: Path, data: bytes) -> str:
    import lxml.html

    return lxml.html.document_fromstring(data).text_content()


def _docx_flat(path: Path, data: bytes) -> str:
    """word/document.xml's paragraphs, each the text of its w:t runs."""
    import zipfile

    from lxml import etree

    from kb.readers.docx import W

    with zipfile.ZipFile(io.BytesIO(data)) as package:
        root = etree.fromstring(package.read("word/document.xml"))
    t = f"{{{W}}}t"
    return "\n".join(
        "".join(p.itertext(t, with_tail=False)) for p in root.iter(f"{{{W}}}p")
    )


def _langchain(loader: str, needs: str, **kwargs) -> Callable[[Path, bytes], str]:
    """A LangChain loader, given the file's path as its users do; its documents'
    text joined. Imported here, so that no timing includes an import."""
    import importlib

    from langchain_community import document_loaders

    cls = getattr(document_loaders, loader)
    importlib.import_module(needs)

    def extract(path: Path, data: bytes) -> str:
        documents = cls(str(path), **kwargs).load()
        return "\n".join(d.page_content for d in documents)

    return extract


FLAT_PEERS = {
    "pdf": ("pypdfium2 get_text_range (flat)", _pdfium_flat),
    "html": ("lxml text_content (flat)", _lxml_flat),
    "docx": ("zip + lxml w:t (flat)", _docx_flat),
}
LANGCHAIN_PEERS = {  # format -> (loader, its kwargs, the module it needs)
    "pdf": ("PyPDFLoader", {}, "pypdf"),
    "html": ("BSHTMLLoader", {"open_encoding": "utf-8"}, "bs4"),
    "docx": ("Docx2txtLoader", {}, "docx2txt"),
}


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def peers(fmt: str) -> list[tuple[str, Callable[[Path, bytes], str]]]:
    """The flat-text extractions timed beside the reader of `fmt`: the library
    used directly, and LangChain's loader when it and what it needs are installed."""
    out = [FLAT_PEERS[fmt]]
    loader, kwargs, needs = LANGCHAIN_PEERS[fmt]
    if not _missing("langchain_community") and not _missing(needs):
        out.append((f"LangChain {loader} (flat)", _langchain(loader, needs, **kwargs)))
    return out


def peer_notes() -> list[str]:
    """Why a LangChain loader is not in the figures, if one is not."""
    if _missing("langchain_community"):
        return [
            "LangChain's loaders not measured: langchain-community is not "
            "installed (`pip install -r requirements-bench.txt`)."
        ]
    return [
        f"LangChain {loader} not measured: {needs} is not installed."
        for loader, _, needs in LANGCHAIN_PEERS.values()
        if _missing(needs)
    ]


def _plumber_seconds(data: bytes) -> float:
    """pdfplumber's flat text of the same PDF, timed (0 when not installed)."""
    try:
        import io

        import pdfplumber
    except ModuleNotFoundError:
        return 0.0
    started = time.perf_counter()
    with pdfplumber.open(io.BytesIO(data)) as pdf:
        for page in pdf.pages:
            page.extract_text()
    return time.perf_counter() - started


def _child_seconds(name: str, data: bytes) -> float:
    """Seconds to read the file in a forked child under a time limit, its
    result sent back to this process, as the worker reads every file."""
    readers.preload()
    started = time.perf_counter()
    try:
        limits.run(readers.read, name, data, seconds=600, memory_mb=2048)
    except readers.ReaderError:
        pass
    return time.perf_counter() - started


def markdown(report: Report) -> str:
    lines = [
        "| format | corpus | headings | table rows | list items | code blocks |",
        "|---|---|---|---|---|---|",
    ]
    for (fmt, corpus), counts in sorted(report.recall.items()):
        cells = []
        for kind in KINDS:
            found, total = counts[kind]
            cells.append(f"{found / total:.3f} ({found}/{total})" if total else "-")
        lines.append(f"| {fmt} | {corpus} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| reader | MB read | seconds | MB/s | pages/s | headings kept |",
        "|---|---|---|---|---|---|",
    ]
    for fmt in sorted(report.seconds):
        mb = report.size[fmt] / 1e6
        found = sum(c["headings"][0] for (f, _), c in report.recall.items() if f == fmt)
        total = sum(c["headings"][1] for (f, _), c in report.recall.items() if f == fmt)
        rows = [(f"kb.readers {fmt} (with structure)", report.seconds[fmt], found)]
        rows += [
            (label, report.peer_seconds[label], report.peer_headings[label][0])
            for label, _ in peers(fmt)
            if label in report.peer_headings
        ]
        if fmt == "pdf" and report.plumber_seconds:
            rows.append(
                ("pdfplumber extract_text (flat)", report.plumber_seconds, None)
            )
        for label, seconds, kept in rows:
            per_page = (
                f"{report.pages / seconds:.1f}" if fmt == "pdf" and seconds else ""
            )
            rate = f"{mb / seconds:.2f}" if seconds else ""
            heads = "" if kept is None else f"{kept}/{total}"
            cells = (label, f"{mb:.2f}", f"{seconds:.2f}", rate, per_page, heads)
            lines.append("| " + " | ".join(cells) + " |")
    if report.child_seconds:
        lines += [
            "",
            "| reader | files | in this process, s | in a forked child "
            "(KB_PARSE_TIMEOUT), s | overhead per file, ms |",
            "|---|---|---|---|---|",
        ]
        for fmt in sorted(report.child_seconds):
            alone, child, n = (
                report.seconds[fmt],
                report.child_seconds[fmt],
                report.files[fmt],
            )
            cells = (
                fmt,
                str(n),
                f"{alone:.2f}",
                f"{child:.2f}",
                f"{(child - alone) / n * 1000:.1f}",
            )
            lines.append("| " + " | ".join(cells) + " |")
    if report.long_pdf:
        long = report.long_pdf
        lines += [
            "",
            f"One long PDF ({long['corpus']} as one document, {long['pages']} pages, "
            f"{long['mb']:.1f} MB): kb.readers {long['pages'] / long['reader']:.1f} "
            "pages/s with structure"
            + "".join(
                f", {label} {long['pages'] / long[label]:.1f} pages/s"
                for label, _ in peers("pdf")
                if long.get(label)
            )
            + (
                f", pdfplumber extract_text {long['pages'] / long['pdfplumber']:.1f}"
                " pages/s (flat text)"
                if long["pdfplumber"]
                else ""
            ),
        ]
    if report.notes:
        lines += ["", *report.notes]
    if report.errors:
        lines += ["", "Refused:", *[f"- {e}" for e in report.errors]]
    return "\n".join(lines) + "\n"
