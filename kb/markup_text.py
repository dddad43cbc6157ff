"""Markup -> the text it shows: what is embedded and what a heading path reads.

No ORM, no parser state: strings in, strings out. A URL is a path: it pulls a
chunk's vector towards every page on the same site and says nothing about what
the text says. The HTML, DOCX and PDF readers keep link text only; a Markdown
source's `[text](url)` and its raw HTML blocks (a README's badges) are embedded
the same way (kb.chunking's embedded_text; the chunk's text, and so every
citation, keeps them as written). Code keeps its own text.

- link_text: Markdown links as their text, images as their alt text.
- heading_text: a heading's inline Markdown as the plain text of titles and
  heading paths (links as their text, escapes undone, code kept).
- html_text: the text an HTML fragment shows, one line per block element.
- without_shortcodes: Hugo's inline shortcodes and MDN's macros as the text
  they show.
- shown_text: the text a Markdown passage shows once rendered (what a text
  fragment link must quote to be found on the original page).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from html.parser import HTMLParser

_INLINE_LINK_RE = re.compile(
    r"(!?)\[([^\[\]\n]*)\]"  # [text] or ![alt]
    r"\(\s*(?:<[^<>\n]*>|[^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*)"  # (target
    r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"  # "title")
)
_REFERENCE_LINK_RE = re.compile(r"\[([^\[\]\n]+)\]\[[^\[\]\n]*\]")
_LINK_DEFINITION_RE = re.compile(
    r"^ {0,3}\[[^\[\]\n]+\]:[ \t]*\S+[^\n]*(?:\n|\Z)", re.MULTILINE
)


def link_text(text: str) -> str:
    """`text` with Markdown link targets left out: `[text](url "title")` and
    `[text][ref]` read as `text`, an image as its alt text, and a line defining a
    reference (`[ref]: url`) as nothing. Everything else is unchanged."""
    if "](" not in text and "][" not in text and "]:" not in text:
        return text
    text = _INLINE_LINK_RE.sub(lambda m: m.group(2), text)
    text = _REFERENCE_LINK_RE.sub(r"\1", text)
    return _LINK_DEFINITION_RE.sub("", text)


# CommonMark's backslash escapes (any ASCII punctuation), and code spans, inside
# which a backslash is itself.
_ESCAPED_RE = re.compile(r"\\([!-/:-@\[-`{-~])")
_BACKTICKS_RE = re.compile(r"`+")
_ASIDE_RE = re.compile("\ue000(\\d+)\ue001")
_CODE_MARK_RE = re.compile("\ue002(\\d+)\ue003")


# An anchor written into a heading as raw HTML, empty: `<a name="x"></a>Title`
_EMPTY_ANCHOR_RE = re.compile(
    r"<(a|span)\b[^<>]*\b(?:name|id)=[^<>]*>\s*</\1>\s*", re.IGNORECASE
)
# `{#install}`, `{#install .unnumbered}`, `{.unnumbered}`, `{/*install*/}` at
# the end (no space after "#": `{# comment #}` is a template's text)
_HEADING_ID_RE = re.compile(
    r"\s*(?<!\\)\{(?:[#.][\w:.-]+(?:\s[^{}]*)?|/\*[^{}]*?\*/)\}\s*$"
)


# Hugo's shortcodes, inline: `{{< glossary_tooltip text="Pods" term_id="pod" >}}`
# shows its text; a link's target `]({{< relref "api/oauth" >}})` and a mark
# such as `{{% deprecated %}}` show nothing. (Bounded: linear in the text.)
_SHORTCODE_LINK_RE = re.compile(
    r"\[([^\[\]\n]{0,500})\]\(\s*\{\{[<%][^{}\n]{0,500}[%>]\}\}\s*\)"
)
_SHORTCODE_RE = re.compile(r"([ \t]?)\{\{[<%][^{}\n]{0,500}?[%>]\}\}")
# (Docsy's `{{% heading "whatsnext" %}}` names the heading it prints)
_SHOWN_ARGUMENT_RE = re.compile(
    r"\b(?:text|caption|title)=\"([^\"\n]*)\"|^\{\{[<%]\s*heading\s+\"([^\"\n]*)\""
)


# MDN's macros (KumaScript): `{{cssxref("color")}}`, `{{domxref("Node.x", "x")}}`
# show a name; `{{Compat}}`, `{{EmbedLiveSample("x", 600)}}`, `{{HTMLSidebar}}`
# show no words of the text.
# (A template's `{{ name }}` or `{{ super() }}` in prose is no macro: MDN's
# open with a capital, or name an xref with an argument; _is_macro.)
_MACRO_RE = re.compile(
    r"([ \t]?)\{\{[ \t]*+([A-Za-z][\w-]{0,60}+)[ \t]*+"
    r"(?:\(([^{}()\n]{0,500}+)\))?+[ \t]*+\}\}"
)
_MACRO_ARGUMENT_RE = re.compile(r"\"([^\"\n]*)\"|'([^'\n]*)'")
_NAMING_MACRO_RE = re.compile(
    r"\w*(?:ref|attrdef|element|glossary|httpheader|httpmethod|httpstatus)",
    re.IGNORECASE,
)


def _macro_text(name: str, arguments: str) -> str:
    """What an MDN macro shows: an xref its text (its second argument, the
    third of htmlattrxref) or its first; a macro naming nothing, nothing."""
    if not arguments or not _NAMING_MACRO_RE.fullmatch(name):
        return ""
    said = [a or b for a, b in _MACRO_ARGUMENT_RE.findall(arguments)]
    if not said:
        return ""
    if name.lower() == "htmlelement":
        return f"`<{said[0]}>`"  # as MDN prints it: the element's tag
    shown = 2 if name.lower() == "htmlattrxref" else 1
    return said[shown] if len(said) > shown and said[shown] else said[0]


def _is_macro(match: re.Match) -> bool:
    name, arguments = match.group(2), match.group(3)
    return name[0].isupper() or bool(arguments and _NAMING_MACRO_RE.fullmatch(name))


def without_shortcodes(markdown: str) -> str:
    """`markdown` with Hugo's inline shortcodes and MDN's macros, outside code
    spans, as the text they show: a link to a shortcode's target as its
    text, a shortcode with a text (or caption, title) as that text, an MDN
    xref as the name it links (_macro_text), any other as nothing."""
    if "{{" not in markdown:
        return markdown
    code = _code_spans(markdown)

    def shown(match: re.Match) -> str:
        if _in_code(code, match.start()):
            return match.group(0)
        if match.re is _SHORTCODE_LINK_RE:
            return match.group(1)
        argument = _SHOWN_ARGUMENT_RE.search(match.group(0).lstrip(" \t"))
        said = (argument.group(1) or argument.group(2) or "") if argument else ""
        return match.group(1) + said if said else ""  # no space before "."

    def macro(match: re.Match) -> str:
        if _in_code(code, match.start()) or not _is_macro(match):
            return match.group(0)
        said = _macro_text(match.group(2), match.group(3) or "")
        return match.group(1) + said if said else ""

    text = _SHORTCODE_LINK_RE.sub(shown, markdown)
    if text != markdown:
        code = _code_spans(text)
    found = _SHORTCODE_RE.sub(shown, text)
    if found != text:
        code = _code_spans(found)
    return _MACRO_RE.sub(macro, found)


def _without_ids(markdown: str) -> str:
    """A heading's Markdown without its id and its empty anchors, outside its
    code spans (`` `<span></span>` `` is the text)."""
    code = _code_spans(markdown)
    found = _HEADING_ID_RE.search(markdown)
    if found and not _in_code(code, markdown.index("{", found.start())):
        markdown = markdown[: found.start()]  # no code span crosses the cut
    if "<" not in markdown:
        return markdown
    return _EMPTY_ANCHOR_RE.sub(
        lambda m: m.group(0) if _in_code(code, m.start()) else "", markdown
    )


def _in_code(spans: list[tuple[int, int]], pos: int) -> bool:
    """Whether `pos` lies in one of the code spans `spans` (_code_spans: in
    order, apart)."""
    at = bisect.bisect_right(spans, (pos, float("inf"))) - 1
    return at >= 0 and spans[at][0] <= pos < spans[at][1]


def heading_text(markdown: str) -> str:
    """A heading's Markdown as the plain text of titles and heading paths: a link
    named by its text (its target would be shown in every heading path and
    embedded with every chunk), escapes undone (the readers escape what HTML,
    DOCX and PDF text would otherwise mark up: `C++ \\*pointers\\*`), one line,
    without the id a heading may end with (`{#install}` of Pandoc, kramdown and
    Docusaurus, `{/*install*/}` of MDX) or an empty anchor in it (`<a
    name="install"></a>`): they name the anchor, not the part."""
    markdown = without_inline_tags(_without_ids(without_shortcodes(markdown)))
    # (code kept as written: its backticks and backslashes)
    return " ".join(_code_aside(markdown, _plain, lambda code: code).split())


def _code_aside(
    markdown: str, outside: Callable[[str], str], code: Callable[[str], str]
) -> str:
    """`outside` applied to the text around `markdown`'s code spans, the spans
    set aside as markers (a link around code, `[`get`](api.md)`, is still one
    link, and code keeps its backslashes), then each put back as `code` of
    it."""
    spans = _code_spans(markdown)
    if not spans or "\ue002" in markdown:  # (the markers themselves: as text)
        return outside(markdown)
    pieces, position = [], 0
    for i, (start, end) in enumerate(spans):
        pieces.append(f"{markdown[position:start]}\ue002{i}\ue003")
        position = end
    pieces.append(markdown[position:])
    text = outside("".join(pieces))
    return _CODE_MARK_RE.sub(
        lambda m: code(markdown[slice(*spans[int(m.group(1))])]), text
    )


def _plain(markdown: str, marks: Callable[[str], str] | None = None) -> str:
    """Inline Markdown outside code: links as their text, `marks` applied to
    what is left (shown_text's emphasis and tags), escapes undone. An escaped
    character is set aside first, so `\\[docs](here)` stays as written and
    an escaped `\\*` is no emphasis mark."""
    marks = marks or (lambda text: text)
    if "\\" not in markdown:
        return marks(link_text(markdown))
    kept: list[str] = []

    def aside(match: re.Match) -> str:
        kept.append(match.group(1))
        return f"\ue000{len(kept) - 1}\ue001"

    if "\ue000" in markdown:  # the markers themselves: no setting aside
        return _ESCAPED_RE.sub(r"\1", marks(link_text(markdown)))
    text = marks(link_text(_ESCAPED_RE.sub(aside, markdown)))
    return _ASIDE_RE.sub(lambda m: kept[int(m.group(1))], text)


# A line's block marks: a heading's #s, a quote's >, a list item's marker.
_BLOCK_MARK_RE = re.compile(
    r"^[ \t]*(?:#{1,6}(?=[ \t]|$)|>|[-*+](?=[ \t])|\d{1,9}[.)](?=[ \t]))[ \t]*"
)
_FENCE_LINE_RE = re.compile(r"[ \t]*(?:`{3,}|~{3,})")
# What a page does not show at a line's start: a definition's ":" mark, a
# GitHub alert's "[!NOTE]"
_SHOWN_NOT_RE = re.compile(
    r"^(?::[ \t]+|\[!(?:NOTE|TIP|IMPORTANT|WARNING|CAUTION)\][ \t]*)", re.IGNORECASE
)
# A table's delimiter row or a thematic break: no text
_RULE_LINE_RE = re.compile(r"[ \t|:]*-[ \t|:-]*")
# Emphasis marks: a run of * or _ with a word on one side only (not "5 * 3",
# not snake_case).
_EMPHASIS_RE = re.compile(
    r"(?<![\w*])\*{1,3}(?=[^\s*])|(?<=[^\s*])\*{1,3}(?![\w*])"
    r"|(?<![\w_])_{1,3}(?=[^\s_])|(?<=[^\s_])_{1,3}(?![\w_])"
)
# An inline tag, its name grouped; not an escaped one ("\\<video>" is text the
# readers wrote)
_INLINE_TAG_RE = re.compile(r"(?<!\\)</?([A-Za-z][\w-]*)(?:\s[^<>\n]*)?/?>")


def shown_text(markdown: str) -> str:
    """The text `markdown` shows once rendered, on one line: code spans as
    their code (no backticks), emphasis marks, block marks (#, >, list
    markers), fence lines, table pipes and inline tags left out, links as
    their text, escapes undone. A cited `` `env::var()`. `` shows as
    "env::var().", `\\_\\_all\\_\\_` as "__all__". Linear in its length."""
    lines = []
    for line in without_shortcodes(markdown).splitlines():
        if _FENCE_LINE_RE.match(line) or _RULE_LINE_RE.fullmatch(line):
            continue
        for _ in range(3):  # "> - item": a quote's list item
            line = _BLOCK_MARK_RE.sub("", line, count=1)
        # a definition's ": " (MDN's "- : "), a GitHub alert's label
        lines.append(_SHOWN_NOT_RE.sub("", line, count=1))
    shown = _code_aside("\n".join(lines), lambda t: _plain(t, _unmarked), _code_shown)
    return " ".join(shown.split())


def without_inline_tags(markdown: str) -> str:
    """`markdown` with its inline tags, outside code spans, left out and what
    they wrap kept: an HTML element's (`<s>todo</s>` reads "todo", a `<br>` a
    space) and an MDX component's that the text closes (`<CodeStep
    step={1}>ref</CodeStep>` reads "ref"). Angle brackets around anything
    else are text: `restore <archive>`, `Vec<String>`, `### <Suspense>`.
    Linear in its length."""
    if "<" not in markdown:
        return markdown
    return _code_aside(markdown, _without_tags, lambda code: code)


def _without_tags(text: str) -> str:
    closed = {m.group(1) for m in _CLOSING_TAG_RE.finditer(text)}

    def shown(match: re.Match) -> str:
        name = match.group(1)
        if name.lower() in _INLINE_HTML or (name[:1].isupper() and name in closed):
            return " " if name.lower() == "br" else ""
        return match.group(0)

    return _INLINE_TAG_RE.sub(shown, text)


_CLOSING_TAG_RE = re.compile(r"</([A-Za-z][\w-]*)\s*>")
# HTML's inline elements: their tags show nothing of their own
_INLINE_HTML = frozenset(
    "a abbr b bdi bdo big br cite del dfn em font i ins kbd mark q s samp small "
    "span strike strong sub sup time tt u var wbr".split()
)


def _unmarked(text: str) -> str:
    """Text without inline tags, emphasis marks and table pipes."""
    return _EMPHASIS_RE.sub("", _INLINE_TAG_RE.sub(" ", text)).replace("|", " ")


def _code_shown(span: str) -> str:
    """A code span's code, without its backticks."""
    ticks = len(span) - len(span.lstrip("`"))
    return span[ticks : len(span) - ticks].strip()


