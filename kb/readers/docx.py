"""Word .docx -> canonical Markdown, read from the package's XML with lxml.

Headings come from paragraph styles (Title, Heading 1-9) and outline levels,
lists from the numbering definitions (level -> nesting, format -> bullet or
number), tables take their header from the repeat-header flag (else the first
row), hyperlinks keep their text, inline code (a run in a code character style
such as "Verbatim Char" or "HTML Code", or in a monospaced font) keeps its
backticks, footnotes become a final section named in the document's language
("Footnotes", "Notes", "Примечания").
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass

from django.utils.translation import gettext
from lxml import etree

from kb.readers.reading import ReaderError, Reading
from kb.readers.writer import Repeats, Writer, escape

MAX_RATIO = 20  # uncompressed size over file size: above it, a zip bomb
MAX_UNCOMPRESSED = 200 * 1024 * 1024
# Word's XML compresses well: a small genuine file (python-docx's blank one is
# 37 KB -> 0.8 MB) passes 20x, so the ratio counts only above this size.
RATIO_FLOOR = 8 * 1024 * 1024
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
WP = "http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"
_NS = {"w": W, "wp": WP}
_CODE_STYLE_RE = re.compile(r"source code|code|preformatted|verbatim|macro text", re.I)
_QUOTE_STYLE_RE = re.compile(r"quote|block text", re.I)
# Definition lists: pandoc's "Definition Term" over "Definition" paragraphs, or a
# short paragraph all in bold over an indented one (_Reader.definition_part).
_TERM_STYLE_RE = re.compile(r"^(?:definition|glossary)?\s*term$", re.I)
_DEFINITION_STYLE_RE = re.compile(r"^(?:glossary\s*)?definition(?:\s*text)?$", re.I)
MAX_TERM_WORDS = 12
# Word's "caption" (below a table by default), pandoc's "Table Caption" (above)
_CAPTION_STYLE_RE = re.compile(r"^(?:table\s*)?caption$", re.I)
_MONO_FONT_RE = re.compile(r"courier|consolas|mono|menlo|lucida console", re.I)
_HEADING_STYLE_RE = re.compile(r"^heading\s*([1-9])$", re.I)
# Word's built-in "List Bullet 2", "List Number 3": nesting by style, not ilvl
_LIST_STYLE_RE = re.compile(r"^list\s*(?:bullet|number|continue)?\s*([2-9])$", re.I)
_T, _R = f"{{{W}}}t", f"{{{W}}}r"
_RFONTS, _ASCII = f"{{{W}}}rPr/{{{W}}}rFonts", f"{{{W}}}ascii"
_RPR, _RSTYLE_TAG = f"{{{W}}}rPr", f"{{{W}}}rStyle"
_RFONTS_TAG, _VAL = f"{{{W}}}rFonts", f"{{{W}}}val"
_CHARS = {
    f"{{{W}}}tab": "\t",
    f"{{{W}}}br": "\n",
    f"{{{W}}}cr": "\n",
    f"{{{W}}}noBreakHyphen": "-",
}
_SKIP = {f"{{{W}}}{t}" for t in ("del", "instrText", "delText", "pPr", "rPr")}
_HYPERLINK = f"{{{W}}}hyperlink"
_FOOTNOTE_REF = f"{{{W}}}footnoteReference"
_PICTURES = {f"{{{W}}}drawing", f"{{{W}}}pict"}
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)


def _w(tag: str) -> str:
    return f"{{{W}}}{tag}"


@dataclass
class _Style:
    name: str = ""
    based_on: str = ""
    outline: int | None = None
    num_id: str = ""
    ilvl: int = 0


def read(name: str, data: bytes) -> Reading:
    parts = _unpack(name, data)
    reader = _Reader(name, parts)
    reader.body(_xml(name, parts, "word/document.xml"))
    reader.footnotes()
    text, _ = reader.out.render()
    if not text.strip():
        raise ReaderError(gettext("%(file)s has no text") % {"file": name})
    return Reading(
        text=text,
        summary=reader.out.summary(),
        warnings=reader.warnings,
        structure=reader.out.structure(text),
    )


def _unpack(name: str, data: bytes) -> dict[str, bytes]:
    """The XML parts we read, after checking the archive is not a zip bomb."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            _check_sizes(name, infos, len(data))
            wanted = {
                "word/document.xml",
                "word/styles.xml",
                "word/numbering.xml",
                "word/footnotes.xml",
            }
            return {
                info.filename: archive.read(info)
                for info in infos
                if info.filename in wanted
            }
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise ReaderError(_corrupt(name, exc)) from exc
    except (NotImplementedError, RuntimeError) as exc:  # encrypted or odd entries
        raise ReaderError(
            gettext("%(file)s cannot be unpacked: %(problem)s")
            % {"file": name, "problem": exc}
        ) from exc


