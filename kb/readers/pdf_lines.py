"""A PDF page's characters -> lines, and the drawn shapes around them (pypdfium2).

`page_lines`: characters with their positions, sizes and fonts grouped into
lines, split at wide gaps and at vertical rules. A line knows its size (its
text's, inline code aside), how much of it is bold or monospaced (a font's
advance widths measured on the page, not its name), the shaded box it sits in,
and its runs of text parted by gaps wider than a word space (the cells of a
table without rules). `page_rules`: the page's thin drawn lines and rectangles
(table rules, bullets drawn as shapes, code blocks' boxes). Shared by the later
stages: `baseline_rows` (lines grouped by baseline) and `join_texts` (lines
joined, hyphenation at line ends undone).
"""

from __future__ import annotations

import ctypes
import math
import re
from collections import Counter
from dataclasses import dataclass, field

import pypdfium2 as pdfium
import pypdfium2.raw as raw

from kb.readers.writer import SURROGATE_RE

GAP_EMS = 1.5  # a horizontal gap wider than this many font sizes splits a line
CHUNK_EMS = 0.6  # a gap wider than this (a word space is ~0.3) may part two cells
OPEN = 10**6  # the missing edge of a table row cut by a page break
FIXED_PITCH = 1  # PDF font descriptor flags
FORCE_BOLD = 1 << 18
# A list item's marker: bullets and dashes (the em dash of French lists), and
# the private-use codes of Symbol's and Wingdings' bullets that Word and
# LibreOffice write (U+F0B7, U+F06C, U+F0A7, U+F0D8, U+F0FC, U+F076)
BULLETS = "•◦▪▫●○■□‣⁃∙·*–—\uf0b7\uf06c\uf0a7\uf0d8\uf0fc\uf076-"  # "-" last
BULLET_RE = re.compile(rf"^([{BULLETS}])\s+(.*)$")
# A bold face by its name: the words of most, TeX's Computer Modern and EC
# names (CMBX10 "bold extended", CMB10, CMSSBX10, SFBX1000) and URW's
# "Medi" (NimbusRomNo9L-Medi), after a subset's "ABCDEF+" tag
_BOLD_RE = re.compile(
    r"bold|black|heavy|semibold|demi|medi(?:um)?(?![a-z])"
    r"|(?:^|\+)(?:CM(?:SS)?BX|CMB\d|SFBX|SFSX|ECBX|ECSX)",
    re.I,
)
# characters narrower than most in any proportional font, as wide as the others
# in a monospaced one
_NARROW = frozenset("ijlItfr.,:;'!|()[]")
WIDTH_EMS = 0.03  # advances this close (in ems) are the same width
MONO_SHAPES = 6  # characters of one width, none narrow, that make a font monospaced
MEASURED = 500  # characters of a font measured per page: enough to tell


@dataclass
class Line:
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

    def rest(self, k: int) -> Line:
        """The line from its `k`th run of text on (a definition after its
        term). Of its bold and monospaced characters, those of the runs left
        out are taken to be the first: a term is set apart by its font."""
        cut = self.starts[k]
        left = sum(not ch.isspace() for ch in self.chars[:cut])
        return Line(
            self.page,
            self.spans[k][0],
            self.x1,
            self.y,
            self.size,
            chars=self.chars[cut:],
            bold=max(0, self.bold - left),
            mono=max(0, self.mono - left),
            sizes=Counter(self.sizes),
            faces=Counter(self.faces),
            cell=self.cell,
            box=self.box,
            starts=[i - cut for i in self.starts[k:]],
            spans=[list(span) for span in self.spans[k:]],
        )

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
    # of a character's box, per em, by character: glyphs differ ("$", braces
    # and parentheses stand taller than letters in TeX's fonts)
    heights: dict[str, float] = field(default_factory=dict)

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
class Rules:
    """Drawn shapes that carry structure: table rules and list bullets."""

    vertical: list[tuple[float, float, float]] = field(default_factory=list)
    horizontal: list[tuple[float, float, float]] = field(default_factory=list)
    bullets: list[tuple[float, float]] = field(default_factory=list)
    boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    pages: set[int] = field(default_factory=set)  # boxes the size of the page

    def box(self, line: Line) -> int | None:
        """The shaded box (a code block's background) the line sits in."""
        for i, (x0, y0, x1, y1) in enumerate(self.boxes):
            if x0 - 1 <= line.x0 <= x1 and y0 - 1 <= line.y <= y1 + 1:
                return i
        return None

    def bullet_before(self, line: Line) -> bool:
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

    def cell(self, line: Line) -> tuple[float, float, float, float] | None:
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


