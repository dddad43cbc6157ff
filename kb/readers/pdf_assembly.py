"""A PDF's lines and tables, in reading order -> the canonical Markdown (Writer).

`Assembler` walks the pages once, keeping what is open (a paragraph, a list
item, a code block, the last table) across lines and page breaks, and reads
each line as a heading (font size and weight against the body text; bold
running text, a bold block too long for a title or reading as a sentence, is
no heading), a list item (bullet or number markers, nesting by indentation),
code (monospaced, or in a shaded box) or text of a paragraph (lines joined,
hyphenation undone, going on over a page break when the page's last line
fills the width and its sentence goes on). A table continued on the next page
is joined to the one before it.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass

from kb.readers.pdf_lines import BULLET_RE, WORD_RE, Line, join_texts
from kb.readers.pdf_tables import Table
from kb.readers.writer import MAX_HEADING_LEVEL, Writer, escape

TITLE_CHARS = 120  # bold text of body size this long (a line, or lines at line
# spacing) is running text, not a title
_NUMBER_RE = re.compile(r"^(\d{1,3})[.)]\s+(.*)$")
_SENTENCE_ENDS = (".", ",", ";", "!", "?")
_SENTENCE_RE = re.compile(r"\w[.!?][\"”’)]?\s+[A-Z]")  # one sentence ends, one starts
# what a Texinfo definition's first line ends with, at the right margin
_CATEGORY_RE = re.compile(
    r"\[(?:(?:Library|Special|Instance|Class|User|Generic|Inline|Deffn) )?"
    r"(?:Function|Macro|Variable|Option|Form|Command|Data [Tt]ype|Type|Constant"
    r"|Method|Class|Operator|Procedure|Primitive|Syntax|Record|Structure|Hook)\]"
)
_BRACKETED_RE = re.compile(r"\[[^\[\]]{1,40}\]")  # "[Avertissement]" over a note
SIGNATURE_LINES = 6  # a signature wraps over this many lines at most
# A label and a number or date as its value ("Date de publication :
# 31-01-2024", "Version: 2.1"): a line of a title page, in whatever size, never
# the title of a part ("Chapter 3: Installation" has words after its colon).
_FIELD_VALUE_RE = re.compile(r"[^:]{1,60}:\s*[\d][\d./ -]*")
# The label of a note, tip or warning, set in bold above it (dblatex's
# admonitions): no heading. QA over the Debian Reference's PDFs: "Note",
# "ASTUCE", "nota", "aviso" headed sections holding the text after them, and
# 51 of 106 citations named one.
ADMONITION_LABELS = frozenset(
    """note notes tip tips hint warning caution important attention danger
    remarque astuce avertissement conseil nota notas aviso sugerencia consejo
    importante precaución advertencia atención hinweis tipp warnung achtung
    wichtig примечание замечание подсказка совет предупреждение внимание
    важно""".split()
)
_FIELD_START_RE = re.compile(r"[\w ]{1,30}:\s")  # "file: ...", "error desc: ..."
TERM_CHARS = 100  # a definition list's term is a line this long at most
TERM_CELL_CHARS = 40  # ... or a cell of a two-column table without a header
INDENT_EMS = 1.5  # a definition stands this many font sizes right of its term
LOOK_AHEAD = 40  # lines of a page looked at to tell a term's definition


@dataclass
class _Terms:
    """An open definition list (Assembler._as_term)."""

    column: float  # its terms' left edge
    level: int  # of its terms' headings
    outer: tuple[int, str]  # the heading it is under (Writer.enclosing)
    parent: str  # what a term's heading opens with below the sixth level
    definitions: float | None = None  # the left edge of a definition on a
    # term's baseline, once one was seen


class Assembler:
    def __init__(self, writer: Writer, pages: list[list[Line | Table]]) -> None:
        self.out = writer
        self.pages = pages
        sizes: Counter[float] = Counter()
        for items in pages:
            for it in items:
                if isinstance(it, Table):
                    sizes.update(it.sizes)
                elif not it.is_mono():
                    sizes[round(it.size, 1)] += len(it.text)
        self.body = sizes.most_common(1)[0][0] if sizes else 10.0
        self.words = {
            word.lower()
            for items in pages
            for it in items
            if isinstance(it, Line)
            for word in WORD_RE.findall(it.text)
        } | {
            w
            for items in pages
            for it in items
            if isinstance(it, Table)
            for w in it.words
        }
        self.step = _line_step(pages)
        # each page's right edge of its text (where a line that wraps ends)
        self.rights = [
            max((it.x1 for it in items if isinstance(it, Line)), default=0.0)
            for items in pages
        ]
        self.bold_prose: set[int] = set()  # the page's lines of bold running text
        self.paragraph: list[Line] = []
        self.code: list[Line] = []
        self.code_left = float("inf")  # the open code block's left edge
        self.item: list[str] | None = None
        self.item_turns: list[tuple[str, int]] = []  # as Writer.paragraph's
        self.item_x = 0.0
        self.item_number: int | None = None
        self.item_depth = 0
        self.item_page = 0
        self.list_stack: list[float] = []
        self.last_table: Table | None = None
        self.prev_heading: Line | None = None
        self.terms: list[_Terms] = []  # open definition lists, outermost first
        # the items after this one: the rest of its page, then the next page's
        self.ahead: list[Line | Table] = []
        self.ahead_last: Line | Table | None = None  # its page's last item
        self.defining = False  # a term's heading was the last thing written
        self.signature: list[Line] = []  # a Texinfo definition's lines
        self.passed: set[int] = set()  # ids of the lines of terms written

    def run(self) -> None:
        for k, items in enumerate(self.pages):
            self.bold_prose = self._bold_prose(items)
            after = self.pages[k + 1][:LOOK_AHEAD] if k + 1 < len(self.pages) else []
            self.ahead_last = items[-1] if items else None
            for j, it in enumerate(items):
                self.ahead = (items[j + 1 : j + 1 + LOOK_AHEAD] + after)[:LOOK_AHEAD]
                if isinstance(it, Table):
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

    def table(self, table: Table) -> None:
        if _is_definitions_table(table):
            # Texinfo definitions set close: signatures beside their category,
            # descriptions under them, read as the columns of a table
            self.flush(end_list=True)
            self.out.page = table.page
            text: list[str] = []  # a description's rows (its lines cut in cells)
            for row in [*table.rows, None]:
                if row is None or _CATEGORY_RE.fullmatch(row[-1].strip()):
                    if text:
                        self.out.paragraph(escape(" ".join(text)))
                    text = []
                    if row is not None:
                        self.out.code(" ".join(row[:-1]).strip())
                else:
                    text.append(" ".join(cell for cell in row if cell.strip()))
            self.defining = True
            return
        if _is_term_table(table):
            self._close_terms(table.x0, term=True)
            self.out.page = table.page
            for term, definition in table.rows:
                if term.strip():  # else a definition's next paragraph
                    self._term(table.x0, term, None)
                self.out.paragraph(escape(definition))
            self.defining = False
            return
        self._close_terms(table.x0, term=False)
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

    def line(self, line: Line, terms: bool = True) -> None:
        text = line.text
        self.out.page = line.page
        if id(line) in self.passed:  # a term another one's heading named
            return
        if self._signature(line):
            return
        defining, self.defining = self.defining, False
        if terms:
            if self._heading_level(line) in (1, 2, 3):
                self.flush(end_list=True)
                self.terms = []  # a section's heading ends its lists
            else:
                # a definition's first line (a synopsis wrapped) is no term
                found = None if defining else self._as_term(line)
                self._close_terms(line.x0, term=found is not None)
                if found is not None:
                    name, rest, x2 = found
                    self._term(line.x0, name, x2)
                    if rest is not None:
                        self.line(rest, terms=False)
                    return
        wrapped = (self.paragraph or self.item) and line.box is None
        if wrapped and self._continues(line) and not self._paragraph_gap(line):
            pass  # inline code wrapped onto a line of its own
        elif self._is_code(line):
            if self.code and not _same_code_block(self.code[-1], line):
                self.flush(end_list=True)  # the gap between two code blocks
            self.flush(keep_code=True, end_list=True)
            self.code.append(line)
            self.code_left = min(self.code_left, line.x0)
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
                self.out.continue_heading(escape(text))
            else:
                self.out.heading(level, escape(text))
            self.prev_heading = line
            return
        self.prev_heading = None
        marker = BULLET_RE.match(text) or _NUMBER_RE.match(text)
        if marker:
            self.flush()
            self._start_item(line, marker)
            return
        goes_on = (
            self._follows(line) and not self._paragraph_gap(line)
        ) or self._carries_over(line)
        if self.item is not None and line.x0 >= self.item_x - 2 and goes_on:
            self.item.append(text)
            if line.page != self.prev.page:  # the item goes on over a page break
                self.item_turns.append((escape(text), line.page))
            self.prev = line
            return
        if self.paragraph and not goes_on:
            self.flush()
        if self.item is not None:
            self.flush(end_list=True)
        self.paragraph.append(line)
        self.prev = line

    def _signature(self, line: Line) -> bool:
        """Whether `line` belongs to a Texinfo definition's first line (its
        signature: "int asn1_der_coding (asn1_node element, ..."), kept whole
        as code: the line its category ("[Function]") stands beside at the
        right margin, and the lines that wrap it, indented under it, while
        its parentheses are open."""
        # a category ends the line: its runs are only split out then
        chunks = line.chunks() if line.text.endswith("]") else []
        label = chunks and _CATEGORY_RE.fullmatch(chunks[-1][2])
        if label and len(chunks) > 1:  # the category on the same line
            self.flush(end_list=True)
            self.signature = [line]
            return True
        for held in (self.paragraph, self.code) if label else ():
            # the line beside it, read as text or as code (set in a code font)
            last = held[-1] if held else None
            if last and abs(last.y - line.y) <= 0.2 * line.size and last.x1 < line.x0:
                held.pop()
                self.flush(end_list=True)
                self.signature = [last]
                return True
        if not self.signature:
            return False
        first, previous = self.signature[0], self.signature[-1]
        written = "".join(ln.text for ln in self.signature)
        if (
            written.count("(") > written.count(")")  # its arguments go on
            and len(self.signature) < SIGNATURE_LINES
            and line.page == previous.page
            and 0 < previous.y - line.y <= 2 * line.size
            and line.x0 > first.x0 + 2
        ):
            self.signature.append(line)
            return True
        self._write_signature()
        return False

    def _write_signature(self) -> None:
        if not self.signature:
            return
        texts = []
        for ln in self.signature:
            chunks = ln.chunks()
            if _CATEGORY_RE.fullmatch(chunks[-1][2]) and len(chunks) > 1:
                chunks = chunks[:-1]
            texts.append(" ".join(chunk[2] for chunk in chunks))
        page = self.out.page
        self.out.page = self.signature[0].page
        self.out.code(" ".join(texts))
        self.out.page = page
        self.signature = []
        self.defining = True  # its description follows, indented: no term

    def _as_term(self, line: Line) -> tuple[str, Line | None, float | None] | None:
        """(term, the rest of its line, where its definition starts on its
        baseline) when `line` opens an entry of a
        definition list set with a hanging indent (Texinfo's tables, man
        pages, option lists): a short line whose next one stands indented
        under it, or a term whose definition starts on its baseline, further
        right, where the definition's next lines or the next entry's
        definition start too ("-t timeout   Cause read to time out ...").
        A term is not the end of a sentence, and code's indented lines are
        no definition: one of them must be text."""
        if (
            line.box is not None
            or self._code_goes_on(line)
            # a paragraph's next line (its first may be indented), not a
            # term standing left of a definition that ended unpunctuated
            or (self._continues(line) and line.x0 >= self.prev.x0 - 2 * line.size)
            or BULLET_RE.match(line.text)
            or _NUMBER_RE.match(line.text)
        ):
            return None
        lines = [it for it in self.ahead[:2] if isinstance(it, Line)]
        if not lines:
            return None
        return self._term_beside(line, lines) or self._term_over(line, lines[0])

    def _term_beside(
        self, line: Line, lines: list[Line]
    ) -> tuple[str, Line | None, float] | None:
        """A term whose definition starts on its baseline: in the same line,
        after a gap, the term in a font of its own ("-p prompt  Display ..."),
        or as the next line."""
        nxt = lines[0]
        if abs(nxt.y - line.y) <= 0.2 * line.size and nxt.page == line.page:
            if nxt.is_mono() and line.is_mono():
                return None  # code in columns
            after = lines[1] if len(lines) > 1 else None
            if _is_term_text(line.text, TERM_CELL_CHARS) and self._defines(
                line, nxt.x0, after
            ):
                return line.text, None, nxt.x0
            return None
        chunks = line.chunks()
        for k in range(1, min(len(chunks), 4)):
            name = " ".join(chunk[2] for chunk in chunks[:k])
            if not _is_term_text(name, TERM_CELL_CHARS):
                return None
            rest = line.rest(k)
            if _set_apart(line, rest) and self._defines(line, chunks[k][0], nxt):
                return name, rest, chunks[k][0]
        return None

    def _defines(self, line: Line, x2: float, after: Line | None) -> bool:
        """Whether a definition starting at `x2` on `line`'s baseline makes it
        a term: it stands apart from the term, and it goes on under itself,
        or the next entry's starts where this one's does, or where the open
        list's definitions do."""
        if x2 < line.x0 + INDENT_EMS * line.size:
            return False
        terms = self.terms[-1] if self.terms else None
        listed = (
            terms is not None
            and abs(terms.column - line.x0) <= 2
            and terms.definitions is not None
            and abs(terms.definitions - x2) <= 2
        )
        wraps = after is not None and abs(after.x0 - x2) <= 2
        return listed or wraps or self._entry_next(after, line.x0, x2)

    def _term_over(self, line: Line, nxt: Line) -> tuple[str, None, None] | None:
        """A term on a line of its own over its definition, indented; or
        several (Texinfo's @itemx: "GCRY_CIPHER_AES", "GCRY_CIPHER_AES128"
        ...), one under the other, over one definition: their heading names
        them all, and the lines of the others are passed over."""
        indent = INDENT_EMS * line.size
        terms = [line]
        lines = [it for it in self.ahead if isinstance(it, Line)]
        while (
            nxt is not None
            and abs(nxt.x0 - line.x0) <= 2
            and nxt.page == line.page
            and 0 < terms[-1].y - nxt.y <= 1.75 * line.size
            and nxt.is_mono() == line.is_mono()
            and nxt.is_bold() == line.is_bold()
            and _is_term_text(nxt.text, TERM_CELL_CHARS)
        ):
            terms.append(nxt)
            nxt = lines[len(terms) - 1] if len(terms) - 1 < len(lines) else None
        if nxt is None:
            return None
        last = terms[-1]
        below = (
            0 < last.y - nxt.y <= 2.5 * line.size
            if nxt.page == line.page
            else nxt.page == line.page + 1 and last is self.ahead_last
        )
        if (
            below
            and nxt.x0 >= line.x0 + indent
            and abs(nxt.size - line.size) < 1  # not a footnote under a line
            and _is_term_text(line.text, TERM_CHARS)
            # a line filling the width wraps (a hanging indent's paragraph);
            # a term in a font of its own may be long
            and (_styled(line) or line.x1 < self.rights[line.page - 1] - 6 * line.size)
            # text over an indented example introduces it
            and (nxt.is_mono() <= line.is_mono())
            and (_styled(line) or _plain_term(line.text))
            and (
                not line.is_mono() or self._text_below(line.x0 + indent, len(terms) - 1)
            )
            and not self._indented_paragraph(nxt, line.x0, len(terms))
        ):
            self.passed.update(id(term) for term in terms[1:])
            return ", ".join(term.text for term in terms), None, None
        return None

    def _indented_paragraph(self, first: Line, x: float, skip: int) -> bool:
        """Whether `first` opens a paragraph indented only on its first line,
        its next line back at `x` (a heading over a paragraph as Word and APA
        set them): it fills the width and ends no sentence, and the line after
        it (past the next `skip`) goes on under it at line spacing."""
        if first.x1 < self.rights[first.page - 1] - 6 * first.size or (
            first.text.rstrip().endswith((".", ":", "!", "?"))
        ):
            return False  # not a line that wraps: a definition of one line
        after = [it for it in self.ahead[skip : skip + 1] if isinstance(it, Line)]
        return bool(
            after
            and abs(after[0].x0 - x) <= 2
            and after[0].page == first.page
            and 0 < first.y - after[0].y <= 1.75 * first.size
        )

    def _entry_next(self, after: Line | None, x: float, x2: float) -> bool:
        """Whether `after` opens an entry like one whose term starts at `x` and
        its definition at `x2`: on its baseline, or on the next line."""
        if after is None or abs(after.x0 - x) > 2:
            return False
        if any(abs(chunk[0] - x2) <= 2 for chunk in after.chunks()[1:]):
            return True
        lines = [it for it in self.ahead if isinstance(it, Line)]
        k = next((i for i, it in enumerate(lines) if it is after), len(lines))
        return any(
            abs(it.x0 - x2) <= 2
            and 0 <= after.y - it.y <= 2.5 * after.size
            and it.page == after.page
            for it in lines[k + 1 : k + 2]
        )

    def _code_goes_on(self, line: Line) -> bool:
        """Whether `line` is code going on with the open block: monospaced,
        and not standing out left of it (a term in a code font after an
        example: "${parameter:?word}" after the lines of the one above)."""
        return bool(
            self.code
            and line.is_mono()
            and line.x0 >= self.code_left - INDENT_EMS * line.size
        )

    def _text_below(self, x: float, skip: int = 0) -> bool:
        """Whether a line of text (not code) comes next at `x` or further
        right, before anything stands left of `x` (past the next `skip`)."""
        for it in self.ahead[skip:]:
            if not isinstance(it, Line) or it.x0 < x - 2:
                return False
            if not it.is_mono():
                return True
        return False

    def _close_terms(self, x: float, term: bool) -> None:
        """End the definition lists that a line at `x` is not inside: what
        follows a list belongs to the heading above it (Writer.reopen)."""
        while self.terms:
            column = self.terms[-1].column
            if x > column + 2 or (term and abs(x - column) <= 2):
                return
            self.flush(end_list=True)
            self.out.reopen(*self.terms.pop().outer)

    def _term(self, x: float, text: str, definitions: float | None) -> None:
        """A term's heading, one level below the heading its list is under
        (the second level at least); below the sixth level, after its parent
        term's text (as html.py), and no list nests deeper than that: a
        staircase of terms stays at the sixth level, each named once."""
        self.flush(end_list=True)
        self.last_table = None
        self.prev_heading = None
        deepest = self.terms and self.terms[-1].level >= MAX_HEADING_LEVEL
        if not (self.terms and abs(self.terms[-1].column - x) <= 2) and not deepest:
            outer = self.out.enclosing()
            # never a title: a term under no heading is at the second level
            level = max(outer[0] + 1, 2)
            parent = outer[1] if level > MAX_HEADING_LEVEL else ""
            self.terms.append(_Terms(x, level, outer, parent))
        terms = self.terms[-1]
        if terms.definitions is None:
            terms.definitions = definitions
        self.out.heading(terms.level, f"{terms.parent} {escape(text)}".strip())
        self.defining = True

    def _paragraph_gap(self, line: Line) -> bool:
        """Whether `line` stands further below the last one than the text's
        lines stand apart (TeX's space between paragraphs: "file: ...",
        "Returns: ..." of a function's description, each a paragraph), and
        does not go on with a sentence the last one left open (a lowercase
        word after no full stop: looser leading, or a taller word inline)."""
        prev = getattr(self, "prev", None)
        if prev is None or self.step is None or prev.page != line.page:
            return False
        step, size = self.step
        gap = prev.y - line.y
        if abs(line.size - size) >= 0.5 or gap <= step + max(0.12 * step, 1.0):
            return False
        goes_on = (
            not line.is_mono()  # a line of code set apart is code
            and line.text[:1].islower()
            and not prev.text.rstrip().endswith((".", ":", "!", "?", ";"))
            and not _FIELD_START_RE.match(line.text)
        )
        return not goes_on

    def _is_code(self, line: Line) -> bool:
        """Monospaced, and in a shaded box or no bigger than the body text and
        not bold (a heading in a monospaced font is a heading); not opening
        with a bullet or a dash other than ASCII's ("— Conflicts" of a
        DocBook list, its term in a code font), which code does not."""
        marker = BULLET_RE.match(line.text)
        if not line.is_mono() or (marker and marker.group(1) not in "*-"):
            return False
        if line.box is not None:
            return True
        return line.size <= self.body * 1.05 and not line.is_bold()

    def _heading_level(self, line: Line) -> int:
        ratio = line.size / self.body
        if len(line.text) > 200 or not any(c.isalpha() for c in line.text):
            return 0  # (a page number of a table of contents: "53", no title)
        if _FIELD_VALUE_RE.fullmatch(line.text.strip()):
            return 0  # a title page's "Date de publication : 31-01-2024"
        if line.text.strip().rstrip(":").strip().casefold() in ADMONITION_LABELS:
            return 0  # a note's label: the note is part of its section
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

    def _bold_prose(self, items: list[Line | Table]) -> set[int]:
        """The ids of a page's lines of bold running text. Bold lines of body
        size look like headings (levels 4 and 5); they are text when their block
        (the bold lines at line spacing) is too long for a title or reads as a
        sentence, or when the block's last line fills the width and a line in
        regular weight starting with a lowercase word goes on from it at line
        spacing (a paragraph opening with a bold phrase). A title wrapped over
        two lines stays one. One pass: each line joins one block."""
        prose: set[int] = set()
        block: list[Line] = []
        chars, sentence, text = 0, False, False
        for it in [*items, None]:
            line = it if isinstance(it, Line) and not self._is_code(it) else None
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

    def _bold_body(self, line: Line) -> bool:
        """Bold, about the body text's size: a heading of level 4 or 5 when
        short and alone."""
        return line.is_bold() and 0.78 <= line.size / self.body < 1.1

    def _runs_into(self, bold: Line, line: Line) -> bool:
        """Whether the sentence of a bold line as wide as the text goes on in
        `line`, set under it at line spacing."""
        return (
            line.text[:1].islower()
            and self._follows(line, bold)
            and bold.x1 - bold.x0 >= 0.85 * (line.x1 - line.x0)
        )

    def _carries_over(self, line: Line) -> bool:
        """Whether `line`, the first on its page, goes on with the open paragraph
        or list item that the previous page ended: same size and left edge, the
        last line there filling the width (it wraps) and its sentence unfinished,
        going on with a lowercase word here."""
        prev = getattr(self, "prev", None)
        if not (self.paragraph or self.item) or prev is None:
            return False
        if not isinstance(line, Line) or line.page != prev.page + 1:
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

    def _continues(self, line: Line) -> bool:
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

    def _follows(self, line: Line, prev: Line | None = None) -> bool:
        prev = prev or getattr(self, "prev", None)
        if prev is None or prev.page != line.page:
            return False
        gap = prev.y - line.y
        return (
            0 < gap <= 1.75 * max(prev.size, line.size)
            and abs(prev.size - line.size) < 1
        )

    def _start_item(self, line: Line, marker: re.Match) -> None:
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
        self.item_turns = []
        self.item_x = x
        self.item_page = line.page
        self.prev = line

    def flush(self, keep_code: bool = False, end_list: bool = False) -> None:
        self._write_signature()
        page = self.out.page
        if self.paragraph:
            self.out.page = self.paragraph[0].page  # where it starts
            text = join_texts([ln.text for ln in self.paragraph], self.words)
            turns = [
                (escape(line.text), line.page)
                for before, line in zip(self.paragraph, self.paragraph[1:])
                if line.page != before.page
            ]
            self.out.paragraph(escape(text), turns)
            self.paragraph = []
        if self.item is not None:
            self.out.page = self.item_page
            text = join_texts(self.item, self.words)
            self.out.item(
                self.item_depth, escape(text), self.item_number, self.item_turns
            )
            self.item = None
        if self.code and not keep_code:
            self.out.page = self.code[0].page  # where it starts
            self.out.code(_code_text(self.code))
            self.code = []
            self.code_left = float("inf")
            self.last_table = None
        self.out.page = page
        if end_list:
            self.list_stack = []
            self.out.end_list()