def check(name: str, data: bytes) -> None:
    """The quick checks (a readable zip, not a zip bomb), or ReaderError: what an
    upload request can afford; reading the document is for the worker."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            _check_sizes(name, archive.infolist(), len(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise ReaderError(_corrupt(name, exc)) from exc


def _corrupt(name: str, problem: object) -> str:
    return gettext("%(file)s is a corrupt .docx file: %(problem)s") % {
        "file": name,
        "problem": problem,
    }


def _check_sizes(name: str, infos: list[zipfile.ZipInfo], size: int) -> None:
    total = sum(info.file_size for info in infos)
    if total > MAX_UNCOMPRESSED or (total > RATIO_FLOOR and total > MAX_RATIO * size):
        raise ReaderError(
            f"{name} unpacks to {total / 2**20:.1f} MB from "
            f"{size / 2**20:.2f} MB (over {MAX_RATIO}x its size or "
            f"{MAX_UNCOMPRESSED // 2**20} MB): refused as a possible zip bomb"
        )


def _xml(name: str, parts: dict[str, bytes], part: str) -> etree._Element | None:
    if part not in parts:
        if part == "word/document.xml":
            raise ReaderError(
                gettext("%(file)s is not a Word document: no word/document.xml")
                % {"file": name}
            )
        return None
    try:
        return etree.fromstring(parts[part], parser=_PARSER)
    except etree.XMLSyntaxError as exc:
        raise ReaderError(_corrupt(name, f"{part}: {exc}")) from exc


class _Reader:
    def __init__(self, name: str, parts: dict[str, bytes]) -> None:
        self.name = name
        self.parts = parts
        self.out = Writer()
        self.warnings: list[str] = []
        self.styles = _styles(_xml(name, parts, "word/styles.xml"))
        self.formats, self.starts = _numbering(_xml(name, parts, "word/numbering.xml"))
        self.counters: dict[tuple[str, int], int] = {}
        self.footnote_ids: list[str] = []
        self.code: list[str] = []
        self.list_kind: tuple[int, bool] | None = None
        self.code_styles: dict[str, bool] = {}
        self.entry: list[str] = []  # an open definition: its term, its definitions

    # --- body ------------------------------------------------------------------

    def body(self, document: etree._Element) -> None:
        body = document.find(_w("body"))
        if body is None:
            raise ReaderError(
                gettext("%(file)s is not a Word document: it has no body")
                % {"file": self.name}
            )
        self.blocks(body)
        self.flush_code()
        self.flush_definition()

    def blocks(self, parent: etree._Element) -> None:
        caption = None  # a table's caption below it, written above it instead
        for el in parent:
            if el is caption:
                continue
            if el.tag == _w("p"):
                self.paragraph(el)
            elif el.tag == _w("tbl"):
                self.flush_code()
                self.flush_definition()
                self._end_list()
                caption = self._caption_below(el)
                if caption is not None:
                    self.paragraph(caption)
                self.table(el)
            elif el.tag in (_w("sdt"), _w("sdtContent"), _w("customXml")):
                self.blocks(el)

    def paragraph(self, p: etree._Element) -> None:
        style = self._style(p)
        name = style.name if style else ""
        if _CODE_STYLE_RE.search(name) or self._all_mono(p):
            text = self.text(p, inline_code=False)
            if text.strip():
                self.flush_definition()
                self.code.append(text)
            return
        self.flush_code()
        text = self.text(p)
        level = self._heading_level(p, style)
        num_id, ilvl = self._numbering(p, style)
        listed = num_id and self.formats.get((num_id, ilvl), "bullet") != "none"
        if not level and not listed and self.definition_part(p, name, text):
            return
        self.flush_definition()
        if level:
            self._end_list()
            self.out.heading(level, text)
        elif listed:
            fmt = self.formats.get((num_id, ilvl), "bullet")
            number = self._count(num_id, ilvl) if fmt != "bullet" else None
            by_style = _LIST_STYLE_RE.match(name)
            depth = int(by_style.group(1)) - 1 if by_style and not ilvl else ilvl
            kind = (depth, number is None)
            if depth == 0 and self.list_kind not in (None, kind):
                self.out.end_list()  # a numbered list right after a bulleted one
            self.list_kind = kind if depth == 0 else self.list_kind
            self.out.item(depth, text, number)
        elif _QUOTE_STYLE_RE.search(name):
            self._end_list()
            self.out.quote([text])
        elif text.strip():
            self._end_list()
            self.out.paragraph(text)

    def definition_part(self, p: etree._Element, name: str, text: str) -> bool:
        """Whether `p` is a term (its style, or short and all bold over an
        indented paragraph) or the definition of the open one; it is then held
        in self.entry until the definition ends (flush_definition)."""
        if _TERM_STYLE_RE.match(name) or (
            len(text.split()) <= MAX_TERM_WORDS
            and self._all_bold(p)
            and self._is_definition(p.getnext())
        ):
            self.flush_definition()
            self.entry = [text]
            return True
        if self.entry and self._is_definition(p):
            self.entry.append(text)
            return True
        return False

    def _is_definition(self, p: etree._Element | None) -> bool:
        """A paragraph in a definition style, or indented and in no list."""
        if p is None or p.tag != _w("p"):
            return False
        style = self._style(p)
        if style and _DEFINITION_STYLE_RE.match(style.name):
            return True
        indent = p.find(f"{{{W}}}pPr/{{{W}}}ind")
        left = (
            indent.get(_w("left")) or indent.get(_w("start"))
            if indent is not None
            else None
        )
        listed = p.find(f"{{{W}}}pPr/{{{W}}}numPr") is not None
        return _int(left, 0) > 0 and not listed and not self._all_bold(p)

    def _all_bold(self, p: etree._Element) -> bool:
        """Every run with text set in bold (a term without a style)."""
        seen = False
        for run in p.iter(_R):
            if run.find(_T) is None:
                continue
            bold = run.find(f"{{{W}}}rPr/{{{W}}}b")
            if bold is None or bold.get(_VAL) in ("0", "false"):
                return False
            seen = True
        return seen

    def flush_definition(self) -> None:
        if self.entry:
            self._end_list()
            term, *definitions = self.entry
            self.entry = []
            self.out.definition(term, definitions)

    def _caption_below(self, tbl: etree._Element) -> etree._Element | None:
        """The paragraph right after a table when it is in a caption style: the
        table's caption, which chunking reads in the paragraph above a table."""
        after = tbl.getnext()
        if after is None or after.tag != _w("p"):
            return None
        style = self._style(after)
        return after if style and _CAPTION_STYLE_RE.match(style.name) else None

    def _end_list(self) -> None:
        self.out.end_list()
        self.list_kind = None

    def flush_code(self) -> None:
        if self.code:
            self._end_list()
            self.out.code("\n".join(self.code))
            self.code = []

    def text(self, el: etree._Element, inline_code: bool = True) -> str:
        """The element's text; runs of inline code in backticks, unless
        `inline_code` is False (the lines of a code block)."""
        parts: list[str] = []
        self._collect(el, parts, inline_code)
        if not inline_code:
            return "".join(parts)
        escaped: list[str] = []
        for part in parts:
            if type(part) is str:
                part = escape(part)
                if escaped and isinstance(escaped[-1], _Markup):
                    part = re.sub(r"^\(", r"\\(", part)  # "[1](…)" is no link
            escaped.append(part)
        return _with_code_spans(escaped)

    def _collect(
        self, el: etree._Element, parts: list[str], inline_code: bool = True
    ) -> None:
        for child in el:
            tag = child.tag
            if tag == _R and inline_code and self._is_code_run(child):
                run: list[str] = []
                self._collect(child, run, inline_code=False)
                parts.append(_Code("".join(run)))
            elif tag == _T:
                parts.append(child.text or "")
            elif tag in _CHARS:
                parts.append(_CHARS[tag])
            elif tag in _SKIP or not isinstance(tag, str):
                continue
            elif tag == _HYPERLINK:
                self.out.counts["links"] += 1
                self._collect(child, parts, inline_code)
            elif tag == _FOOTNOTE_REF:
                self.footnote_ids.append(child.get(_w("id")) or "")
                parts.append(_Markup(f"[{len(self.footnote_ids)}]"))
            elif tag in _PICTURES:
                self.out.counts["images_dropped"] += 1
                for doc_pr in child.iter(f"{{{WP}}}docPr"):
                    alt = doc_pr.get("descr") or doc_pr.get("title") or ""
                    if alt.strip():
                        parts.append(f" {alt.strip()} ")
            else:  # runs, insertions, fields, smart tags
                self._collect(child, parts, inline_code)

    # --- styles, headings, numbering --------------------------------------------

    def _style(self, p: etree._Element) -> _Style | None:
        style_id = p.find(f"{{{W}}}pPr/{{{W}}}pStyle")
        return (
            self.styles.get(style_id.get(_w("val"), ""))
            if style_id is not None
            else None
        )

    def _inherited(self, style: _Style | None, attr: str):
        seen = 0
        while style is not None and seen < 20:
            value = getattr(style, attr)
            if value not in (None, ""):
                return value
            style = self.styles.get(style.based_on)
            seen += 1
        return None

    def _heading_level(self, p: etree._Element, style: _Style | None) -> int:
        outline = p.find(f"{{{W}}}pPr/{{{W}}}outlineLvl")
        if outline is not None:
            value = _int(outline.get(_w("val")), 9)
            return value + 1 if value < 9 else 0
        if style is not None:
            if style.name.lower() in ("title",):
                return 1
            found = _HEADING_STYLE_RE.match(style.name)
            if found:
                return int(found.group(1))
            value = self._inherited(style, "outline")
            if value is not None and value < 9:
                return value + 1
        return 0

    def _numbering(self, p: etree._Element, style: _Style | None) -> tuple[str, int]:
        num_pr = p.find(f"{{{W}}}pPr/{{{W}}}numPr")
        if num_pr is not None:
            num = num_pr.find(_w("numId"))
            lvl = num_pr.find(_w("ilvl"))
            num_id = num.get(_w("val"), "") if num is not None else ""
            ilvl = _int(lvl.get(_w("val")) if lvl is not None else "0", 0)
            return ("" if num_id == "0" else num_id), min(ilvl, 8)
        num_id = self._inherited(style, "num_id") or ""
        return num_id, (style.ilvl if style else 0)

    def _count(self, num_id: str, ilvl: int) -> int:
        key = (num_id, ilvl)
        value = self.counters.get(key, self.starts.get(key, 1) - 1) + 1
        self.counters[key] = value
        for deeper in range(ilvl + 1, 9):
            self.counters.pop((num_id, deeper), None)
        return value

    def _is_code_run(self, run: etree._Element) -> bool:
        """A run in a code character style (or one based on it) or a
        monospaced font: inline code. Each style's answer is remembered."""
        props = run.find(_RPR)
        if props is None:
            return False
        style_id = props.find(_RSTYLE_TAG)
        if style_id is not None and self._code_style(style_id.get(_VAL, "")):
            return True
        fonts = props.find(_RFONTS_TAG)
        return fonts is not None and bool(_MONO_FONT_RE.search(fonts.get(_ASCII) or ""))

    def _code_style(self, style_id: str) -> bool:
        known = self.code_styles.get(style_id)
        if known is None:
            style, seen, known = self.styles.get(style_id), 0, False
            while style is not None and seen < 20 and not known:
                known = bool(_CODE_STYLE_RE.search(style.name))
                style, seen = self.styles.get(style.based_on), seen + 1
            self.code_styles[style_id] = known
        return known

    def _all_mono(self, p: etree._Element) -> bool:
        """Every run with text set in a monospaced font (code without a style)."""
        seen = False
        for run in p.iter(_R):
            if run.find(_T) is None:
                continue
            fonts = run.find(_RFONTS)
            if fonts is None or not _MONO_FONT_RE.search(fonts.get(_ASCII) or ""):
                return False
            seen = True
        return seen

    # --- tables and footnotes ------------------------------------------------------

    def table(self, tbl: etree._Element) -> None:
        rows: list[list[str]] = []
        repeat_header = False
        merged: dict[int, str] = {}  # text of vertically merged cells, by column
        repeats = Repeats()
        for i, tr in enumerate(tbl.iterchildren(_w("tr"))):
            if i == 0:
                repeat_header = tr.find(f"{{{W}}}trPr/{{{W}}}tblHeader") is not None
            before = tr.find(f"{{{W}}}trPr/{{{W}}}gridBefore")
            skipped = _int(before.get(_VAL), 0) if before is not None else 0
            cells = [""] * min(skipped, 50)  # grid columns the row leaves out
            own = list(tr.iterchildren(_w("tc")))
            for tc in own:
                text = repeats.read(" ".join(self.text(p) for p in tc.iter(_w("p"))))
                merge = tc.find(f"{{{W}}}tcPr/{{{W}}}vMerge")
                below = merge is not None and merge.get(_VAL) != "restart"
                if below:  # the cell above, merged down
                    text = merged.get(len(cells), text)
                span = tc.find(f"{{{W}}}tcPr/{{{W}}}gridSpan")
                width = min(_int(span.get(_VAL), 1), 50) if span is not None else 1
                for i in range(max(width, 1)):  # a merged cell repeats in each column
                    if merge is not None:
                        merged[len(cells)] = text
                    cells.append(repeats.again(text) if i or below else text)
            if len(own) == 1 and not skipped and merge is None and len(cells) > 1:
                cells = cells[:1]  # a group's label, spanning the row
            rows.append(cells)
        if not repeat_header and rows:
            self.warnings.append("a table without a repeat-header row: first row used")
        self.out.table(rows, header=True)

    def footnotes(self) -> None:
        root = _xml(self.name, self.parts, "word/footnotes.xml")
        if root is None or not self.footnote_ids:
            return
        notes = {
            note.get(_w("id")): note
            for note in root.iterchildren(_w("footnote"))
            if note.get(_w("type")) in (None, "normal")
        }
        self._end_list()
        self.out.footnotes_heading()
        refs, self.footnote_ids = self.footnote_ids, []
        for number, note_id in enumerate(refs, start=1):
            note = notes.get(note_id)
            if note is not None:
                text = " ".join(self.text(p) for p in note.iter(_w("p")))
                self.out.item(0, text, number)
        self._end_list()


