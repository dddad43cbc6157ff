"""PDF -> canonical Markdown with a page map, from the text layer (pypdfium2).

Characters with their positions, sizes and fonts are grouped into lines (split
at wide gaps and at vertical rules), lines repeated in the top or bottom margin
of many pages (running headers, footers, page numbers), between the page's edge
and its body, are dropped, the rest is put in reading order (two-column pages:
the left column first) and read as
headings (font size and weight against the body text; bold running text, a
bold block too long for a title or reading as a sentence, is no heading), list
items (bullet or number markers, nesting by indentation), code (monospaced
lines), ruled tables (cells between the page's drawn rules; the first row is the
header when bold) and paragraphs (lines joined, hyphenation at line ends undone,
going on over a page break when the page's last line fills the width and its
sentence goes on). OCR is out of scope: a PDF without a text layer is refused.
"""

from __future__ import annotations

import ctypes
import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field

import pypdfium2 as pdfium
import pypdfium2.raw as raw
from django.utils.translation import gettext

from kb.readers.reading import ReaderError, Reading
from kb.readers.writer import SURROGATE_RE, Writer, clean, escape

GAP_EMS = 1.5  # a horizontal gap wider than this many font sizes splits a line
CHUNK_EMS = 0.6  # a gap wider than this (a word space is ~0.3) may part two cells
COLUMN_GAP_EMS = 0.75  # columns of a table stand this far apart at least (the
# spaces of justified text reach ~0.6)
MIN_CELL = 4  # rules closer than this (PDF units) bound no cell between them
WRAP_EMS = 1.35  # the widest line step inside a table cell whose text wraps
PROSE_COLUMN_EMS = 15  # a column of running text is at least this wide
TITLE_CHARS = 120  # bold text of body size this long (a line, or lines at line
# spacing) is running text, not a title
LONG_RUN = 8  # rows of a run that is not a table, skipped as a whole
OPEN = 10**6  # the missing edge of a table row cut by a page break
MARGIN_SHARE = 0.1  # top and bottom share of a page searched for running lines
FIXED_PITCH = 1  # PDF font descriptor flags
FORCE_BOLD = 1 << 18
_BULLET_RE = re.compile(r"^([•◦▪▫●○■□‣⁃∙·*–-])\s+(.*)$")
_NUMBER_RE = re.compile(r"^(\d{1,3})[.)]\s+(.*)$")
_PAGE_NUMBER_RE = re.compile(
    r"^(page\s+)?(\d{1,5}|[ivxlcdm]{1,7})(\s*(/|of)\s*\d{1,5})?$", re.I
)
_BOLD_RE = re.compile(r"bold|black|heavy|semibold|demi", re.I)
_SENTENCE_ENDS = (".", ",", ";", "!", "?")
_SENTENCE_RE = re.compile(r"\w[.!?][\"”’)]?\s+[A-Z]")  # one sentence ends, one starts
# characters narrower than most in any proportional font, as wide as the others
# in a monospaced one
_NARROW = frozenset("ijlItfr.,:;'!|()[]")
WIDTH_EMS = 0.03  # advances this close (in ems) are the same width
MONO_SHAPES = 6  # characters of one width, none narrow, that make a font monospaced
MEASURED = 500  # characters of a font measured per page: enough to tell


@dataclass
class _Line:
    """A run of characters on one baseline, not crossing a wide gap or a rule."""

    page: int
    x0: float
    x1: float
    y: float  # baseline, PDF units from the bottom
    size: float
    chars: list[str] = field(default_factory=list)
    bold: int = 0
    mono: int = 0
    sizes: Counter = field(default_factory=Counter)
    faces: Counter = field(default_factory=Counter)  # characters per (font, size)
    cell: tuple[float, float, float, float] | None = None  # inside table rules
    box: int | None = None  # the shaded box around it
    # runs of characters parted by gaps wider than a word space: where each
    # starts in `chars`, and its left and right edges (cells of unruled tables)
    starts: list[int] = field(default_factory=lambda: [0])
    spans: list[list[float]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.chars).strip()

    def chunks(self) -> list[tuple[float, float, str]]:
        ends = [*self.starts[1:], len(self.chars)]
        return [
            (x0, x1, "".join(self.chars[a:b]).strip())
            for (x0, x1), a, b in zip(self.spans, self.starts, ends, strict=True)
        ]

    @property
    def top(self) -> float:
        return self.y + self.size

    def is_bold(self) -> bool:
        return self.bold >= 0.9 * max(1, len(self.text.replace(" ", "")))

    def is_mono(self) -> bool:
        return self.mono >= 0.9 * max(1, len(self.text.replace(" ", "")))


@dataclass
class _Font:
    """A font of a page: bold by its name or flags, monospaced by the advance
    widths of its characters on the page (its narrow letters as wide as its
    others) or, without narrow letters and others to compare, by its
    fixed-pitch flag. Not by its name: a list of names misses code fonts and
    takes in others ("Monotype Corsiva")."""

    bold: bool
    fixed: bool
    narrow: Counter = field(default_factory=Counter)  # advances (ems): count
    wide: Counter = field(default_factory=Counter)
    shapes: set[str] = field(default_factory=set)  # the wide characters seen
    measured: int = 0
    height: float = 0.0  # of a character's box, per em

    def measure(self, ch: str, advance: float) -> None:
        self.measured += 1
        if advance <= 0 or ch.isdigit():  # digits: of one width in most fonts
            return
        if ch in _NARROW:
            self.narrow[round(advance, 2)] += 1
        else:
            self.wide[round(advance, 2)] += 1
            self.shapes.add(ch)

    def is_mono(self) -> bool:
        if not self.wide:
            return self.fixed
        common, n = self.wide.most_common(1)[0]
        if self.narrow:  # a ligature's box aside ("!=" drawn as one glyph)
            same = sum(
                k for w, k in self.narrow.items() if abs(w - common) <= WIDTH_EMS
            )
            return same >= 0.8 * self.narrow.total()
        # no narrow letter: many characters of one width tell, or the flag
        return self.fixed or (
            len(self.shapes) >= MONO_SHAPES and n >= 0.9 * self.wide.total()
        )


@dataclass
class _Table:
    page: int
    x0: float
    x1: float
    top: float
    rows: list[list[str]]
    header: bool
    open_top: bool = False  # its first row began on the previous page
    open_bottom: bool = False  # its last row goes on on the next page
    sizes: Counter = field(default_factory=Counter)  # characters per font size
    words: set[str] = field(default_factory=set)  # of its page, for hyphenation


