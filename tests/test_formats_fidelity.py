"""The readers' fidelity on renderings of a real corpus (issue #16): the handbook's
Markdown printed to HTML (markdown-it), PDF (headless Chromium) and DOCX (pandoc),
read back, and its structure compared with the original's."""

from __future__ import annotations

import base64
import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import docx
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_raw
import pytest

from kb import readers
from kb.benchmarks import formats
from tests.base import SHARED, shared_or_skip
from tests.documents import Page, build_pdf

CORPUS = SHARED / "corpora" / "handbook"
# Measured on 2026-12-01 (docs/benchmarks.md, Formats): every figure was 1.000 for
# HTML; DOCX and PDF lost at most a few items per kind on the three corpora.
FLOOR = {"html": 0.99, "docx": 0.95, "pdf": 0.90}
# The fonts that the printed pages below are set in, pinned by their files
# (@font-face, as data: URLs) so that the layout does not depend on what the
# machine's serif, sans-serif and monospace resolve to (issue #26). Family:
# regular and bold file, and the Debian package holding them (.ci/run installs
# them); each prints under its file's name, with or without "-Regular".
DEJAVU, NOTO, LIBERATION = "fonts-dejavu-core", "fonts-noto-mono", "fonts-liberation"
FONT_FILES = {
    "kb-serif": ("DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", DEJAVU),
    "kb-sans": ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", DEJAVU),
    # Arial's metrics: the handbook's benchmark floors were measured in them
    "kb-arial": ("LiberationSans-Regular.ttf", "LiberationSans-Bold.ttf", LIBERATION),
}
# Code fonts (kb-mono) the reader must tell as monospaced: Debian's default,
# Noto (the default where fonts-noto-mono is installed) and Liberation.
MONO_FILES = {
    "DejaVu Sans Mono": ("DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf", DEJAVU),
    "Noto Sans Mono": ("NotoSansMono-Regular.ttf", "NotoSansMono-Bold.ttf", NOTO),
    "Liberation Mono": (
        "LiberationMono-Regular.ttf",
        "LiberationMono-Bold.ttf",
        LIBERATION,
    ),
}
FONT_DIRS = (Path("/usr/share/fonts"), Path("/usr/local/share/fonts"))


def _tools_or_skip() -> None:
    missing = [t for t in (formats.CHROMIUM, "pandoc") if not shutil.which(t)]
    if missing:
        reason = f"{', '.join(missing)} not installed (.ci/run installs them)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.mark.slow
def test_the_handbook_keeps_its_structure_in_every_format():
    shared_or_skip(CORPUS)
    _tools_or_skip()
    faces, _ = _font_faces("DejaVu Sans Mono")  # the benchmark's CSS, pinned
    css = faces + formats.CSS.replace("sans-serif", "kb-arial")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "handbook").symlink_to(CORPUS)
        report = formats.run(
            Path(tmp),
            formats.FORMATS,
            timings=False,
            css=css + "pre,code{font-family:kb-mono}",
        )
    assert report.errors == []
    assert report.pages > 0
    for fmt in formats.FORMATS:
        counts = report.recall[(fmt, "handbook")]
        for kind, (found, total) in counts.items():
            if total:
                assert found / total >= FLOOR[fmt], (fmt, kind, found, total)
        headings_found, headings_total = counts["headings"]
        assert headings_total > 50 and headings_found / headings_total >= 0.98, fmt


def test_the_docx_rendering_keeps_the_text_of_raw_html_blocks(tmp_path):
    """pandoc's DOCX writer drops raw HTML; the benchmark's DOCX must still hold
    the note a page writes in a <div> (the HTML and PDF renderings show it)."""
    if not shutil.which("pandoc"):
        _tools_or_skip()
    markdown = (
        'Retries can wait between attempts.\n\n<div class="warning">\n'
        '    <img src="/img/warning.png" alt="Warning" />\n'
        "    <strong>Note:</strong>\n    <p>\n"
        "        Run your workers with the scheduler.\n    </p>\n</div>\n"
    )
    formats.render_docx(markdown, tmp_path / "retries.docx")
    text = readers.read("retries.docx", (tmp_path / "retries.docx").read_bytes()).text
    assert text == (
        "Retries can wait between attempts.\n\nWarning Note:\n\n"
        "Run your workers with the scheduler.\n"
    ), text