class _Code(str):
    """The text of one run of inline code."""


class _Markup(str):
    """Markdown the reader writes itself (a footnote reference): not escaped."""


def _with_code_spans(parts: list[str]) -> str:
    """The parts joined, each stretch of adjacent code runs in backticks (as the
    HTML reader writes <code>: none when the code holds a backtick itself), its
    outer spaces left outside."""
    out: list[str] = []
    code: list[str] = []
    for part in [*parts, ""]:
        if isinstance(part, _Code):
            code.append(part)
            continue
        if code:
            joined = "".join(code)
            inner = joined.strip()
            if inner and "`" not in inner:
                lead = joined[: len(joined) - len(joined.lstrip())]
                trail = joined[len(joined.rstrip()) :]
                joined = f"{lead}`{inner}`{trail}"
            else:
                joined = escape(joined)
            out.append(joined)
            code = []
        out.append(part)
    return "".join(out)


def _int(value: str | None, default: int) -> int:
    try:
        return int(value or "")
    except ValueError:
        return default


def _styles(root: etree._Element | None) -> dict[str, _Style]:
    styles: dict[str, _Style] = {}
    if root is None:
        return styles
    for el in root.iterchildren(_w("style")):
        style = _Style()
        name = el.find(_w("name"))
        style.name = name.get(_w("val"), "") if name is not None else ""
        based = el.find(_w("basedOn"))
        style.based_on = based.get(_w("val"), "") if based is not None else ""
        outline = el.find(f"{{{W}}}pPr/{{{W}}}outlineLvl")
        if outline is not None:
            style.outline = _int(outline.get(_w("val")), 9)
        num_pr = el.find(f"{{{W}}}pPr/{{{W}}}numPr")
        if num_pr is not None:
            num = num_pr.find(_w("numId"))
            lvl = num_pr.find(_w("ilvl"))
            style.num_id = num.get(_w("val"), "") if num is not None else ""
            style.ilvl = _int(lvl.get(_w("val")) if lvl is not None else "0", 0)
        styles[el.get(_w("styleId"), "")] = style
    return styles