@dataclass
class _Rules:
    """Drawn shapes that carry structure: table rules and list bullets."""

    vertical: list[tuple[float, float, float]] = field(default_factory=list)
    horizontal: list[tuple[float, float, float]] = field(default_factory=list)
    bullets: list[tuple[float, float]] = field(default_factory=list)
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    pages: set[int] = field(default_factory=set)  # boxes the size of the page

    def box(self, line: _Line) -> int | None:
        """The shaded box (a code block's background) the line sits in."""
        for i, (x0, y0, x1, y1) in enumerate(self.boxes):
            if x0 - 1 <= line.x0 <= x1 and y0 - 1 <= line.y <= y1 + 1:
                return i
        return None

    def bullet_before(self, line: _Line) -> bool:
        return any(
            line.x0 - 2.5 * line.size <= x < line.x0
            and line.y - 0.3 * line.size <= y <= line.top
            for x, y in self.bullets
        )

    def crossing(self, xa: float, xb: float, y: float) -> bool:
        return any(
            xa - 1 <= x <= xb + 1 and lo - 2 <= y <= hi + 2
            for x, lo, hi in self.vertical
        )

    def cell(self, line: _Line) -> tuple[float, float, float, float] | None:
        """The rectangle of rules around a line, if it sits in a ruled cell."""
        mid = (line.y + line.top) / 2
        left = [
            x
            for x, lo, hi in self.vertical
            if x <= line.x0 + 1 and lo - 2 <= mid <= hi + 2
        ]
        right = [
            x
            for x, lo, hi in self.vertical
            if x >= line.x1 - 1 and lo - 2 <= mid <= hi + 2
        ]
        if not left or not right:
            return None
        lx, rx = max(left), min(right)
        above = [
            y for y, a, b in self.horizontal if y >= mid and a <= lx + 2 and b >= rx - 2
        ]
        below = [
            y for y, a, b in self.horizontal if y <= mid and a <= lx + 2 and b >= rx - 2
        ]
        # a row cut by a page break has no rule on that side: open-ended
        top = round(min(above)) if above else OPEN
        bottom = round(max(below)) if below else -OPEN
        return (round(lx), round(rx), top, bottom)


def check(name: str, data: bytes, *, max_pages: int) -> None:
    """The quick checks (end marker, encryption, page count), or ReaderError:
    what an upload request can afford; reading the text is for the worker."""
    _open(name, data, max_pages).close()


def _open(name: str, data: bytes, max_pages: int) -> pdfium.PdfDocument:
    if data.rfind(b"%%EOF", max(0, len(data) - 4096)) == -1:
        raise ReaderError(
            gettext("%(file)s is truncated or corrupt: it has no end-of-file marker")
            % {"file": name}
        )
    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise ReaderError(
                gettext(
                    "%(file)s is encrypted (password-protected); remove the "
                    "password first"
                )
                % {"file": name}
            ) from exc
        raise ReaderError(
            gettext("%(file)s is corrupt or not a PDF: %(problem)s")
            % {"file": name, "problem": exc}
        ) from exc
    count = len(document)
    if count > max_pages or count == 0:
        document.close()
    if count > max_pages:
        raise ReaderError(
            gettext(
                "%(file)s has %(count)d pages; the limit is %(limit)d "
                "(KB_MAX_PDF_PAGES)"
            )
            % {"file": name, "count": count, "limit": max_pages}
        )
    if count == 0:
        raise ReaderError(gettext("%(file)s has no pages") % {"file": name})
    return document


def read(name: str, data: bytes, *, max_pages: int) -> Reading:
    document = _open(name, data, max_pages)
    try:
        count = len(document)
        items = [_page_items(name, document, i) for i in range(count)]
    finally:
        document.close()
    # every character of the text layer, in tables too
    chars = [n for _, _, n in items]
    pages = [(lines, tables) for lines, tables, _ in items]
    if not any(chars):
        raise ReaderError(
            gettext("%(file)s has no text layer (scanned?); OCR is not supported")
            % {"file": name}
        )
    removed = _drop_running_lines(pages)
    ordered = [_reading_order(lines, tables) for lines, tables in pages]
    writer = Writer()
    _Assembler(writer, ordered).run()
    text, page_map = writer.render()
    empty = [i + 1 for i, n in enumerate(chars) if n == 0]
    warnings = [f"page {p} has no text" for p in empty]
    summary = writer.summary(
        pages=count,
        running_lines_removed=removed,
        chars_per_page=chars,
        pages_without_text=empty,
    )
    return Reading(text=text, pages=page_map, summary=summary, warnings=warnings)


# --- characters -> lines and tables ---------------------------------------------


def _page_items(name: str, document: pdfium.PdfDocument, index: int):
    try:
        page = document[index]
    except pdfium.PdfiumError as exc:
        raise ReaderError(
            gettext("%(file)s: page %(page)d cannot be read: %(problem)s")
            % {"file": name, "page": index + 1, "problem": exc}
        ) from exc
    try:
        rules = _rules(page)
        textpage = page.get_textpage()
        try:
            lines = _lines(textpage, index + 1, rules)
        finally:
            textpage.close()
    finally:
        page.close()
    chars = sum(len(line.text) for line in lines)
    free, tables = _tables(lines, rules, index + 1)
    free, unruled = _unruled_tables(free, index + 1)
    return free, tables + unruled, chars


def _rules(page: pdfium.PdfPage) -> _Rules:
    """Thin drawn lines and rectangles: the rules of ruled tables."""
    rules = _Rules()
    left, bottom, right, top = (ctypes.c_float() for _ in range(4))
    page_width, page_height = page.get_size()
    for i in range(raw.FPDFPage_CountObjects(page)):
        obj = raw.FPDFPage_GetObject(page, i)
        if raw.FPDFPageObj_GetType(obj) != raw.FPDF_PAGEOBJ_PATH:
            continue
        if not raw.FPDFPageObj_GetBounds(obj, left, bottom, right, top):
            continue
        width, height = right.value - left.value, top.value - bottom.value
        if 1.5 <= width <= 8 and 1.5 <= height <= 8 and abs(width - height) < 1.5:
            rules.bullets.append(
                ((left.value + right.value) / 2, (bottom.value + top.value) / 2)
            )
        elif width > 40 and height > 8:
            if width >= 0.8 * page_width and height >= 0.8 * page_height:
                rules.pages.add(len(rules.boxes))  # a page's background?
            rules.boxes.append((left.value, bottom.value, right.value, top.value))
        elif width <= 2.5 and height > 4:
            rules.vertical.append(
                ((left.value + right.value) / 2, bottom.value, top.value)
            )
        elif height <= 2.5 and width > 4:
            rules.horizontal.append(
                ((bottom.value + top.value) / 2, left.value, right.value)
            )
    return rules