def _words(text: str) -> set[str]:
    return set(re.findall(r"[^\W_]+", text.lower()))


def _sample_files(folder: Path) -> dict[str, Path]:
    document = docx.Document()
    document.add_heading("Expense policy", 1)
    document.add_paragraph("Employees book travel through the portal.")
    document.add_paragraph("Receipts within thirty days", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for cell, text in zip(table._cells, ("Item", "Limit", "Hotel", "150 EUR")):
        cell.text = text
    page = Page()
    page.heading("Expense policy", 22).paragraph(
        ["Employees book travel through the portal.", "Receipts within thirty days."]
    )
    html = formats.render_html(  # as the benchmark renders its corpora
        "# Expense policy\n\nEmployees book travel through the [portal](/p).\n\n"
        "- Receipts within thirty days\n\n| Item | Limit |\n|---|---|\n"
        "| Hotel | 150 EUR |\n",
        "Policy",
    )
    paths = {fmt: folder / f"policy.{fmt}" for fmt in formats.FORMATS}
    document.save(paths["docx"])
    paths["pdf"].write_bytes(build_pdf([page]))
    paths["html"].write_text(html, "utf-8")
    return paths


def test_the_flat_text_timed_beside_each_reader_holds_all_its_words(tmp_path):
    """kb_bench formats compares the readers' speed with the libraries they are
    built on used directly (and LangChain's loaders when installed): a baseline
    that read less than the reader would flatter it. Each reads every word of
    the reader's text, and keeps no heading."""
    for fmt, path in _sample_files(tmp_path).items():
        data = path.read_bytes()
        ours = readers.read(path.name, data).text
        assert formats.structure(ours).headings, fmt
        timed = formats.peers(fmt)
        assert timed[0] == formats.FLAT_PEERS[fmt]
        for label, extract in timed:
            flat = extract(path, data)
            # words, not word boundaries: BSHTMLLoader glues <title> to <h1>
            missing = {w for w in _words(ours) if w not in flat.lower()}
            assert not missing, (label, missing)
            assert not formats.structure(flat).headings, label


PROSE = (
    "Every trip is booked through the travel portal, which checks the fare against "
    "the policy before it asks the manager to approve it. "
)
BORDERLESS = f"""<!doctype html><html><head><meta charset="utf-8"><style>
body{{font-family:kb-sans;font-size:11pt;max-width:40em}}
td,th{{padding:3px 6px}} .cols{{columns:2;column-gap:2em}}</style></head>
<body><main><h1>Expense caps</h1><p>{PROSE * 2}</p>
<table><thead><tr><th>City</th><th>Hotel</th><th>Notes</th></tr></thead><tbody>
<tr><td>Paris</td><td>180 EUR</td><td>{PROSE}</td></tr>
<tr><td>Berlin</td><td>150 EUR</td><td>Breakfast included</td></tr>
<tr><td>Rome</td><td>160 EUR</td><td>City tax paid at the hotel</td></tr>
</tbody></table>
<ul><li>Keep every receipt</li><li>Claim within thirty days</li>
<li>Ask your manager first</li></ul>
<div class="cols"><p>{PROSE * 6}</p></div></main></body></html>"""


@pytest.mark.slow
def test_a_table_printed_without_borders_keeps_its_rows_and_header(tmp_path):
    """Chromium prints an HTML table without borders: no rules to find its
    cells, only the columns its text keeps apart. Its centred header, the
    wrapped cell centred in its row, the list and the two-column text after
    it each come back as what they are."""
    if not shutil.which(formats.CHROMIUM):
        _tools_or_skip()
    html, pinned = _pinned(BORDERLESS, "DejaVu Sans Mono")
    (tmp_path / "caps.html").write_text(html, "utf-8")
    formats.render_pdf(tmp_path / "caps.html", tmp_path / "caps.pdf")
    data = (tmp_path / "caps.pdf").read_bytes()
    assert _fonts_of(data) <= pinned
    reading = readers.read("caps.pdf", data)
    text = reading.text
    assert (
        "| City | Hotel | Notes |\n| --- | --- | --- |\n"
        f"| Paris | 180 EUR | {PROSE.strip()} |\n"
        "| Berlin | 150 EUR | Breakfast included |\n"
        "| Rome | 160 EUR | City tax paid at the hotel |\n\n"
        "- Keep every receipt\n- Claim within thirty days\n- Ask your manager first"
    ) in text
    assert len(re.findall(r"^\| --- ", text, re.M)) == 1, text  # one table
    summary = reading.summary
    assert (summary["tables_with_header"], summary["tables_without_header"]) == (1, 0)


def _font_file(file: str, package: str) -> Path:
    """The installed font file, or skip (fail under CI) naming its package."""
    for folder in FONT_DIRS:
        found = next(folder.rglob(file), None) if folder.is_dir() else None
        if found is not None:
            return found
    reason = f"{file} not installed (Debian's {package}; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _font_faces(mono: str) -> tuple[str, set[str]]:
    """CSS defining the families kb-serif, kb-sans and kb-mono (the code font
    `mono`) by their files, and the names they print under."""
    families = {**FONT_FILES, "kb-mono": MONO_FILES[mono]}
    rules, names = [], set()
    for family, (regular, bold, package) in families.items():
        for weight, file in (("normal", regular), ("bold", bold)):
            data = base64.b64encode(_font_file(file, package).read_bytes())
            rules.append(
                f"@font-face{{font-family:{family};font-weight:{weight};"
                f"src:url(data:font/ttf;base64,{data.decode()})}}"
            )
            stem = Path(file).stem
            names |= {stem, stem.removesuffix("-Regular")}
    return "".join(rules), names


def _pinned(html: str, mono: str) -> tuple[str, set[str]]:
    """The HTML with the pinned fonts defined, and the names they print under."""
    faces, names = _font_faces(mono)
    return html.replace("</head>", f"<style>{faces}</style></head>", 1), names


def _fonts_of(pdf: bytes) -> set[str]:
    """The names of the fonts a PDF's text is set in, subset prefixes aside."""
    document = pdfium.PdfDocument(pdf)
    name, flags, found = ctypes.create_string_buffer(256), ctypes.c_int(), set()
    for page in document:
        textpage = page.get_textpage()
        for i in range(textpage.count_chars()):
            pdfium_raw.FPDFText_GetFontInfo(textpage, i, name, 256, flags)
            font = name.value.decode("latin-1")  # none for a space pdfium adds
            if font:
                found.add(font.partition("+")[2] or font)
    return found


def _print(
    tmp_path: Path, name: str, html: str, mono: str = "DejaVu Sans Mono"
) -> readers.Reading:
    """The HTML printed by Chromium as a user prints it (no header and footer
    of its own), in the pinned fonts (with `mono` as its code font), and read
    back."""
    if not shutil.which(formats.CHROMIUM):
        _tools_or_skip()
    source, target = tmp_path / f"{name}.html", tmp_path / f"{name}.pdf"
    html, pinned = _pinned(html, mono)
    source.write_text(html, "utf-8")
    subprocess.run(
        [
            formats.CHROMIUM,
            *formats.CHROMIUM_FLAGS,
            "--no-pdf-header-footer",
            f"--print-to-pdf={target}",
            source.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    data = target.read_bytes()
    used = _fonts_of(data)
    assert used <= pinned, f"printed in fonts that were not pinned: {used - pinned}"
    return readers.read(target.name, data)


def _assert_read(reading: readers.Reading, text: str, tables: tuple[int, int]):
    """The reading's text is `text`, with `tables` tables (with a header row,
    without one); returns its summary."""
    assert reading.text == text, reading.text
    summary = reading.summary
    assert (summary["tables_with_header"], summary["tables_without_header"]) == tables
    return summary


NEWSLETTER = """<!doctype html><html><head><meta charset="utf-8"><style>
@page{size:A4;margin:2cm} body{font-family:kb-serif;font-size:11pt}
.cols{column-count:2;column-gap:1.2cm} h1{font-size:26pt} h2{font-size:16pt}
pre{font-family:kb-mono;font-size:10pt}
</style></head><body><h1>Quarterly Newsletter</h1><div class="cols">
<h2>Kitchen rules</h2>
<p>The kitchen on floor two is cleaned every evening at six. Please put your
dishes in the dishwasher before you leave; dishes left in the sink after six are
thrown away on Fridays.</p>
<p>The coffee machine descaling happens every second Tuesday, and during that
hour the machine on floor three should be used instead.</p>
<h2>Office plants</h2>
<p>Each team adopts one plant. Watering is done on Mondays by the team whose name
is first on the rota pinned next to the lifts, and a forgotten plant is reassigned
after two dry weeks.</p>
<ol><li>Check the rota</li><li>Water the plant<ul><li>Use the green can</li>
<li>Half a litre at most</li></ul></li><li>Sign the sheet</li></ol>
<h2>Wi-Fi</h2>
<p>Guests connect to the network named Larkspur with the daily code shown at
reception. Staff use the staff network with their own credentials.</p>
<pre>nmcli dev wifi list</pre>
<h2>Desk booking</h2>
<p>Desks are booked in the app up to two weeks ahead. A booking not checked in
by ten o'clock is released automatically so that others may take the desk.</p>
</div></body></html>"""


@pytest.mark.parametrize("mono", MONO_FILES)
def test_a_two_column_page_is_read_left_column_first_not_as_tables(tmp_path, mono):
    """Chromium's CSS columns: the lines of the two columns stand side by side,
    a heading of one beside a line of the other; no table, and each column's
    headings, paragraphs, list (going on in the right column) and code kept,
    whichever the code font (Noto Sans Mono's read as a heading, issue #26)."""
    reading = _print(tmp_path, "newsletter", NEWSLETTER, mono)
    text = (
        "# Quarterly Newsletter\n\n## Kitchen rules\n\n"
        "The kitchen on floor two is cleaned every evening at six. Please put your "
        "dishes in the dishwasher before you leave; dishes left in the sink after "
        "six are thrown away on Fridays.\n\n"
        "The coffee machine descaling happens every second Tuesday, and during "
        "that hour the machine on floor three should be used instead.\n\n"
        "## Office plants\n\n"
        "Each team adopts one plant. Watering is done on Mondays by the team whose "
        "name is first on the rota pinned next to the lifts, and a forgotten plant "
        "is reassigned after two dry weeks.\n\n"
        "1. Check the rota\n2. Water the plant\n    - Use the green can\n"
        "    - Half a litre at most\n3. Sign the sheet\n\n## Wi-Fi\n\n"
        "Guests connect to the network named Larkspur with the daily code shown at "
        "reception. Staff use the staff network with their own credentials."
        "\n\n```\nnmcli dev wifi list\n```\n\n## Desk booking\n\n"
        "Desks are booked in the app up to two weeks ahead. A booking not checked "
        "in by ten o'clock is released automatically so that others may take the "
        "desk.\n"
    )
    summary = _assert_read(reading, text, tables=(0, 0))
    assert (summary["headings"], summary["paragraphs"]) == (5, 5)
    assert summary["chars_per_page"][0] > 900


TABLES = """<!doctype html><html><head><meta charset="utf-8"><style>
html{background-color:#fdfdfd} body{font-family:kb-sans;font-size:12pt}
.pandoc{border-collapse:collapse} .pandoc th{border-top:1px solid #1a1a1a}
.pandoc tbody{border-top:1px solid #1a1a1a;border-bottom:1px solid #1a1a1a}
th,td{padding:0.25em 0.5em}</style></head><body>
<h1>Incident guide</h1><p>Page the on-call engineer first.</p>
<table class="pandoc"><thead><tr><th>Severity</th><th>Response</th></tr></thead>
<tbody><tr><td>SEV1</td><td>15 min</td></tr><tr><td>SEV2</td><td>1 hour</td></tr>
</tbody></table><p>Report a lost laptop within one hour.</p>
<table border=1><thead><tr><th>Level</th><th>Response time</th></tr></thead>
<tbody><tr><td>Critical</td><td>15 minutes</td></tr><tr><td>High</td><td>4 hours</td>
</tr></tbody></table></body></html>"""


def test_tables_printed_in_pandocs_style_or_with_a_border_keep_their_columns(
    tmp_path,
):
    """pandoc's HTML style: a page background (no code block's shading) and
    rules only above and below the rows; `border=1`: the table's border
    beside each cell's, which bounds no column."""
    reading = _print(tmp_path, "tables", TABLES)
    text = (
        "# Incident guide\n\nPage the on-call engineer first.\n\n"
        "| Severity | Response |\n| --- | --- |\n| SEV1 | 15 min |\n"
        "| SEV2 | 1 hour |\n\nReport a lost laptop within one hour.\n\n"
        "| Level | Response time |\n| --- | --- |\n| Critical | 15 minutes |\n"
        "| High | 4 hours |\n"
    )
    _assert_read(reading, text, tables=(2, 0))


BOLD_AND_CODE_HEADER = """# Throttling

Throttles indicate a temporary state, and are used to control the rate of requests
that clients can make to an API.

**The application-level throttling that REST framework provides should not be
considered a security measure or protection against brute forcing or
denial-of-service attacks. Deliberately malicious actors will always be able to
spoof IP origins.**

**The application-level throttling provided by REST framework is intended for
implementing policies such as different business tiers and basic protections
against service over-use.**

## Access restriction methods

|                | `queryset` | `permission_classes` | `serializer_class` |
|----------------|------------|----------------------|--------------------|
| Action: list   | global     | global               | object-level       |
| Action: create | no         | global               | object-level       |
| Action: update | global     | object-level         | object-level       |
"""


@pytest.mark.slow
def test_a_page_printed_from_pandocs_html_keeps_bold_paragraphs_and_table_header(
    tmp_path,
):
    """pandoc's standalone HTML printed by Chromium (a printed page once read a bold
    paragraph as a heading): a bold paragraph
    is text, not a heading of its first line; a header row of code cells whose
    first cell is empty stays the table's header."""
    if not shutil.which("pandoc"):
        _tools_or_skip()
    html = subprocess.run(
        ["pandoc", "-f", "gfm", "-t", "html", "-s", "--metadata", "pagetitle=t"],
        input=BOLD_AND_CODE_HEADER,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    # pandoc's own style names fonts of the machine: the pinned ones instead
    fonts = "body{font-family:kb-serif} code{font-family:kb-mono}"
    html = html.replace("</head>", f"<style>{fonts}</style></head>", 1)
    reading = _print(tmp_path, "throttling", html)
    text = reading.text
    assert (
        "\n\nThe application-level throttling that REST framework provides should "
        "not be considered a security measure or protection against brute forcing "
        "or denial-of-service attacks. Deliberately malicious actors will always be "
        "able to spoof IP origins.\n\nThe application-level throttling provided by "
        "REST framework is intended for implementing policies such as different "
        "business tiers and basic protections against service over-use.\n\n"
        "## Access restriction methods\n\n"
        "|  | queryset | permission_classes | serializer_class |\n| --- | --- | --- "
        "| --- |\n| Action: list | global | global | object-level |\n"
    ) in text, text
    summary = reading.summary
    assert (summary["headings"], summary["tables_with_header"]) == (2, 1), text