_STRONG_RE = re.compile(r"(?<!\\)(\*\*|__)")


def strong_marks(text: str) -> int:
    """How many strong-emphasis markers ("**", "__") stand in inline Markdown
    outside its code spans, unescaped."""
    code = _code_spans(text)
    return sum(not _in_code(code, m.start()) for m in _STRONG_RE.finditer(text))


def balanced_emphasis(text: str, before: str, after: str) -> str:
    """`text`, cut out of a paragraph between `before` and `after` (a sentence
    of a bold passage), with the strong emphasis the cut left open or closed
    made whole: "**Strict Mode calls it twice," reads "**Strict Mode calls it
    twice,**" when the passage's "**" closes after it, and "so it fails.**"
    reads "**so it fails.**" when it opened before. A lone "**" that nothing
    around it pairs ("Glob src/** matches", "2**(n-1)") stays as written."""
    if strong_marks(text) % 2 == 0:
        return text
    if strong_marks(before) % 2:
        return "**" + text  # it closes what opened before the cut
    if strong_marks(after) % 2:
        return text.rstrip() + "**"  # it opens what closes after the cut
    return text


def _code_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the code spans of inline Markdown: a run of backticks not
    escaped, up to the next run of as many (inside code a backslash is itself,
    so a closing run may follow one). Linear: each run is read once."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS_RE.finditer(text)]
    following: list[int | None] = [None] * len(runs)  # next run of equal length
    last: dict[int, int] = {}
    for i in range(len(runs) - 1, -1, -1):
        length = runs[i][1] - runs[i][0]
        following[i] = last.get(length)
        last[length] = i
    spans, i = [], 0
    while i < len(runs):
        j = following[i]
        escaped = runs[i][0] and text[runs[i][0] - 1] == "\\"
        if j is None or escaped:
            i += 1
            continue
        spans.append((runs[i][0], runs[j][1]))
        i = j + 1
    return spans


# Elements whose end is a line break in the text they show.
_HTML_BREAKS = {
    "p",
    "div",
    "br",
    "li",
    "tr",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "ul",
    "ol",
    "section",
    "blockquote",
    "pre",
    "hr",
}


_ANY_TAG_RE = re.compile(r"<[^<>]*>")
_HTML_HIDDEN = {"script", "style", "template"}  # content no page shows as text


class _HTMLText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0  # depth inside script, style, template

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _HTML_HIDDEN:
            self.hidden += 1
        elif tag == "img":
            alt = dict(attrs).get("alt") or ""
            self.parts.append(f" {alt} " if alt else " ")
        elif tag in _HTML_BREAKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HTML_HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _HTML_BREAKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_text(fragment: str) -> str:
    """The text an HTML fragment shows: its text and its images' alt text, one
    line per block element; no tags, attributes, comments, scripts or styles."""
    reader = _HTMLText()
    try:
        reader.feed(fragment)
        reader.close()
        shown = "".join(reader.parts)
    except AssertionError:  # _markupbase on "<![ x": no text worth a crash
        shown = _ANY_TAG_RE.sub(" ", fragment)
    lines = (" ".join(line.split()) for line in shown.split("\n"))
    return "\n".join(line for line in lines if line)