def _lines(textpage: pdfium.PdfTextPage, page: int, rules: _Rules) -> list[_Line]:
    loose = raw.FS_RECTF()
    matrix = raw.FS_MATRIX()
    flags = ctypes.c_int()
    fonts: dict[bytes, _Font] = {}
    name = ctypes.create_string_buffer(256)
    lines: list[_Line] = []
    line: _Line | None = None
    space = False
    last_x0 = 0.0
    get_box, get_font = raw.FPDFText_GetLooseCharBox, raw.FPDFText_GetFontInfo
    get_size, get_matrix = raw.FPDFText_GetFontSize, raw.FPDFText_GetMatrix
    for i, ch in _characters(textpage):
        if ch in "\ufffe\x02":
            ch = "-"  # pdfium's mark for a hyphen that ends a line
        elif ch.isspace() or ch == "\x00":
            space = True
            continue
        get_box(textpage, i, loose)
        height = loose.top - loose.bottom
        get_font(textpage, i, name, 256, flags)
        key = name.value
        if key not in fonts:
            fonts[key] = _Font(
                bool(
                    _BOLD_RE.search(key.decode("latin-1")) or flags.value & FORCE_BOLD
                ),
                bool(flags.value & FIXED_PITCH),
            )
        font = fonts[key]
        # The drawn size: the font's em, scaled by the text and page matrices,
        # not its ascent to descent (the box's height), which varies by font
        # (1.36 em in Noto Sans Mono, 1.11 em in Liberation Serif). The box's
        # height per em is the font's: asked of pdfium once per font.
        if not font.height and height > 0 and get_matrix(textpage, i, matrix):
            em = get_size(textpage, i) * math.hypot(matrix.c, matrix.d)
            font.height = height / em if em > 0 else 1.15
        size = height / (font.height or 1.15) or 1.0
        x0, x1, y = loose.left, loose.right, loose.bottom + 0.2 * height  # ~baseline
        # A ligature's glyph ("fi" in TeX's fonts) gives each of its characters
        # the same box: the second one continues the line, it does not start one.
        # (The same box on another baseline is a character of the next line set
        # where the last one stood, as monospaced lines one under the other.)
        ligature = (
            line is not None
            and (x0, x1) == (last_x0, line.x1)
            and abs(y - line.y) <= 0.35 * max(size, line.size)
        )
        last_x0 = x0
        if ligature:
            pass
        elif (
            line is not None
            and abs(y - line.y) <= 0.35 * max(size, line.size)
            and x0 >= line.x1 - 0.6 * size
            and x0 - line.x1 <= GAP_EMS * size
            and (x0 - line.x1 < 1 or not rules.crossing(line.x1, x0, y + size / 3))
        ):
            if space or x0 - line.x1 > 0.2 * size:
                line.chars.append(" ")
            if x0 - line.x1 > CHUNK_EMS * size:
                line.starts.append(len(line.chars))
                line.spans.append([x0, x1])
        else:
            line = _Line(page, x0, x1, y, size, spans=[[x0, x1]])
            lines.append(line)
        line.chars.append(ch)
        line.x1 = max(line.x1, x1)
        line.spans[-1][1] = max(line.spans[-1][1], x1)
        line.faces[key, round(size, 1)] += 1
        line.bold += font.bold
        if not ligature and font.measured < MEASURED:  # a ligature: one advance
            font.measure(ch, (x1 - x0) / size)
        space = False
    lines = [ln for ln in lines if ln.text]
    mono = {key: font.is_mono() for key, font in fonts.items()}
    for ln in lines:  # code font characters apart from the text's sizes
        for (key, size), n in ln.faces.items():
            ln.mono += n * mono[key]
            ln.sizes[0.0 if mono[key] else size] += n
    for ln in lines:  # its text's size: inline code in another font aside
        ln.box = rules.box(ln) if rules.boxes else None
        prose = [(n, size) for size, n in ln.sizes.items() if size]
        ln.size = max(prose)[1] if prose else ln.size
    # a box the size of the page around text that is mostly not monospaced is
    # the page's background (pandoc's style), not a code block's
    in_box: Counter[int] = Counter()
    for ln in lines:
        if ln.box in rules.pages:
            in_box[ln.box] += 1 if ln.is_mono() else -1
    for ln in lines:
        if ln.box in rules.pages and in_box[ln.box] <= 0:
            ln.box = None
    for ln in lines:
        if rules.bullets and rules.bullet_before(ln) and not _BULLET_RE.match(ln.text):
            ln.chars.insert(0, "• ")  # a bullet drawn as a shape, not a character
            ln.starts = [0] + [i + 1 for i in ln.starts[1:]]
    return lines


def _characters(textpage: pdfium.PdfTextPage) -> list[tuple[int, str]]:
    """The page's characters with their indexes. pdfium counts UTF-16 code units:
    a character outside the Basic Multilingual Plane (an emoji) comes as two
    surrogates, joined here, its first index standing for it; a lone surrogate
    (a broken ToUnicode map) becomes U+FFFD, so that the text is valid Unicode
    (issue #26)."""
    count = raw.FPDFText_CountChars(textpage)
    text = textpage.get_text_range(0, count) if count else ""
    if len(text) == count and not SURROGATE_RE.search(text):
        return list(enumerate(text))
    # characters outside the BMP: ask one by one
    units = [raw.FPDFText_GetUnicode(textpage, i) for i in range(count)]
    out: list[tuple[int, str]] = []
    i = 0
    while i < count:
        unit = units[i]
        low = units[i + 1] if i + 1 < count else 0
        if 0xD800 <= unit < 0xDC00 and 0xDC00 <= low < 0xE000:
            out.append((i, chr(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))))
            i += 2
            continue
        out.append((i, "\ufffd" if 0xD800 <= unit < 0xE000 else chr(unit)))
        i += 1
    return out