def _numbering(
    root: etree._Element | None,
) -> tuple[dict[tuple[str, int], str], dict[tuple[str, int], int]]:
    """numFmt and start per (numId, level), from the abstract definitions."""
    formats: dict[tuple[str, int], str] = {}
    starts: dict[tuple[str, int], int] = {}
    if root is None:
        return formats, starts
    abstract: dict[str, dict[int, tuple[str, int]]] = {}
    for el in root.iterchildren(_w("abstractNum")):
        levels = {}
        for lvl in el.iterchildren(_w("lvl")):
            fmt = lvl.find(_w("numFmt"))
            start = lvl.find(_w("start"))
            levels[_int(lvl.get(_w("ilvl")), 0)] = (
                fmt.get(_w("val"), "bullet") if fmt is not None else "bullet",
                _int(start.get(_w("val")) if start is not None else "1", 1),
            )
        abstract[el.get(_w("abstractNumId"), "")] = levels
    for num in root.iterchildren(_w("num")):
        ref = num.find(_w("abstractNumId"))
        levels = abstract.get(ref.get(_w("val"), "") if ref is not None else "", {})
        num_id = num.get(_w("numId"), "")
        for ilvl, (fmt, start) in levels.items():
            formats[(num_id, ilvl)] = fmt
            starts[(num_id, ilvl)] = start
        for override in num.iterchildren(_w("lvlOverride")):
            start = override.find(_w("startOverride"))
            if start is not None:
                ilvl = _int(override.get(_w("ilvl")), 0)
                starts[(num_id, ilvl)] = _int(start.get(_w("val")), 1)
    return formats, starts