# The marks a listing sets at the right margin where it wraps a long line of
# code onto the next (dblatex's "←-"), in the text font.
# A bare arrow may be a cell's text (a table of arrows): not one of them.
_CONTINUATION_MARKS = frozenset(("←-", "↪", "\u2926", "\u21a9"))


def without_continuation_marks(lines: list[Line]) -> list[Line]:
    """The lines without the marks of a wrapped line of code: beside a line
    of code on its baseline, such a mark broke the listing in two (QA over
    the Debian Reference's French PDF: a script read as two code blocks with
    "←-" between them). The line it wraps goes on on the next line."""
    code = [ln for ln in lines if ln.is_mono()]
    return [
        ln
        for ln in lines
        if ln.text not in _CONTINUATION_MARKS
        or not any(abs(c.y - ln.y) < 0.5 * ln.size and c.x1 <= ln.x0 for c in code)
    ]


def page_rules(page: pdfium.PdfPage) -> Rules:
    """Thin drawn lines and rectangles: the rules of ruled tables."""
    rules = Rules()
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
    rules.boxes = _joined_boxes(rules.boxes, rules.pages)
    rules.vertical += _outer_rules(rules.vertical, rules.horizontal)
    return rules


def _outer_rules(
    vertical: list[tuple[float, float, float]],
    horizontal: list[tuple[float, float, float]],
) -> list[tuple[float, float, float]]:
    """The outer edges of tables drawn with rules between their columns only
    (dblatex's, as Debian's manuals are printed): where the rules above and
    below a row run on past its first or last inner rule, the row's cells end
    where they end. Without them the first and last columns were read as
    another table, paired with each other (the Debian Reference's "pop3 |
    995" where the page shows pop3 110, pop3s 995)."""
    spans: dict[int, list[list[float]]] = {}
    for y, a, b in sorted(horizontal, key=lambda r: (round(r[0]), r[1])):
        row = spans.setdefault(round(y), [])
        if row and a <= row[-1][1] + 2:
            row[-1][1] = max(row[-1][1], b)
        else:
            row.append([a, b])
    # the rules by their rounded x: a page may hold thousands of cell edges
    at: dict[int, list[tuple[float, float]]] = {}
    for x, lo, hi in vertical:
        at.setdefault(round(x), []).append((lo, hi))

    def ruled(edge: float, lo: float, hi: float) -> bool:
        return any(
            e_lo <= lo + 2 and e_hi >= hi - 2
            for x in range(round(edge) - 2, round(edge) + 3)
            for e_lo, e_hi in at.get(x, ())
        )

    added: list[tuple[float, float, float]] = []
    for x, lo, hi in vertical:
        for y in (round(lo), round(hi)):
            near = spans.get(y) or spans.get(y + 1) or spans.get(y - 1) or []
            for a, b in near:
                if not a + MIN_OUTER < x < b - MIN_OUTER:
                    continue
                for edge in (a, b):
                    if not ruled(edge, lo, hi):
                        added.append((edge, lo, hi))
                        at.setdefault(round(edge), []).append((lo, hi))
    return added


MIN_OUTER = 8  # points between a table's edge and its first inner rule