def _tables(lines: list[_Line], rules: _Rules, page: int):
    """Lines inside ruled cells become tables; the other lines are returned."""
    if not rules.vertical or not rules.horizontal:
        return lines, []
    free: list[_Line] = []
    cells: dict[tuple[float, float, float, float], list[_Line]] = {}
    for line in lines:
        box = rules.cell(line)
        if box is None:
            free.append(line)
        else:
            cells.setdefault(box, []).append(line)
    if not cells:
        return lines, []
    words = {w.lower() for ln in lines for w in _WORD_RE.findall(ln.text)}
    rows: dict[tuple[float, float], dict[float, list[_Line]]] = {}
    for (lx, rx, top, bottom), members in cells.items():
        rows.setdefault((top, bottom), {})[lx] = members
    tables: list[_Table] = []
    current: _Table | None = None
    last_bottom = None
    columns: tuple | None = None
    for top, bottom in sorted(rows, key=lambda k: -k[0]):
        row = rows[(top, bottom)]
        # the row's columns from its rules, so that empty cells keep their place
        xs = _columns(rules, (top + bottom) / 2) or tuple(sorted(row))
        texts = [
            _join_texts(
                [
                    ln.text
                    for x in row
                    if abs(x - left) <= 2
                    for ln in sorted(row[x], key=lambda ln: (-ln.y, ln.x0))
                ],
                words,
            )
            for left in xs
        ]
        adjacent = last_bottom is not None and abs(last_bottom - top) < 4
        if current is None or not adjacent or len(xs) != len(columns or ()):
            all_lines = [ln for x in row for ln in row[x]]
            header = all(ln.is_bold() for ln in all_lines)
            current = _Table(
                page,
                min(xs),
                max(ln.x1 for ln in all_lines),
                min(top, OPEN - 1),
                [],
                False,
            )
            current.header = header and top != OPEN
            current.open_top = top == OPEN
            current.words = words
            tables.append(current)
            columns = xs
        current.rows.append(texts)
        for x in row:
            for ln in row[x]:
                current.sizes[round(ln.size, 1)] += len(ln.text)
        current.open_bottom = bottom == -OPEN
        last_bottom = bottom
    return free, [t for t in tables if t.rows]


def _columns(rules: _Rules, y: float) -> tuple[float, ...]:
    """Left edges of the cells in a row: the vertical rules across it, less the
    rightmost one."""
    xs: list[float] = []
    for x in sorted(round(x) for x, lo, hi in rules.vertical if lo - 2 <= y <= hi + 2):
        if xs and x - xs[-1] <= MIN_CELL:
            xs[-1] = x  # a double rule (a table's border beside its cells'):
            # the inner one is the cell's edge
        else:
            xs.append(x)
    return tuple(xs[:-1])


# --- tables without rules -----------------------------------------------------------

_MARKER_RE = re.compile(
    r"^([•◦▪▫●○■□‣⁃∙·*–-]|\d{1,3}[.)]|[a-zA-Z][.)]|\d+(\.\d+)+\.?)$"
)
_LEADER_RE = re.compile(r"(\.\s?){5}")
_Chunk = tuple[float, float, str]


def _unruled_tables(lines: list[_Line], page: int):
    """Runs of at least three rows of lines whose runs of text (parted by gaps
    wider than a word space) fall into the same two or more columns, columns
    being what stays apart when the rows' runs are laid over each other (left,
    centred or right aligned alike), become tables; the other lines are
    returned. Prose, whose lines fill the width, leaves no gap; lists, code
    and two-column pages are told apart by their first column, font and fill."""
    candidates = [ln for ln in lines if ln.box is None]  # code in a box aside
    rows = _baseline_rows(candidates)
    words = {w.lower() for ln in lines for w in _WORD_RE.findall(ln.text)}
    tables: list[_Table] = []
    taken: set[int] = set()
    i = done = 0
    while i < len(rows):
        end, columns = _run(rows, i)
        start = _run_start(rows, i, done, columns)
        if start < i:  # the columns with the rows above
            spans = [c[:2] for row in rows[start:end] for c in _row_chunks(row)]
            columns = _merged(spans, _text_size(rows, i))
        table = _unruled_table(rows[start:end], columns, page, words)
        if table is None:
            # past a long run (columns of text, a list): each row is looked at a
            # bounded number of times, and the work stays linear
            i = end - 1 if end - i > LONG_RUN else i + 1
            continue
        tables.append(table)
        taken.update(id(ln) for row in rows[start:end] for ln in row)
        i = done = end
    return [ln for ln in lines if id(ln) not in taken], tables


def _baseline_rows(lines: list[_Line]) -> list[list[_Line]]:
    """The lines grouped by baseline, top to bottom, each row left to right."""
    rows: list[list[_Line]] = []
    for ln in sorted(lines, key=lambda ln: -ln.y):
        if rows and abs(rows[-1][0].y - ln.y) <= 0.35 * max(ln.size, rows[-1][0].size):
            rows[-1].append(ln)
        else:
            rows.append([ln])
    for row in rows:
        row.sort(key=lambda ln: ln.x0)
    return rows


def _row_chunks(row: list[_Line]) -> list[_Chunk]:
    return [chunk for ln in row for chunk in ln.chunks() if chunk[2]]


def _merged(spans: list[tuple[float, float]], size: float) -> list[tuple[float, float]]:
    """Spans merged where they overlap or leave less than a column gap: what
    stays apart are the columns."""
    out: list[tuple[float, float]] = []
    for x0, x1 in sorted(spans):
        if out and x0 - out[-1][1] < COLUMN_GAP_EMS * size:
            out[-1] = (out[-1][0], max(out[-1][1], x1))
        else:
            out.append((x0, x1))
    return out


def _run(rows: list[list[_Line]], i: int) -> tuple[int, list[tuple[float, float]]]:
    """The end of the run of rows from `i` that keeps its columns apart (a row
    that bridges two of them, a larger step down or another font size ends it),
    and the columns."""
    first = _row_chunks(rows[i])
    size = _text_size(rows, i)
    columns = _merged([(x0, x1) for x0, x1, _ in first], size)
    if len(columns) < 2 or _mixed_sizes(rows[i], size):
        # a heading beside a line of text: a page's columns, not a table's
        return i + 1, columns
    bottom = min(ln.y for ln in rows[i])
    code = _code_row(rows[i])
    steps: list[float] = []
    end = i + 1
    while end < len(rows):
        row = rows[end]
        step = bottom - max(ln.y for ln in row)
        usual = statistics.median(steps) + 0.6 * size if steps else 0
        limit = max(usual, 2.2 * size if len(steps) < 2 else 1.9 * size)
        if step > limit or _mixed_sizes(row, size) or _code_row(row) != code:
            break
        spans = [(x0, x1) for x0, x1, _ in _row_chunks(row)]
        merged = _merged(columns + spans, size)
        if len(merged) < len(columns):
            break
        columns = merged
        steps.append(step)
        bottom = min(ln.y for ln in row)
        end += 1
    return end, columns