def _line_step(pages: list[list[Line | Table]]) -> tuple[float, float] | None:
    """The step from one line of running text to the next (its most common
    baseline distance at the most common font size) and that size; None when
    too few lines tell."""
    steps: Counter[tuple[float, float]] = Counter()
    for items in pages:
        lines = [it for it in items if isinstance(it, Line) and not it.is_mono()]
        for a, b in zip(lines, lines[1:]):
            gap = a.y - b.y
            if (
                abs(a.x0 - b.x0) <= 2
                and abs(a.size - b.size) < 0.2
                and 0 < gap <= 1.75 * a.size
            ):
                steps[round(gap, 1), round(a.size, 1)] += 1
    if steps.total() < 20:
        return None
    (step, size), n = steps.most_common(1)[0]
    return (step, size) if n >= 0.3 * steps.total() else None


def _set_apart(line: Line, rest: Line) -> bool:
    """Whether the runs of `line` before `rest` are set in a font of their own,
    monospaced or bold, and `rest` is not: a term before its definition, not
    words of justified text whose wide spaces line up."""
    left = sum(not ch.isspace() for ch in line.chars) - sum(
        not ch.isspace() for ch in rest.chars
    )
    return (line.mono >= 0.9 * left and not rest.is_mono()) or (
        line.bold >= 0.9 * left and not rest.is_bold()
    )