def _joined_boxes(
    boxes: list[tuple[float, float, float, float]], pages: set[int]
) -> list[tuple[float, float, float, float]]:
    """Boxes of one width stacked without a gap, joined: dblatex shades each
    line of a listing with a rectangle of its own, and a listing is one block
    of code, not one per line. The page-sized boxes (`pages`) stay first and
    alone, so their indexes hold."""
    kept = [box for i, box in enumerate(boxes) if i in pages]
    rest = sorted(
        (box for i, box in enumerate(boxes) if i not in pages), key=lambda b: -b[3]
    )
    whole = len(kept)
    for x0, y0, x1, y1 in rest:
        last = kept[-1] if len(kept) > whole else None
        if (
            last is not None
            and abs(last[0] - x0) <= 1
            and abs(last[2] - x1) <= 1
            and -1 <= last[1] - y1 <= 2
        ):
            kept[-1] = (last[0], min(last[1], y0), last[2], last[3])
        else:
            kept.append((x0, y0, x1, y1))
    pages.clear()
    pages.update(range(whole))
    return kept


def page_lines(textpage: pdfium.PdfTextPage, page: int, rules: Rules) -> list[Line]:
    loose = raw.FS_RECTF()
    matrix = raw.FS_MATRIX()
    flags = ctypes.c_int()
    fonts: dict[bytes, _Font] = {}
    name = ctypes.create_string_buffer(256)
    lines: list[Line] = []
    line: Line | None = None
    space = False
    last_x0 = 0.0
    get_box, get_font = raw.FPDFText_GetLooseCharBox, raw.FPDFText_GetFontInfo
    get_origin = raw.FPDFText_GetCharOrigin
    origin_x, origin_y = ctypes.c_double(), ctypes.c_double()
    get_size, get_matrix = raw.FPDFText_GetFontSize, raw.FPDFText_GetMatrix
    for i, ch in _characters(textpage):
        if ch in "\ufffe\x02\u2212":
            # pdfium's mark for a hyphen that ends a line, and the minus sign
            # TeX sets for the hyphen-minus of code and options in a Texinfo
            # manual (`${parameter:−word}`, `−r`): written as it is typed
            ch = "-"
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
        # (1.36 em in Noto Sans Mono, 1.11 em in Liberation Serif) and by
        # glyph (a line of code opening with "$" read as a bigger heading).
        # The box's height per em is asked of pdfium once per glyph of a font.
        per_em = font.heights.get(ch)
        if per_em is None:
            per_em = 1.15
            if height > 0 and get_matrix(textpage, i, matrix):
                em = get_size(textpage, i) * math.hypot(matrix.c, matrix.d)
                per_em = height / em if em > 0 else 1.15
            font.heights[ch] = per_em
        size = height / per_em or 1.0
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
            # A line's baseline is its first character's origin: the box's
            # bottom moves with the glyph ("-u fd" set lower than the text
            # beside it, and read after it).
            if get_origin(textpage, i, origin_x, origin_y):
                y = origin_y.value
            line = Line(page, x0, x1, y, size, spans=[[x0, x1]])
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
        if rules.bullets and rules.bullet_before(ln) and not BULLET_RE.match(ln.text):
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


def baseline_rows(lines: list[Line]) -> list[list[Line]]:
    """The lines grouped by baseline, top to bottom, each row left to right."""
    rows: list[list[Line]] = []
    for ln in sorted(lines, key=lambda ln: -ln.y):
        if rows and abs(rows[-1][0].y - ln.y) <= 0.35 * max(ln.size, rows[-1][0].size):
            rows[-1].append(ln)
        else:
            rows.append([ln])
    for row in rows:
        row.sort(key=lambda ln: ln.x0)
    return rows


WORD_RE = re.compile(r"[^\W_]+(?:-[^\W_]+)*")
_LAST_WORD_RE = re.compile(r"(-?)([^\W_]+)-$")
_FIRST_WORD_RE = re.compile(r"^([^\W_]+)")


def join_texts(texts: list[str], words: set[str] | frozenset = frozenset()) -> str:
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