def _code_row(row: list[_Line]) -> bool:
    """A row of code alone (a code block's line, whatever its size), not a row
    of a table's cells; a header row of code cells is set in bold."""
    return all(ln.is_mono() and not ln.is_bold() for ln in row)


def _mixed_sizes(row: list[_Line], size: float) -> bool:
    """Whether a line of the row is set in another size than `size`. Cells in a
    code font may be set somewhat smaller than the text, beside cells of text
    or in bold (a header row); a row of code alone is a code block's line."""
    code_cells = any(ln.is_bold() or not ln.is_mono() for ln in row)
    return any(
        not (code_cells and ln.is_mono() and 0.75 * size <= ln.size <= size)
        and abs(ln.size - size) > 0.1 * size
        for ln in row
    )


def _text_size(rows: list[list[_Line]], i: int) -> float:
    """The text size of row `i`: of its first line not in a code font, else of
    the next row's (a header row of code-font cells above rows of text)."""
    for row in rows[i : i + 2]:
        for ln in row:
            if not ln.is_mono():
                return ln.size
    return rows[i][0].size


def _run_start(rows: list[list[_Line]], i: int, done: int, columns) -> int:
    """The first row of the run that row `i` starts: the line or two above it
    of a header cell that wraps (centred, it begins higher than the others)."""
    size = _text_size(rows, i)
    first = max(done, i - 2, 0)
    while (
        i > first
        and min(ln.y for ln in rows[i - 1]) - max(ln.y for ln in rows[i])
        <= WRAP_EMS * size
        and not _mixed_sizes(rows[i - 1], size)
        and _code_row(rows[i - 1]) == _code_row(rows[i])
        and len(_merged(columns + [c[:2] for c in _row_chunks(rows[i - 1])], size))
        == len(columns)
    ):
        i -= 1
    return i


def _unruled_table(
    rows: list[list[_Line]], columns: list[tuple[float, float]], page: int, words
) -> _Table | None:
    """The table the rows make, or None when they do not make one."""
    if len(rows) < 3 or len(columns) < 2:
        return None
    if all(ln.is_mono() for row in rows for ln in row):
        return None  # code aligned in columns, not a table
    cells: list[dict[int, list[str]]] = []  # per line row: column -> texts
    for row in rows:
        placed: dict[int, list[str]] = {}
        for x0, x1, text in _row_chunks(row):
            k = next(k for k, (c0, c1) in enumerate(columns) if c0 - 1 <= x0 <= c1)
            placed.setdefault(k, []).append(text)
        cells.append(placed)
    if sum(len(placed) >= 2 for placed in cells) < 3:
        return None
    firsts = [" ".join(placed[0]) for placed in cells if 0 in placed]
    if all(_MARKER_RE.match(text) for text in firsts):
        return None  # a list (markers, items) or contents (section numbers)
    if any(
        _LEADER_RE.search(t) for placed in cells for ts in placed.values() for t in ts
    ):
        return None  # a table of contents: titles and pages joined by dots
    if _prose_columns(rows, columns):
        return None
    groups = _table_rows(rows, cells, len(columns))
    table_rows: list[list[list[str]]] = []
    for group in groups:
        table_rows.append([[] for _ in columns])
        for r in group:
            for k, texts in cells[r].items():
                table_rows[-1][k].extend(texts)
    first_lines = [ln for r in groups[0] for ln in rows[r]]
    table = _Table(
        page,
        columns[0][0],
        columns[-1][1],
        max(ln.top for ln in first_lines),
        [[_join_texts(texts, words) for texts in row] for row in table_rows],
        all(ln.is_bold() for ln in first_lines),
    )
    table.words = words
    for row in rows:
        for ln in row:
            table.sizes[round(ln.size, 1)] += len(ln.text)
    return table


def _table_rows(
    rows: list[list[_Line]], cells: list[dict[int, list[str]]], width: int
) -> list[list[int]]:
    """The rows of lines that make each table row. A cell's text wraps over
    lines one line step apart; rows stand further apart (their cells'
    padding). The wrapped lines of each column make a cell, and cells that
    overlap in height make a row, whether the row's cells are aligned to its
    top or centred in it. Without wrapped cells every row of lines is a row."""
    if all(0 in placed for placed in cells):
        return [[r] for r in range(len(rows))]
    size = statistics.median(ln.size for row in rows for ln in row)
    bottoms = [min(ln.y for ln in row) for row in rows]
    tops = [max(ln.top for ln in row) for row in rows]
    bold = [all(ln.is_bold() for ln in row) for row in rows]  # a header's cells
    blocks: list[list[int]] = []
    for k in range(width):
        block: list[int] = []
        for r in (r for r, placed in enumerate(cells) if k in placed):
            if block and (
                bottoms[block[-1]] - bottoms[r] > WRAP_EMS * size
                or bold[block[-1]] != bold[r]
            ):
                blocks.append(block)
                block = []
            block.append(r)
        if block:
            blocks.append(block)
    blocks.sort(key=lambda block: -tops[block[0]])
    groups: list[set[int]] = []
    low = 0.0
    for block in blocks:
        if groups and tops[block[0]] > low + 0.1 * size:
            groups[-1].update(block)
            low = min(low, bottoms[block[-1]])
        else:
            groups.append(set(block))
            low = bottoms[block[-1]]
    if len(groups) < 2:  # no telling rows apart by height: a row starts in column 1
        starts = [r for r, placed in enumerate(cells) if 0 in placed or r == 0]
        ends = [*starts[1:], len(rows)]
        return [list(range(a, b)) for a, b in zip(starts, ends, strict=True)]
    return [sorted(group) for group in groups]


def _prose_columns(rows: list[list[_Line]], columns) -> bool:
    """Whether the columns are a page's columns of running text: wide, and
    their lines fill them (a table's cells vary in length)."""
    size = _text_size(rows, 0)
    for c0, c1 in columns:
        if c1 - c0 < PROSE_COLUMN_EMS * size:
            return False
        widths = [
            x1 - x0
            for row in rows
            for x0, x1, _ in _row_chunks(row)
            if c0 - 1 <= x0 <= c1
        ]
        if not widths or statistics.median(widths) < 0.75 * (c1 - c0):
            return False
    return True