def _styled(line: Line) -> bool:
    """Whether much of a line is bold or monospaced (a synopsis: "for name
    [ in word ] ; do list ; done", its words bold, its arguments not)."""
    return line.bold + line.mono >= 0.25 * sum(not ch.isspace() for ch in line.chars)


def _plain_term(text: str) -> bool:
    """Whether a term in the text's own font reads as one: a few words, not a
    sentence over an example ("A variable may be assigned to by a statement
    of the form") nor a joining word between two ("or")."""
    words = text.split()
    return len(words) < 5 and not (
        len(words) == 1 and text.isalpha() and text.islower() and len(text) <= 3
    )


def _is_term_text(text: str, chars: int) -> bool:
    """Short, and not the end of a sentence nor two of them (an ellipsis may
    end a synopsis; a term of one word may end in a mark: "?", "!!", "\\.")."""
    text = text.strip()
    if _BRACKETED_RE.fullmatch(text) or _SENTENCE_RE.search(text):
        # an icon's text over a note ("[Avertissement]"), a category; sentences
        return False
    return 0 < len(text) <= chars and (
        text.endswith("...")
        or " " not in text
        or not text.endswith((".", ":", ",", ";", "!", "?"))
    )


def _is_definitions_table(table: Table) -> bool:
    """A table without rules whose last column holds Texinfo's categories
    ("[Function]") beside the signatures they label, on a third of its rows
    at least: the rows between are descriptions cut into cells."""
    labels = sum(bool(_CATEGORY_RE.fullmatch(row[-1].strip())) for row in table.rows)
    return not table.ruled and labels >= 1 and 3 * labels >= len(table.rows)


def _is_term_table(table: Table) -> bool:
    """A table without rules or a header whose two columns are short terms and their
    definitions (some of them prose; a row without a term goes on with the
    definition above): a definition list set in columns."""
    return (
        not table.header
        and not table.ruled
        and all(len(row) == 2 for row in table.rows)
        and any(term.strip() for term, _ in table.rows)
        and all(
            not term.strip() or _is_term_text(term, TERM_CELL_CHARS)
            for term, _ in table.rows
        )
        and all(definition.strip() for _, definition in table.rows)
        and any(len(definition.split()) >= 3 for _, definition in table.rows)
    )


def _escaped(rows: list[list[str]]) -> list[list[str]]:
    """A table's cells as text of the document: Markdown markup in them escaped
    (the reader adds the table's own)."""
    return [[escape(cell) for cell in row] for row in rows]


def _same_code_block(prev: Line, line: Line) -> bool:
    """Whether `line` goes on with the code block `prev` ends: in the same
    shaded box, or at line spacing; over a page break (nothing came between
    them, or the block would have been written), boxed on both pages or on
    neither."""
    if prev.page != line.page:
        return (prev.box is None) == (line.box is None)
    if prev.box is not None or line.box is not None:
        return prev.box == line.box
    return _beside(prev, line) or 0 < prev.y - line.y <= 2.6 * max(prev.size, line.size)