# --- running headers and footers ---------------------------------------------------


def _margin_key(line: _Line, height: float) -> str | None:
    """Running lines repeat with the same words (digits aside), size and place."""
    text = re.sub(r"\d+", "#", clean(line.text).lower())
    return f"{round(line.size * 2)} {round(line.y / 5)} {text}"


_FOLIO_RE = re.compile(r"^(\d{1,4})\s+\S.*|.*\S\s+(\d{1,4})$")


def _margin_rows(lines: list[_Line]) -> dict[int, str]:
    """The text of each row of a page's margin lines, left to right."""
    rows: dict[int, list[_Line]] = {}
    for ln in lines:
        rows.setdefault(round(ln.y), []).append(ln)
    return {y: " ".join(ln.text for ln in sorted(row, key=lambda ln: ln.x0))
            for y, row in rows.items()}  # fmt: skip


def _folio_offset(text: str, index: int) -> int | None:
    """A row's leading or trailing number less the page's index, if any."""
    found = _FOLIO_RE.fullmatch(text.strip())
    return found and int(found.group(1) or found.group(2)) - index


def _drop_running_lines(pages) -> int:
    """Drop lines of the top and bottom margins repeated on many pages, and page
    numbers there; return how many lines were dropped."""
    tops = [max((ln.top for ln in lines), default=0) for lines, _ in pages]
    bottoms = [min((ln.y for ln in lines), default=0) for lines, _ in pages]
    height = max(tops, default=0) - min(bottoms, default=0) or 1

    def in_margin(line: _Line, i: int) -> bool:
        return (
            line.top >= tops[i] - MARGIN_SHARE * height
            or line.y <= bottoms[i] + MARGIN_SHARE * height
        )

    seen: Counter[str] = Counter()
    for i, (lines, _) in enumerate(pages):
        seen.update({_margin_key(ln, height) for ln in lines if in_margin(ln, i)})
    threshold = max(2, len(pages) // 2) if len(pages) > 1 else 10**9
    # Running heads that change by chapter ("Chapter 2: Naming 3") repeat on few
    # pages, but carry the page number: its offset to the page's index recurs.
    sizes: Counter[float] = Counter()
    for lines, _ in pages:
        for ln in lines:
            sizes[round(ln.size, 1)] += len(ln.text)
    body = sizes.most_common(1)[0][0] if sizes else 0.0
    # no bigger than the body text: a chapter's heading ("2 Naming") is no folio
    rows = [_margin_rows([ln for ln in lines if in_margin(ln, i)
                          and ln.size <= body * 1.05])
            for i, (lines, _) in enumerate(pages)]  # fmt: skip
    offsets = Counter(
        off
        for i, page_rows in enumerate(rows)
        for off in {_folio_offset(text, i) for text in page_rows.values()}
        if off is not None
    )
    folios = {off for off, n in offsets.items() if n >= 3}
    removed = 0
    for i, (lines, _) in enumerate(pages):

        def running(ln: _Line, i: int = i) -> bool:
            return in_margin(ln, i) and bool(
                seen[_margin_key(ln, height)] >= threshold
                or _PAGE_NUMBER_RE.match(ln.text)
                or _folio_offset(rows[i].get(round(ln.y), ""), i) in folios
            )

        # Only the rows between the page's edge and its body: walking in from
        # the top and from the bottom, a row that is not all running (the page
        # number beside a line of text aside) ends the walk, so body text
        # repeated at the same place on two pages stays.
        drop: set[int] = set()
        baseline_rows = _baseline_rows(lines)
        for walk in (baseline_rows, baseline_rows[::-1]):
            for row in walk:
                found = [ln for ln in row if running(ln)]
                drop.update(id(ln) for ln in found)
                if len(found) < len(row):
                    break
        removed += len(drop)
        lines[:] = [ln for ln in lines if id(ln) not in drop]
    return removed


# --- reading order ------------------------------------------------------------------


def _reading_order(lines: list[_Line], tables: list[_Table]) -> list[_Line | _Table]:
    """Top to bottom; where two columns run side by side, the left one first."""
    items: list[_Line | _Table] = [*lines, *tables]
    if not items:
        return []
    x0 = min(it.x0 for it in items)
    x1 = max(it.x1 for it in items)
    mid = (x0 + x1) / 2
    items.sort(key=lambda it: (-it.top, it.x0))

    def side(it) -> str:
        if it.x1 <= mid + 2:
            return "left"
        if it.x0 >= mid - 2:
            return "right"
        return "full"

    ordered: list[_Line | _Table] = []
    band: list[_Line | _Table] = []

    def flush() -> None:
        lefts = [it for it in band if side(it) == "left"]
        rights = [it for it in band if side(it) == "right"]
        if (
            len(lefts) >= 2
            and len(rights) >= 2
            and _fills(lefts, mid - x0)
            and _fills(rights, x1 - mid)
        ):
            ordered.extend(lefts + rights)
        else:
            ordered.extend(band)
        band.clear()

    for it in items:
        if side(it) == "full":
            flush()
            ordered.append(it)
        else:
            band.append(it)
    flush()
    return ordered


def _fills(items: list, width: float) -> bool:
    """Whether a half of the page holds a column of running text: lines that
    fill it, two at least (headings, list items and a paragraph's last line
    in it are short; the cells of a table without rules all are)."""
    return sum(it.x1 - it.x0 >= 0.6 * width for it in items) >= 2


# --- lines -> Markdown blocks ------------------------------------------------------


class _Assembler:
    def __init__(self, writer: Writer, pages: list[list[_Line | _Table]]) -> None:
        self.out = writer
        self.pages = pages
        sizes: Counter[float] = Counter()
        for items in pages:
            for it in items:
                if isinstance(it, _Table):
                    sizes.update(it.sizes)
                elif not it.is_mono():
                    sizes[round(it.size, 1)] += len(it.text)
        self.body = sizes.most_common(1)[0][0] if sizes else 10.0
        self.words = {
            word.lower()
            for items in pages
            for it in items
            if isinstance(it, _Line)
            for word in _WORD_RE.findall(it.text)
        } | {
            w
            for items in pages
            for it in items
            if isinstance(it, _Table)
            for w in it.words
        }
        # each page's right edge of its text (where a line that wraps ends)
        self.rights = [
            max((it.x1 for it in items if isinstance(it, _Line)), default=0.0)
            for items in pages
        ]
        self.bold_prose: set[int] = set()  # the page's lines of bold running text
        self.paragraph: list[_Line] = []
        self.code: list[_Line] = []
        self.item: list[str] | None = None
        self.item_x = 0.0
        self.item_number: int | None = None
        self.item_depth = 0
        self.item_page = 0
        self.list_stack: list[float] = []
        self.last_table: _Table | None = None
        self.prev_heading: _Line | None = None

    def run(self) -> None:
        for k, items in enumerate(self.pages):
            self.bold_prose = self._bold_prose(items)
            for it in items:
                if isinstance(it, _Table):
                    self.table(it)
                else:
                    self.line(it)
            # a paragraph ends at a page break unless the next page's first line
            # goes on with its sentence; a code block may run on
            following = self.pages[k + 1][:1] if k + 1 < len(self.pages) else []
            if not (following and self._carries_over(following[0])):
                self.flush(keep_code=True)
        self.flush()

    # block kinds

    def table(self, table: _Table) -> None:
        self.flush(end_list=True)
        previous = self.last_table
        if (
            previous is not None
            and self.out.blocks
            and self.out.blocks[-1].text.startswith("|")
            and len(previous.rows[0]) == len(table.rows[0])
            and (not table.header or table.rows[0] == previous.rows[0])
        ):
            # a table continued on the next page (its header row repeated or not)
            rows = table.rows[1:] if table.header else list(table.rows)
            cut_row = rows and not rows[0][0] and any(rows[0])
            if rows and (previous.open_bottom and table.open_top or cut_row):
                cut = rows.pop(0)  # one row cut in two by the page break
                previous.rows[-1] = [
                    f"{a} {b}".strip()
                    for a, b in zip(previous.rows[-1], cut, strict=False)
                ]
            previous.rows += rows
            previous.open_bottom = table.open_bottom
            self.out.blocks.pop()
            self.out.counts[
                "tables_with_header" if previous.header else "tables_without_header"
            ] -= 1
            self.out.page = previous.page
            self.out.table(_escaped(previous.rows), previous.header)
            return
        self.out.page = table.page
        self.out.table(_escaped(table.rows), table.header)
        self.last_table = table

    def line(self, line: _Line) -> None:
        text = line.text
        self.out.page = line.page
        wrapped = (self.paragraph or self.item) and line.box is None
        if wrapped and self._follows(line):
            pass  # inline code wrapped onto a line of its own
        elif self._is_code(line):
            if self.code and not _same_code_block(self.code[-1], line):
                self.flush(end_list=True)  # the gap between two code blocks
            self.flush(keep_code=True, end_list=True)
            self.code.append(line)
            return
        if self.code:
            self.flush(end_list=True)
        level = self._heading_level(line)
        if level >= 4 and (
            self._continues(line)
            or self._carries_over(line)
            or id(line) in self.bold_prose
        ):
            level = 0  # bold running text, or a bold end of a sentence wrapped
        if level:
            self.flush(end_list=True)
            self.last_table = None
            last = self.out.blocks[-1] if self.out.blocks else None
            prefix = "#" * level + " "
            if (
                last is not None
                and last.text.startswith(prefix)
                and self.prev_heading is not None
                and self._follows(line, self.prev_heading)
            ):  # a heading wrapped over two lines
                last.text += " " + escape(text)
            else:
                self.out.heading(level, escape(text))
            self.prev_heading = line
            return
        self.prev_heading = None
        marker = _BULLET_RE.match(text) or _NUMBER_RE.match(text)
        if marker:
            self.flush()
            self._start_item(line, marker)
            return
        goes_on = self._follows(line) or self._carries_over(line)
        if self.item is not None and line.x0 >= self.item_x - 2 and goes_on:
            self.item.append(text)
            self.prev = line
            return
        if self.paragraph and not goes_on:
            self.flush()
        if self.item is not None:
            self.flush(end_list=True)
        self.paragraph.append(line)
        self.prev = line

    def _is_code(self, line: _Line) -> bool:
        """Monospaced, and in a shaded box or no bigger than the body text and
        not bold (a heading in a monospaced font is a heading)."""
        if not line.is_mono() or line.text.startswith("• "):
            return False
        if line.box is not None:
            return True
        return line.size <= self.body * 1.05 and not line.is_bold()

    def _heading_level(self, line: _Line) -> int:
        ratio = line.size / self.body
        if len(line.text) > 200:
            return 0
        if ratio >= 1.8:
            return 1
        if ratio >= 1.35:
            return 2
        if ratio >= 1.11:  # 11 pt text beside tables in 10 pt (1.1) is text
            return 3
        # a short bold line of its own: levels 4 and 5 (body size and smaller)
        if (
            not line.is_bold()
            or len(line.text) >= TITLE_CHARS
            or line.text.endswith((".", ","))
        ):
            return 0
        if ratio >= 0.95:
            return 4
        return 5 if ratio >= 0.78 else 0

    def _bold_prose(self, items: list[_Line | _Table]) -> set[int]:
        """The ids of a page's lines of bold running text. Bold lines of body
        size look like headings (levels 4 and 5); they are text when their block
        (the bold lines at line spacing) is too long for a title or reads as a
        sentence, or when the block's last line fills the width and a line in
        regular weight starting with a lowercase word goes on from it at line
        spacing (a paragraph opening with a bold phrase). A title wrapped over
        two lines stays one. One pass: each line joins one block."""
        prose: set[int] = set()
        block: list[_Line] = []
        chars, sentence, text = 0, False, False
        for it in [*items, None]:
            line = it if isinstance(it, _Line) and not self._is_code(it) else None
            if line is not None and self._bold_body(line):
                if block and not self._follows(line, block[-1]):
                    block, chars, sentence, text = [], 0, False, False
                tail = block[-1].text[-3:] + " " if block else ""
                sentence = sentence or bool(_SENTENCE_RE.search(tail + line.text))
                chars += len(line.text) + 1
                block.append(line)
                text = text or (
                    len(block) > 1
                    and (
                        sentence
                        or chars > TITLE_CHARS
                        or line.text.endswith(_SENTENCE_ENDS + (":",))
                    )
                )
                if text:
                    prose.update(id(ln) for ln in block)
                    block = [line]  # counted: only its last line is looked at
                continue
            if block and line is not None and self._runs_into(block[-1], line):
                prose.update(id(ln) for ln in block)
            block, chars, sentence, text = [], 0, False, False
        return prose

    def _bold_body(self, line: _Line) -> bool:
        """Bold, about the body text's size: a heading of level 4 or 5 when
        short and alone."""
        return line.is_bold() and 0.78 <= line.size / self.body < 1.1

    def _runs_into(self, bold: _Line, line: _Line) -> bool:
        """Whether the sentence of a bold line as wide as the text goes on in
        `line`, set under it at line spacing."""
        return (
            line.text[:1].islower()
            and self._follows(line, bold)
            and bold.x1 - bold.x0 >= 0.85 * (line.x1 - line.x0)
        )

    def _carries_over(self, line: _Line) -> bool:
        """Whether `line`, the first on its page, goes on with the open paragraph
        or list item that the previous page ended: same size and left edge, the
        last line there filling the width (it wraps) and its sentence unfinished,
        going on with a lowercase word here."""
        prev = getattr(self, "prev", None)
        if not (self.paragraph or self.item) or prev is None:
            return False
        if not isinstance(line, _Line) or line.page != prev.page + 1:
            return False
        if self.item is not None:  # under the item's text, past its marker
            aligned = self.item_x - 2 <= line.x0 <= self.item_x + 3 * line.size
        else:  # under the paragraph's text (its first line may be indented)
            aligned = line.x0 - 2 <= prev.x0 <= line.x0 + 2 * line.size
        return (
            aligned
            and prev.x1 >= self.rights[prev.page - 1] - 6 * prev.size
            and line.box is None
            and abs(prev.size - line.size) < 1
            and not prev.text.endswith(_SENTENCE_ENDS + (":",))
            and line.text[:1].islower()
            and not line.is_mono()
        )

    def _continues(self, line: _Line) -> bool:
        """Whether `line` goes on with the open paragraph or list item: set at
        line spacing under a line that does not end its sentence (a bold phrase
        wrapped onto a line of its own looks like a body-size heading)."""
        prev = getattr(self, "prev", None)
        return bool(
            (self.paragraph or self.item)
            and prev is not None
            and self._follows(line)
            and not prev.text.rstrip().endswith((".", ":", "!", "?"))
        )

    def _follows(self, line: _Line, prev: _Line | None = None) -> bool:
        prev = prev or getattr(self, "prev", None)
        if prev is None or prev.page != line.page:
            return False
        gap = prev.y - line.y
        return (
            0 < gap <= 1.75 * max(prev.size, line.size)
            and abs(prev.size - line.size) < 1
        )

    def _start_item(self, line: _Line, marker: re.Match) -> None:
        x = line.x0
        prev = getattr(self, "prev", None)
        if (
            self.list_stack
            and prev is not None
            and prev.page == line.page
            and line.y > prev.top
            and x > self.list_stack[0] + 3
        ):  # the list goes on at the top of the next column, at its first level
            shift = x - self.list_stack[0]
            self.list_stack = [level + shift for level in self.list_stack]
        while self.list_stack and x < self.list_stack[-1] - 3:
            self.list_stack.pop()
        if not self.list_stack or x > self.list_stack[-1] + 3:
            self.list_stack.append(x)
        self.item_depth = len(self.list_stack) - 1
        numbered = marker.re is _NUMBER_RE
        self.item_number = int(marker.group(1)) if numbered else None
        self.item = [marker.group(2)]
        self.item_x = x
        self.item_page = line.page
        self.prev = line

    def flush(self, keep_code: bool = False, end_list: bool = False) -> None:
        page = self.out.page
        if self.paragraph:
            self.out.page = self.paragraph[0].page  # where it starts
            text = _join_texts([ln.text for ln in self.paragraph], self.words)
            self.out.paragraph(escape(text))
            self.paragraph = []
        if self.item is not None:
            self.out.page = self.item_page
            text = _join_texts(self.item, self.words)
            self.out.item(self.item_depth, escape(text), self.item_number)
            self.item = None
        self.out.page = page
        if end_list:
            self.list_stack = []
            self.out.end_list()
        if self.code and not keep_code:
            self.out.code(_code_text(self.code))
            self.code = []
            self.last_table = None


def _escaped(rows: list[list[str]]) -> list[list[str]]:
    """A table's cells as text of the document: Markdown markup in them escaped
    (the reader adds the table's own)."""
    return [[escape(cell) for cell in row] for row in rows]


def _same_code_block(prev: _Line, line: _Line) -> bool:
    if prev.page != line.page:
        return prev.box is not None and line.box is not None
    if prev.box is not None or line.box is not None:
        return prev.box == line.box
    return 0 < prev.y - line.y <= 2.6 * max(prev.size, line.size)


_WORD_RE = re.compile(r"[^\W_]+(?:-[^\W_]+)*")
_LAST_WORD_RE = re.compile(r"(-?)([^\W_]+)-$")
_FIRST_WORD_RE = re.compile(r"^([^\W_]+)")


def _join_texts(texts: list[str], words: set[str] | frozenset = frozenset()) -> str:
    """Lines joined with spaces; a word broken at a hyphen at a line end is
    joined again. The hyphen is dropped (hyphenation undone) unless the
    document spells the word with it elsewhere and never without (small-batch),
    or the word already holds a hyphen (denial-of-service: hyphenation leaves
    such words whole); a hyphen after a digit is kept (2-weeks)."""
    out = last = ""
    for text in texts:
        left = _LAST_WORD_RE.search(last)  # the last line only: linear work
        last = text
        right = _FIRST_WORD_RE.match(text)
        if left and right and right.group(1)[:1].islower():
            a, b = left.group(2).lower(), right.group(1).lower()
            hyphenated = f"{a}-{b}" in words and f"{a}{b}" not in words
            if hyphenated or left.group(1) or not a[-1:].isalpha():
                out += text  # a compound that happens to break at its hyphen
            else:
                out = out[:-1] + text  # hyphenation at a line end undone
        else:
            out = f"{out} {text}" if out else text
    return out


def _code_text(lines: list[_Line]) -> str:
    left = min(ln.x0 for ln in lines)
    widths = [(ln.x1 - ln.x0) / len(ln.text) for ln in lines if len(ln.text) > 3]
    char = statistics.median(widths) if widths else 6.0
    out = []
    for prev, ln in zip([None, *lines], lines, strict=False):
        if prev is not None and prev.page == ln.page:
            step = prev.y - ln.y
            out += [""] * max(0, min(round(step / (1.2 * ln.size)) - 1, 3))
        indent = round((ln.x0 - left) / char) if char > 0 else 0
        out.append(" " * max(0, min(indent, 80)) + "".join(ln.chars).strip())
    return "\n".join(out)