def _beside(prev: Line, line: Line) -> bool:
    """Whether `line` goes on `prev`'s line of code to its right: a column of
    an aligned listing ("password  requisite  pam_deny.so"), which a browser
    prints as a text object per tab-separated piece."""
    return (
        prev.page == line.page
        and abs(prev.y - line.y) <= 0.2 * max(prev.size, line.size)
        and line.x0 >= prev.x1 - 1
    )


def _code_text(lines: list[Line]) -> str:
    left = min(ln.x0 for ln in lines)
    widths = [(ln.x1 - ln.x0) / len(ln.text) for ln in lines if len(ln.text) > 3]
    char = statistics.median(widths) if widths else 6.0
    out: list[str] = []
    for prev, ln in zip([None, *lines], lines, strict=False):
        indent = round((ln.x0 - left) / char) if char > 0 else 0
        text = "".join(ln.chars).strip()
        if prev is not None and _beside(prev, ln):  # the next column of its line
            out[-1] += " " * max(1, min(indent, 160) - len(out[-1])) + text
            continue
        if prev is not None and prev.page == ln.page:
            step = prev.y - ln.y
            out += [""] * max(0, min(round(step / (1.2 * ln.size)) - 1, 3))
        out.append(" " * max(0, min(indent, 80)) + text)
    return "\n".join(out)
