"""HTML (and Confluence / Notion exports) -> canonical Markdown.

Only the main content is read: the document's own landmarks (`main`,
`role=main`, a single `article`, the export formats' content containers) before
anything else, with navigation, banners, footers, sidebars, scripts, styles and
cookie banners dropped first. A Javadoc class page is read as its class and one
section per member (kb/readers/apiref.py).

A definition list (`<dl>`: DocBook's variablelist, Sphinx's object descriptions)
is read as one section per term: the term a heading one level below the
enclosing one, its definitions that section's text, so that chunks keep each
definition with its term; field lists (Parameters, Returns) stay lists. The page
title opens the text as its level-1 heading when the page has no `h1`; when the
first heading says the same, that heading is written at level 1 instead, so the
title is not read twice. A heading's id (or its empty `<a id>`) is kept as its
anchor (`Reading.anchors`).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterator

import lxml.etree
import lxml.html
from django.utils.translation import gettext

from kb.readers import apiref
from kb.readers.reading import ReaderError, Reading, decoded_html
from kb.readers.writer import MAX_HEADING_LEVEL, Repeats, Writer, clean, escape

MAX_DEPTH = 150  # deeper nesting is read as plain text, not recursed into
MAX_COLSPAN = 50  # wider spans are read as this many columns
MAX_ROWSPAN = 1000  # a spanning cell repeats in at most this many rows (0: all)
_HEADINGS = {f"h{i}": i for i in range(1, MAX_HEADING_LEVEL + 1)}
_DROP_TAGS = {
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "aside",
    "form",
    "button",
    "iframe",
    "svg",
    "canvas",
    "object",
    "embed",
    "select",
    "input",
    "textarea",
    "dialog",
    "head",
}
_DROP_ROLES = {
    "navigation",
    "banner",
    "contentinfo",
    "complementary",
    "search",
    "dialog",
    "alertdialog",
}
# class or id words that mark page furniture rather than content
_FURNITURE_RE = re.compile(
    r"^(cookie.*|.*-?cookies?-?.*|.*consent.*|gdpr|sidebar|side-bar|breadcrumbs?"
    r"|breadcrumb-section|footer|site-footer|site-header|navbar|nav|menu|skip-link"
    r"|toc|.*toc-macro|table-of-contents|page-metadata|pagesection|likes-and-labels-container"
    r"|headerlink|id_link|copiable-anchor|copiable-link"  # "¶", "#" by headings
    r"|longdesc-link)$",  # DocBook's "[D]" link to an image's long description
    re.I,
)
# words of a class or id (split at "-", "_" and spaces) that name navigation;
# read as such only in a page without landmarks
_NAVIGATION_WORDS = frozenset(
    ("nav", "navbar", "navigation", "menu", "breadcrumb", "breadcrumbs")
    + ("sidebar", "toc", "navheader", "navfooter")  # the last two: DocBook's
)
_WORD_SPLIT_RE = re.compile(r"[-_\s]+")
# containers of the main content in export formats, tried after the landmarks
# (attribute, word): an id equal to the word, or a class holding it
_CONTENT_MARKS = (
    ("id", "main-content"),  # Confluence
    ("class", "wiki-content"),
    ("class", "page-body"),
    ("id", "content"),
    ("class", "content"),
    ("id", "main"),
)
_CONTENT_IDS = frozenset(word for kind, word in _CONTENT_MARKS if kind == "id")
_CONTENT_CLASSES = tuple(word for kind, word in _CONTENT_MARKS if kind == "class")
_BLOCK_TAGS = {
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "table",
    "pre",
    "blockquote",
    "figure",
    "figcaption",
    "details",
    "summary",
    "hr",
    "address",
    "center",
    "fieldset",
    "body",
    "li",
    *_HEADINGS,
}
# Code in a line of text: sample output and keys are written as code too
# (Texinfo's ‘<samp>\</samp>’), so their characters are not escaped.
_INLINE_CODE = frozenset(("code", "samp", "kbd", "tt"))
_BRUSH_RE = re.compile(r"brush:\s*([\w+#-]+)")
_LANG_RE = re.compile(r"(?:language|lang)-([\w+#-]+)")


def read(name: str, data: bytes) -> Reading:
    root = _parse(name, data)
    body = root.find("body")
    if body is None:
        body = root
    title = clean(root.findtext(".//title") or "")
    names = _Names(body)
    _drop_furniture(body, names)
    content = apiref.javadoc(body)
    if content is None:
        content = apiref.rustdoc(body)
    if content is None:
        content = apiref.pydoc(body, title)
    if content is None:
        content = apiref.doxygen(body)
    if content is None:
        content = _main_content(body, names)
        if content is body:  # no landmark: navigation may be any div
            _drop(_is_navigation, _maybe_navigation(names))
    walker = _Walker()
    _open_with_title(walker, content, title)
    try:
        walker.container(content, 0)
    except RecursionError as exc:
        raise ReaderError(_too_deep(name)) from exc
    text, _ = walker.out.render()
    if not text.strip():
        raise ReaderError(
            gettext("%(file)s has no text in its main content") % {"file": name}
        )
    return Reading(
        text=text,
        summary=walker.out.summary(),
        warnings=walker.warnings,
        anchors=walker.out.anchors(),
        structure=walker.out.structure(text),
    )


def _open_with_title(
    walker: _Walker, content: lxml.html.HtmlElement, title: str
) -> None:
    """The title as the level-1 heading of a page without an `h1`, or its first
    heading raised to level 1 when that heading says the same or the page has
    no title (a fragment without <head>, as FreedomBox's manual ships its
    pages: its name was the file's, "Firewall.part")."""
    if any(True for _ in content.iter("h1")):
        return
    first = next(content.iter(*_HEADINGS), None)
    if not title:
        walker.promoted = first
        return
    if first is not None and _titles(clean(first.text_content()), title):
        walker.promoted = first
    else:
        walker.out.heading(1, escape(title))


# Every element is an HtmlElement, chosen in C: lxml.html's default lookup
# calls Python for each element it hands out (to make forms and inputs their
# own classes, which this reader never uses), a tenth of the reading time of a
# manual whose every element has a class.
_ELEMENT_CLASSES = lxml.etree.ElementDefaultClassLookup(
    element=lxml.html.HtmlElement,
    comment=lxml.html.HtmlComment,
    pi=lxml.html.HtmlProcessingInstruction,
    entity=lxml.html.HtmlEntity,
)


# What parts a page's name from its site's in a title: "Path | Node.js v20
# Documentation", "Installation — Poetry", "Docs · GitLab".
_TITLE_PARTS_RE = re.compile(r"\s+(?:[|·•:—–-]|::|«|»)\s+")


def _titles(heading: str, title: str) -> bool:
    """Whether `heading` says what the page's title says: the same words, or
    the title's first part when it names its site after it ("Path | Node.js
    Documentation"; a last part is the site's name: "Installation — Poetry"
    over a brand heading "Poetry" is no title of "Poetry")."""
    heading, title = heading.casefold(), title.casefold()
    if not heading:
        return False
    parts = _TITLE_PARTS_RE.split(title)
    return heading == title or len(parts) > 1 and heading == parts[0]


def _parse(name: str, data: bytes) -> lxml.html.HtmlElement:
    try:
        markup: str | bytes = decoded_html(name, data) or data.decode("utf-8")
        markup = re.sub(r"^\s*<\?xml[^>]*>", "", markup)  # str input must not declare
    except UnicodeDecodeError:
        markup = data  # lxml reads the <meta charset> itself
    parser = lxml.html.HTMLParser(remove_comments=True, huge_tree=True)
    parser.set_element_class_lookup(_ELEMENT_CLASSES)
    try:
        root = lxml.html.document_fromstring(markup, parser=parser)
    except (lxml.etree.ParserError, ValueError) as exc:
        raise ReaderError(
            gettext("%(file)s could not be read as HTML: %(problem)s")
            % {"file": name, "problem": exc}
        ) from exc
    if any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):
        # libxml2 stops at 2,048 levels and drops the rest: refuse, not truncate
        raise ReaderError(_too_deep(name))
    return root


def _is_furniture(el: lxml.html.HtmlElement) -> bool:
    tag = el.tag
    if tag in _DROP_TAGS:
        return True
    if tag in ("header", "footer"):
        # a header inside an article or section is the article's own (its title)
        return not any(
            a.tag in ("article", "main", "section") for a in el.iterancestors()
        )
    attrib = el.attrib
    if attrib.get("role") in _DROP_ROLES or attrib.get("aria-hidden") == "true":
        return True
    if tag == "table" and _is_index_table(el):
        return True
    if tag in ("ul", "ol") and _is_page_contents(el):
        return True
    if tag == "dl" and _is_contents_terms(el):
        return True
    if attrib.get("hidden") is not None or "display:none" in (
        attrib.get("style") or ""
    ).replace(" ", ""):
        return True
    return _names_furniture(attrib.get("class") or "") or _names_furniture(
        attrib.get("id") or ""
    )


MIN_CONTENTS_LINKS = 3


def _is_page_contents(listing: lxml.html.HtmlElement) -> bool:
    """A nested list of nothing but links into the page: its table of
    contents (a one-page manual's, as Texinfo writes it), which names every
    heading. A flat list of links to the constants defined below stays: it
    is the text's own. Only an outermost list is read (once)."""
    if listing.getparent() is not None and listing.getparent().tag == "li":
        return False
    if not any(child.tag in ("ul", "ol") for li in listing for child in li):
        return False
    links = _only_links(listing, _is_page_link, 0)
    return links is not None and links >= MIN_CONTENTS_LINKS


def _is_contents_terms(dl: lxml.html.HtmlElement) -> bool:
    """A definition list of numbered links to anchors: DocBook's contents
    of a FAQ's division ("1. Background", "1.1. How do you pronounce...?"),
    the questions themselves following below."""
    entries = [child for child in dl if child.tag in ("dt", "dd")]
    return len(entries) >= 2 and all(_is_numbered_link(e) for e in entries)


_NUMBERING_RE = re.compile(r"(?:\d+|[A-Z])(?:\.\d+)*\.?")


def _is_numbered_link(entry: lxml.html.HtmlElement) -> bool:
    links = list(entry.iter("a"))  # to an anchor ("faq.html#faq.whence")
    if len(links) != 1 or "#" not in (links[0].get("href") or ""):
        return False
    number = entry.text_content().replace(links[0].text_content(), "", 1).strip()
    return not number or bool(_NUMBERING_RE.fullmatch(number))


def _is_page_link(link: lxml.html.HtmlElement) -> bool:
    return (link.get("href") or "").startswith("#")


def _is_index_table(table: lxml.html.HtmlElement) -> bool:
    """A manual's index (Texinfo's `index-cp`, Sphinx's `genindextable`) or its
    "Jump to:" row of letters: entries that point at the text, not text. Only
    an outermost table is read."""
    classes = (table.get("class") or "").split()
    if any(_INDEX_TABLE_RE.match(word) for word in classes):
        return True
    if any(a.tag == "table" for a in table.iterancestors()):
        return False
    return bool(_SUMMARY_LETTER_XPATH(table))


@functools.lru_cache(maxsize=4096)
def _names_furniture(words: str) -> bool:
    """Whether a word of a class or id attribute marks furniture (pages repeat
    their classes: each attribute value is matched once; ids are unique, so
    they are cached apart from classes)."""
    return any(_FURNITURE_RE.match(w) for w in words.split())


def _is_navigation(el: lxml.html.HtmlElement) -> bool:
    """Whether a class or id names navigation by one of its words: "top-nav",
    "main_menu", "breadcrumbs" (not "canvas" or "navigator"). An id counts
    except on a term, a heading or a link: their id is an anchor named for
    their text (Texinfo's `index-menu_002dcomplete`, the command `menu-complete`)."""
    attrib = el.attrib
    if _names_navigation(attrib.get("class") or ""):
        return True
    return el.tag not in _ANCHOR_TAGS and _names_navigation(attrib.get("id") or "")


# Elements whose id is an anchor named for their text, never navigation.
_ANCHOR_TAGS = frozenset(("dt", "dd", "a", "span", "code", "var", "samp", *_HEADINGS))


@functools.lru_cache(maxsize=4096)
def _names_navigation(words: str) -> bool:
    return not _NAVIGATION_WORDS.isdisjoint(_WORD_SPLIT_RE.split(words.lower()))


# The elements _is_furniture and _is_navigation can flag: a dropped tag, a
# header or footer, a table or list, or an attribute they read. (Tags are
# matched by iter(): libxml2's XPath tests of self:: are slower than a Python
# call per element.) A class or id counts only when one of its words names
# furniture or navigation: the page's distinct values are matched as strings
# first, and only the elements holding a matched value are handed to Python (a
# DocBook manual has a class on almost every element).
_FURNITURE_TAGS = (*sorted(_DROP_TAGS), "header", "footer", "table", "ul", "ol", "dl")
# (one XPath per attribute, its values' parents: a fifth of the time of one
# test of four attributes on each element)
_STATED_XPATHS = [
    lxml.etree.XPath(f"descendant-or-self::*/@{attribute}")
    for attribute in ("role", "aria-hidden", "hidden", "style")
]
# The class and id values of a page, as strings that know their element.
_OWNED_VALUES_XPATH = {
    attribute: lxml.etree.XPath(f"descendant-or-self::*/@{attribute}")
    for attribute in ("class", "id")
}


class _Names:
    """The class and id values of a page, each a string that knows its element
    (lxml's smart strings), listed in one walk per attribute; the passes that
    look for furniture, navigation and the main content then match the
    distinct values as strings, instead of each walking the tree again
    (libxml2 tests a value on each element in twice the time a listing
    takes, for each value tested)."""

    def __init__(self, body: lxml.html.HtmlElement) -> None:
        self.body = body
        self.values = {a: xpath(body) for a, xpath in _OWNED_VALUES_XPATH.items()}
        self.distinct = {a: set(map(str, v)) for a, v in self.values.items()}

    def elements(
        self, marks: Callable[[str, str], bool]
    ) -> list[lxml.html.HtmlElement]:
        """The elements whose class or id has a value that `marks` (some of
        them may have been dropped from the page since: see attached)."""
        found: list[lxml.html.HtmlElement] = []
        for attribute, values in self.values.items():
            marked = {v for v in self.distinct[attribute] if marks(attribute, v)}
            if marked:
                found += [value.getparent() for value in values if value in marked]
        return found

    def attached(
        self, elements: list[lxml.html.HtmlElement]
    ) -> list[lxml.html.HtmlElement]:
        """Those of `elements` still in the page."""
        return [
            el
            for el in elements
            if el is self.body or any(a is self.body for a in el.iterancestors())
        ]


def _maybe_furniture(
    body: lxml.html.HtmlElement, names: _Names
) -> list[lxml.html.HtmlElement]:
    found = dict.fromkeys(body.iter(*_FURNITURE_TAGS))
    for xpath in _STATED_XPATHS:
        found.update(dict.fromkeys(value.getparent() for value in xpath(body)))
    found.update(dict.fromkeys(names.elements(lambda _, v: _names_furniture(v))))
    return list(found)


def _maybe_navigation(names: _Names) -> list[lxml.html.HtmlElement]:
    # (one dropped with furniture is out of the page: dropping it does nothing)
    return list(dict.fromkeys(names.elements(lambda _, v: _names_navigation(v))))


def _drop_furniture(body: lxml.html.HtmlElement, names: _Names) -> None:
    _drop(_is_furniture, _maybe_furniture(body, names))
    for bar in _link_bars(body):
        if bar.getparent() is not None:
            bar.drop_tree()
    for link in _heading_marks(body):
        link.drop_tree()  # keeps its tail text
    for mark in _FOOTNOTE_MARKS(body):
        _drop_mark(mark)


def _drop_mark(mark: lxml.html.HtmlElement) -> None:
    """Drop a footnote mark, and the space before it when punctuation
    follows: "замените именем архива <a>[20]</a>." reads "архива.", not
    "архива ." (Debian's Russian manuals write the space)."""
    if (mark.tail or "")[:1] in _CLOSING_MARKS:
        previous = mark.getprevious()
        if previous is not None:
            previous.tail = (previous.tail or "").rstrip() or None
        elif (parent := mark.getparent()) is not None:
            parent.text = (parent.text or "").rstrip() or None
    mark.drop_tree()


# What no space goes before in any language (French spaces ";", ":" and "»").
_CLOSING_MARKS = frozenset(".,)")


# DocBook's footnote marks: "[62]" in the text, linking its footnote, and the
# same number opening the footnote (which the page's "Footnotes" section holds).
_FOOTNOTE_MARKS = lxml.etree.XPath(
    ".//a[starts-with(@href, '#ftn.')]"
    " | .//div[contains(@class, 'footnote')]/p/a[contains(@class, 'para')]"
)


# The sign of a link to a heading's own anchor, printed beside it ("Path#" in
# Node.js's API pages, "¶" in Sphinx's): not part of the heading's name.
_ANCHOR_SIGNS = frozenset(("#", "¶", "§", "🔗", "\uf0c1"))


def _heading_marks(body: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    marks = []
    for heading in body.iter(*_HEADINGS):
        links = [
            link
            for link in heading.iter("a")
            if (link.get("href") or "").startswith("#")
            and link.text_content().strip() in _ANCHOR_SIGNS
        ]
        if not links:
            continue
        text = heading.text_content().strip()
        sign = links[-1].text_content().strip()
        # the sign beside the heading's text, at its end or start; not a
        # heading that is only a sign, nor "Use the # operator"
        if text != sign and (text.endswith(sign) or text.startswith(sign)):
            marks.append(links[-1] if text.endswith(sign) else links[0])
    return marks


# Links between the pages or nodes of a manual, by their rel: Texinfo's
# "Next: … Up: … [Contents][Index]" bar heads every node of a one-page manual.
_NAVIGATION_RELS = frozenset(("next", "prev", "previous", "up", "contents", "index"))
MAX_BAR_TEXT = 30  # characters of a bar's own text, outside its links and spaces
# Texinfo names an index by two letters (index-cp, index-fn, index-vr; Bash's
# index-bt, index-rw): "index-top" or "index-row" are other tables' names.
_INDEX_TABLE_RE = re.compile(r"^(?:index-[a-z]{2}|.*printindex|(?:gen)?indextable)$")
_SUMMARY_LETTER_XPATH = lxml.etree.XPath(
    ".//a[contains(concat(' ', normalize-space(@class), ' '), ' summary-letter ')]"
)


def _link_bars(body: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """The paragraphs and divisions holding only links to the next, previous
    or parent node, the contents and the index (and a few words between)."""
    bars, seen = [], set()
    for link in body.iter("a"):
        if not _is_navigation_link(link):
            continue
        block = next(
            (a for a in link.iterancestors() if a.tag in ("p", "div", "td")), None
        )
        if block is None or block in seen:
            continue
        seen.add(block)
        if _only_links(block, _is_navigation_link, MAX_BAR_TEXT) is not None:
            bars.append(block)
    return bars


def _is_navigation_link(link: lxml.html.HtmlElement) -> bool:
    rel = (link.get("rel") or "").lower().split()
    return not _NAVIGATION_RELS.isdisjoint(rel) or bool(link.get("accesskey"))


def _only_links(
    el: lxml.html.HtmlElement,
    wanted: Callable[[lxml.html.HtmlElement], bool],
    most_text: int,
) -> int | None:
    """How many links `el` holds when every one is `wanted` and its own text
    (outside them, spaces left out) is at most `most_text` characters; else
    None. One walk, that stops at the first link or text too many."""
    links = own = inside = 0
    for event, node in lxml.etree.iterwalk(el, events=("start", "end")):
        if not isinstance(node.tag, str):
            continue
        if event == "start":
            if node.tag == "a":
                if not inside and not wanted(node):
                    return None
                links += not inside
                inside += 1
            if not inside:
                own += len("".join((node.text or "").split()))
        else:
            inside -= node.tag == "a"
            if node is not el and not inside:
                own += len("".join((node.tail or "").split()))
        if own > most_text:
            return None
    return links


def _drop(doomed_if, candidates: list[lxml.html.HtmlElement]) -> None:
    """Drop the elements of `candidates` (a C-side pass that leaves out those
    `doomed_if` cannot flag) that `doomed_if`; order does not matter."""
    doomed = [el for el in candidates if doomed_if(el)]
    for el in doomed:
        if el.getparent() is not None:
            el.drop_tree()  # keeps its tail text


def _main_content(body: lxml.html.HtmlElement, names: _Names) -> lxml.html.HtmlElement:
    for found in (
        body.findall(".//main"),
        body.xpath(".//*[@role='main']"),
        body.findall(".//article"),
    ):
        if len(found) == 1:
            return found[0]
    candidates = _content_candidates(body, names)
    for attribute, word in _CONTENT_MARKS:
        found = [
            el
            for el in candidates
            if (
                el.get("id") == word
                if attribute == "id"
                else word in (el.get("class") or "").split()
            )
        ]
        if len(found) == 1:
            return found[0]
    return body


def _content_candidates(
    body: lxml.html.HtmlElement, names: _Names
) -> list[lxml.html.HtmlElement]:
    """Every element one of _CONTENT_MARKS could pick (an id of theirs, a class
    holding one of their words' letters anywhere) still in the page;
    _main_content checks words."""
    found = dict.fromkeys(names.elements(_marks_content))
    return [el for el in names.attached(list(found)) if el is not body]


def _marks_content(attribute: str, value: str) -> bool:
    if attribute == "id":
        return value in _CONTENT_IDS
    return any(word in value for word in _CONTENT_CLASSES)


def _classes(el: lxml.html.HtmlElement) -> set[str]:
    return set((el.get("class") or "").split())


_TERM_COLON_RE = re.compile(r"\s*:$")


class _Walker:
    def __init__(self) -> None:
        self.out = Writer()
        self.warnings: list[str] = []
        self.promoted: lxml.html.HtmlElement | None = None  # written at level 1
        # inside a definition, a heading titles a note (DocBook's admonitions),
        # not a part of the page: read as a paragraph
        self.in_definition = 0

    # --- inline text ---------------------------------------------------------

    def inline(
        self, el: lxml.html.HtmlElement, skip_blocks: bool = False, depth: int = 0
    ) -> str:
        if depth > MAX_DEPTH:
            return escape(el.text_content())  # deeper nesting: not recursed into
        parts: list[str] = [(escape(el.text) if el.text else "")]
        for child in el:
            if isinstance(child.tag, str):
                if skip_blocks and child.tag in ("ul", "ol", "table", "pre"):
                    pass
                else:
                    parts.append(self._inline_child(child, depth + 1, skip_blocks))
            parts.append(escape(child.tail) if child.tail else "")
        return "".join(parts)

    def _inline_child(
        self, el: lxml.html.HtmlElement, depth: int = 0, skip_blocks: bool = False
    ) -> str:
        tag = el.tag
        if tag == "img":
            self.out.counts["images_dropped"] += 1
            alt = clean(el.get("alt") or "")
            return f" {escape(alt)} " if alt else " "
        if tag == "br":
            return "\n"
        if tag == "a" and el.get("href"):
            self.out.counts["links"] += 1
        if tag in _INLINE_CODE and el.getparent().tag != "pre":
            code = clean(el.text_content())
            return f"`{code}`" if code and "`" not in code else escape(code)
        text = self.inline(el, skip_blocks, depth)
        return f" {text} " if tag in _BLOCK_TAGS or tag in ("td", "th") else text

    # --- blocks --------------------------------------------------------------

    def container(self, el: lxml.html.HtmlElement, depth: int) -> None:
        """Blocks of an element whose children mix blocks and inline text."""
        if depth > MAX_DEPTH:
            self.out.paragraph(escape(el.text_content()))
            return
        loose: list[str] = [(escape(el.text) if el.text else "")]
        terms = _Terms(self)
        for child in el:
            if not isinstance(child.tag, str):
                loose.append(escape(child.tail) if child.tail else "")
                continue
            if child.tag == "br" and _breaks_paragraph(child):
                self.out.paragraph("".join(loose))  # a blank line: "<br><br>"
                loose = []
            elif child.tag in _BLOCK_TAGS:
                self.out.paragraph("".join(loose))
                loose = []
                if not terms.took(child, depth + 1):
                    self.block(child, depth + 1)
                terms.after(child)
            else:
                loose.append(self._inline_child(child))
            loose.append(escape(child.tail) if child.tail else "")
        terms.close()
        self.out.paragraph("".join(loose))

    def block(self, el: lxml.html.HtmlElement, depth: int) -> None:
        tag = el.tag
        classes = _classes(el)
        if tag in _HEADINGS and (
            self.in_definition or not _CREDITS.isdisjoint(classes)
        ):
            self.out.paragraph(self.inline(el))
        elif tag in _HEADINGS:
            level = 1 if el is self.promoted else _HEADINGS[tag]
            self.out.heading(level, self.inline(el), _anchor(el))
        elif tag == "dl":
            self.definitions(el, depth)
        elif tag == "div" and "segmentedlist" in classes:
            self.segmented(el, depth)
        elif tag == "p" or tag in ("dt", "figcaption", "address"):
            self.container(el, depth)
        elif tag in ("ul", "ol"):
            if "toggle" in classes:  # Notion toggle list: each item is a block
                for li in el.iterchildren("li"):
                    self.container(li, depth)
            else:
                self.list(el, 0, depth)
                following = el.getnext()
                if following is None or following.tag != tag:
                    self.out.end_list()  # Notion writes one list per item
        elif tag == "table" and _is_questions_table(el):
            self.questions(el, depth)
        elif tag == "table" and (cell := _only_cell(el)) is not None:
            self.container(cell, depth)  # a box around blocks, no data
        elif tag == "table":
            self.table(el)
        elif tag == "pre":
            self.code(el)
        elif (admonition := _docbook_admonition(el, classes)) is not None:
            self.admonition(*admonition)
        elif tag == "div" and "footnotes" in classes:
            self.out.footnotes_heading()  # as the DOCX reader names them
            self.container(el, depth)
        elif tag == "blockquote" or "callout" in classes or _is_panel(el):
            self.quote(el)
        elif tag == "img":
            self.out.paragraph(self._inline_child(el))
        elif tag == "hr":
            return
        elif tag == "summary":
            self.out.paragraph(self.inline(el))
        else:
            self.container(el, depth)

    def definitions(self, el: lxml.html.HtmlElement, depth: int) -> None:
        """Each term a heading one level below the last, its definitions after."""
        if apiref.is_field_list(el) or _in_admonition(el):
            self.fields(el, depth)
            return
        self.out.end_list()
        outer = self.out.enclosing()
        level = outer[0] + 1
        # Below the sixth level a term would read as its parent's sibling:
        # it stays at the sixth under its parent's name ("-o option-name
        # pipefail" of `set`, in the Bash manual's nested lists).
        parent = outer[1] if level > MAX_HEADING_LEVEL else ""
        terms: list[lxml.html.HtmlElement] = []
        any_term = False
        for child in _entries(el):
            if child.tag == "dt":
                terms.append(child)
                any_term = True
                continue
            if terms:
                self.term(terms, level, parent)
                terms = []
            self.in_definition += 1
            self.container(child, depth + 1)
            self.in_definition -= 1
        if terms:
            self.term(terms, level, parent)
        if any_term:
            self.out.reopen(*outer)

    def term(
        self, terms: list[lxml.html.HtmlElement], level: int, parent: str = ""
    ) -> None:
        """A term's heading, after its `parent` term's text when it is nested
        below the sixth level; a Sphinx object's short name, then its
        signatures."""
        signatures = [apiref.sphinx_signature(t) for t in terms]
        if all(signatures):
            name = escape(signatures[0][0])
            self.out.heading(level, f"{parent} {name}".strip(), _anchor(terms[0]))
            for name, signature in signatures:
                # an option's term is its whole signature; an attribute's is
                # its name ("fileobj" of `SelectorKey.fileobj`)
                if signature != name and not name.endswith(f".{signature}"):
                    self.out.code(signature)
            return
        text = ", ".join(t for t in (clean(self.inline(t)) for t in terms) if t)
        # the colon a glossary writes after its term ("/indices/:") is no
        # part of its name in a heading path
        text = _TERM_COLON_RE.sub("", text)
        self.out.heading(level, f"{parent} {text}".strip(), _anchor(terms[0]))

    def segmented(self, el: lxml.html.HtmlElement, depth: int) -> None:
        """A DocBook segmented list (aptitude's option reference: "Option:
        X", "Default: Y", "Description: ..." for each option) as a section
        per item, headed by its first segment's value, one level below the
        heading around the list, its anchor the item's; the other segments
        its paragraphs, each opening with its label. Read as one run of
        paragraphs, an option's name and default were chunked with the
        description of the option before it."""
        self.out.end_list()
        outer = self.out.enclosing()
        level = min(outer[0] + 1, MAX_HEADING_LEVEL)
        any_item = False
        for child in el:
            if not isinstance(child.tag, str):
                continue
            segs = [c for c in child if c.tag == "div" and "seg" in _classes(c)]
            if "seglistitem" not in _classes(child) or not segs:
                self.block(child, depth + 1)
                continue
            label = clean(" ".join(t.text_content() for t in _segtitles(segs[0])))
            name = clean(self.inline(segs[0]))
            name = name[len(label) :].strip() if name.startswith(label) else name
            anchor = next((a.get("id") for a in child.iter("a") if a.get("id")), "")
            self.out.heading(level, name, child.get("id") or anchor)
            any_item = True
            for seg in segs[1:]:
                blocks = [c for c in seg if c.tag in _BLOCK_TAGS]
                if all(b.tag == "p" for b in blocks) and len(blocks) <= 1:
                    self.out.paragraph(self.inline(seg))  # its label opens it
                else:
                    self.container(seg, depth + 1)
        if any_item:
            self.out.reopen(*outer)

    def fields(self, el: lxml.html.HtmlElement, depth: int) -> None:
        """A field list as items "Label: value", a field's own list nested."""
        self.out.end_list()
        label = ""
        for child in _entries(el):
            if child.tag == "dt":
                label = self.inline(child)
                continue
            self.out.item(0, f"{label} {self.inline(child, skip_blocks=True)}")
            self._blocks_of_item(child, 0, depth)
        self.out.end_list()

    def list(self, el: lxml.html.HtmlElement, level: int, depth: int) -> None:
        ordered = el.tag == "ol"
        try:
            number = int(el.get("start") or 1)
        except ValueError:
            number = 1
        for li in el:
            if not isinstance(li.tag, str):
                continue
            if li.tag in ("ul", "ol"):  # a list nested without its <li>
                self.list(li, level + 1, depth + 1)
                continue
            self.out.item(
                level, self.inline(li, skip_blocks=True), number if ordered else None
            )
            number += 1
            self._blocks_of_item(li, level, depth)

    def _blocks_of_item(
        self, item: lxml.html.HtmlElement, level: int, depth: int
    ) -> None:
        """The lists, tables and code an item holds, however deep in its
        paragraphs and divisions, after its text (which leaves them out)."""
        for child in item.iterdescendants("ul", "ol", "table", "pre"):
            if _nearest_owner(child, item):
                if child.tag in ("ul", "ol"):
                    self.list(child, level + 1, depth + 1)
                else:
                    self.out.end_list()
                    self.block(child, depth + 1)

    def questions(self, el: lxml.html.HtmlElement, depth: int) -> None:
        """A DocBook FAQ (`qandaset`) laid out as a table: each question a
        heading one level below its division's (or the heading above the
        table), its answer the text under it; the division's contents row
        is left out (the questions are all here)."""
        self.out.end_list()
        level = self.out.enclosing()[0]
        for tr in el.iter("tr"):
            if _owning_table(tr) is not el or tr.get("class") == "toc":
                continue
            cells = [c for c in tr if c.tag in ("td", "th")]
            if tr.get("class") == "question":
                question = clean(" ".join(self.inline(c) for c in cells))
                self.out.heading(
                    min(level + 1, MAX_HEADING_LEVEL), question, _anchor(tr)
                )
                continue
            for cell in cells:
                self.container(cell, depth + 1)
            if tr.get("class") == "qandadiv":  # its heading: questions go below
                level = self.out.enclosing()[0]

    def table(self, el: lxml.html.HtmlElement) -> None:
        """A pipe table, its <caption> as the paragraph above it; a row of one
        cell spanning columns (a group's label) keeps its text in the first
        column only, so it reads as a label, not as the same value in each."""
        rows: list[list[str]] = []
        header = False
        # a cell spanning rows, by column: its text and the rows it still covers
        spanning: dict[int, tuple[str, int]] = {}
        repeats = Repeats()
        bold: list[bool] = []  # of the first two rows: all their text bold
        for tr in el.iter("tr"):
            if _owning_table(tr) is not el:
                continue  # a row of a nested table
            cells = self._row_cells(tr, spanning, repeats)
            if not cells:
                continue
            if not rows:
                in_head = tr.getparent().tag == "thead"
                header = in_head or all(
                    c.tag == "th" for c in tr if c.tag in ("td", "th")
                )
            if len(bold) < 2:
                bold.append(_all_bold(tr))
            rows.append(cells)
        # a first row of bold cells over rows that are not (wikis and DocBook
        # exports write their column names so, in <td>)
        header = header or bold == [True, False]
        self.out.end_list()
        caption = el.find("caption")
        if caption is not None:
            self.out.paragraph(self.inline(caption))
        if not header and _laid_out(rows):
            self._as_lines(rows)
            return
        if not header and el.get("border") == "0" and _laid_out_terms(rows):
            for row in rows:
                term, definition = [c for c in row if _holds_text(c)]
                self.out.definition(term.rstrip().removesuffix(":"), [definition])
            return
        self.out.table(rows, header)

    def _as_lines(self, rows: list[list[str]]) -> None:
        """A table used to lay text out: each row's text a list item when a
        bullet marks it, else a paragraph."""
        for row in rows:
            text = next((c for c in row if _holds_text(c)), "")
            if not text:
                continue
            if any(_MARKER_RE.fullmatch(clean(c)) for c in row if clean(c)):
                self.out.item(0, text)
            else:
                self.out.paragraph(text)
        self.out.end_list()

    def _row_cells(
        self,
        tr: lxml.html.HtmlElement,
        spanning: dict[int, tuple[str, int]],
        repeats: Repeats,
    ) -> list[str]:
        cells: list[str] = []
        own = [cell for cell in tr if cell.tag in ("td", "th")]
        for cell in own:
            _spanned(cells, spanning, repeats)
            text = repeats.read(self.inline(cell))
            down = _span(cell.get("rowspan"), MAX_ROWSPAN, zero=MAX_ROWSPAN)
            rows_left = down - 1
            for i in range(_span(cell.get("colspan"), MAX_COLSPAN)):
                if rows_left > 0:  # a spanned cell repeats under its column
                    spanning[len(cells)] = (text, rows_left)
                cells.append(repeats.again(text) if i else text)
        last = max(spanning, default=-1)
        while len(cells) <= last:
            if not _spanned(cells, spanning, repeats):
                cells.append("")
        if len(own) == 1 and len(cells) > 1 and not spanning and cells[0] == text:
            return cells[:1]  # a group's label, spanning the row
        return cells

    def code(self, el: lxml.html.HtmlElement) -> None:
        flavours = [child for child in el if child.tag == "code"]
        classes = {child.get("class") or "" for child in flavours}
        if (
            len(flavours) > 1
            and len(classes) == len(flavours)  # "language-js cjs", "... mjs"
            and not _text_beside(el, flavours)
        ):
            # one listing in several flavours, side by side (Node.js's
            # CommonJS and ES module examples): a block each, not one line
            for code in flavours:
                self.code(code)
            return
        language = ""
        for node in (el, *el.iter("code")):
            found = _BRUSH_RE.search(node.get("data-syntaxhighlighter-params") or "")
            found = found or _LANG_RE.search(node.get("class") or "")
            if found:
                language = found.group(1)
                break
        self.out.end_list()
        self.out.code(_text_with_breaks(el), language)

    def admonition(self, label: str, body: list[lxml.html.HtmlElement]) -> None:
        """A note, tip or warning as a quote opening with its label:
        "> Note: Careful here." (not a heading, which would take the text
        after the note under it, nor a table)."""
        self.out.end_list()
        paragraphs = [
            p for el in body for p in self._paragraphs(el, 0) if re.search(r"\w", p)
        ]
        if paragraphs:
            paragraphs[0] = (
                f"{escape(label)}: {paragraphs[0]}" if label else paragraphs[0]
            )
            self.out.quote(paragraphs)

    def quote(self, el: lxml.html.HtmlElement) -> None:
        self.out.end_list()
        paragraphs = self._paragraphs(el, 0)  # without a callout's lone icon
        self.out.quote([p for p in paragraphs if re.search(r"\w", p)])

    def _paragraphs(self, el: lxml.html.HtmlElement, depth: int) -> list[str]:
        """The paragraphs of a block quote or panel, nested blocks flattened."""
        paragraphs: list[str] = []
        loose: list[str] = [(escape(el.text) if el.text else "")]
        for child in el:
            if isinstance(child.tag, str) and child.tag in _BLOCK_TAGS:
                paragraphs.append("".join(loose))
                loose = []
                if child.tag == "table" and depth <= MAX_DEPTH:
                    paragraphs += [  # a row a line, its cells after ": "
                        escape(": ".join(_cell_texts(tr)))
                        for tr in child.iter("tr")
                        if _owning_table(tr) is child
                    ]
                elif child.tag == "pre" or depth > MAX_DEPTH:
                    paragraphs.append(escape(clean(child.text_content())))
                elif child.tag in ("ul", "ol"):
                    paragraphs += [self.inline(li) for li in child.iter("li")]
                elif child.tag in ("div", "section", "blockquote", "figure"):
                    paragraphs += self._paragraphs(child, depth + 1)
                else:
                    paragraphs.append(self.inline(child))
            elif isinstance(child.tag, str):
                loose.append(self._inline_child(child))
            loose.append(escape(child.tail) if child.tail else "")
        paragraphs.append("".join(loose))
        return paragraphs


def _is_questions_table(table: lxml.html.HtmlElement) -> bool:
    """DocBook XSL's table of a `qandaset`: rows of class question and answer."""
    kinds = {tr.get("class") for tr in table.iter("tr") if _owning_table(tr) is table}
    return {"question", "answer"} <= kinds


def _breaks_paragraph(br: lxml.html.HtmlElement) -> bool:
    """Whether a line break is the first of two with nothing between them: a
    blank line of a text set line by line (DocBook's literallayout, a README
    in HTML), where a paragraph ends."""
    following = br.getnext()
    return (
        following is not None and following.tag == "br" and not (br.tail or "").strip()
    )


def _text_with_breaks(el: lxml.html.HtmlElement) -> str:
    """An element's text with each <br> as the line break it shows (gtk-doc's
    prototypes break their lines so); its text_content() drops them."""
    if next(el.iter("br"), None) is None:
        return el.text_content()
    parts: list[str] = []
    for event, node in lxml.etree.iterwalk(el, events=("start", "end")):
        if event == "start":
            if node.tag == "br":
                parts.append("\n")
            elif isinstance(node.tag, str) and node.text:
                parts.append(node.text)
        elif node is not el and node.tail:
            parts.append(node.tail)
    return "".join(parts)


def _text_beside(el: lxml.html.HtmlElement, children: list) -> bool:
    """Whether `el` holds text of its own outside `children`."""
    own = [el.text, *(c.tail for c in el)]
    own += [
        c.text_content() for c in el if c not in children and isinstance(c.tag, str)
    ]
    return any(part and part.strip() for part in own)


def _entries(dl: lxml.html.HtmlElement) -> Iterator[lxml.html.HtmlElement]:
    """The terms and definitions of a list, through `<div>` groups."""
    for child in dl:
        if child.tag == "div":
            yield from _entries(child)
        elif child.tag in ("dt", "dd"):
            yield child


def _anchor(el: lxml.html.HtmlElement) -> str:
    """The id a link to this heading or term would use: its own, else that of
    an anchor inside it (`<h2><a id="RUNTIME-CONFIG-LOGGING"></a>20.8. ...`),
    else that of the element it opens (`<div class="refsect1" id=...><h2>`,
    empty labels before it left aside)."""
    if el.get("id"):
        return el.get("id")
    for a in el.iter("a"):
        if not a.get("href") and (a.get("id") or a.get("name")):
            return a.get("id") or a.get("name")
    parent = el.getparent()
    if parent is None:
        return ""
    # the first child, after empty labels (Sphinx's `<span id="sizes"></span>`)
    first = next((c for c in parent.iterchildren("*") if not _is_label(c)), None)
    return (parent.get("id") or "") if first is el else ""


def _is_label(el: lxml.html.HtmlElement) -> bool:
    """An empty span or anchor that names a place: a link target, not text."""
    return (
        el.tag in ("span", "a")
        and bool(el.get("id") or el.get("name"))
        and not el.get("href")
        and not el.text_content().strip()
    )


def _in_admonition(el: lxml.html.HtmlElement) -> bool:
    """Inside a note, warning or "See also" box (Sphinx's `admonition`): its
    terms are the box's list ("Module calendar: General calendar related
    functions."), not headings of the page."""
    return any("admonition" in _classes(a) for a in el.iterancestors("div"))


_ADMONITIONS = frozenset(("note", "tip", "warning", "caution", "important"))


# The classes of a DocBook title page's names ("<h3 class='author'>Josip
# Rodin</h3>"): a person, no part of the book. As headings, each author's
# e-mail was a section, and the copyright and abstract were under the last.
_CREDITS = frozenset(("author", "editor", "othercredit", "corpauthor", "collab"))


def _segtitles(seg: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    return [t for t in seg.iter("span") if "segtitle" in _classes(t)]


def _all_bold(tr: lxml.html.HtmlElement) -> bool:
    """Whether the text of each of a row's cells that holds any is all bold
    (<strong>, <b>): column names in <td> cells (FreedomBox's manual, as
    DocBook writes MoinMoin's tables)."""
    texts = 0
    for cell in tr:
        if cell.tag not in ("td", "th"):
            continue
        text = clean(cell.text_content())
        if not text:
            continue
        strong = " ".join(clean(b.text_content()) for b in cell.iter("strong", "b"))
        if clean(strong) != text:
            return False
        texts += 1
    return texts > 0


def _only_cell(table: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    """The cell of a table of one row of one cell and no caption: a frame
    that lays out what it holds (DocBook's "manufactured viewport" around a
    screenshot, a boxed note), which reads as that, not as a table of a
    "Column 1"."""
    if table.find("caption") is not None:
        return None
    # (up to a second row: every table of a page is asked, a big one too)
    owned = (tr for tr in table.iter("tr") if _owning_table(tr) is table)
    rows = list(itertools.islice(owned, 2))
    if len(rows) != 1:
        return None
    cells = [cell for cell in rows[0] if cell.tag in ("td", "th")]
    return cells[0] if len(cells) == 1 else None


def _docbook_admonition(
    el: lxml.html.HtmlElement, classes: set[str]
) -> tuple[str, list[lxml.html.HtmlElement]] | None:
    """(label, body) of a DocBook admonition: a div classed note, tip,
    warning, caution or important whose first element is its title heading
    ("<h3 class='title'>Note</h3>", as PostgreSQL's manual prints it) or a
    table summarised as one (the icon, the label, the text: Debian's
    manuals); else None."""
    if el.tag != "div" or _ADMONITIONS.isdisjoint(classes):
        return None
    children = [child for child in el if isinstance(child.tag, str)]
    if not children:
        return None
    first = children[0]
    if first.tag in _HEADINGS:
        return clean(first.text_content()), children[1:]
    summary = (first.get("summary") or "").strip().lower()
    if first.tag == "table" and summary in _ADMONITIONS:
        labels = first.xpath(".//th")
        label = clean(labels[0].text_content()) if labels else summary.capitalize()
        cells = [td for td in first.iter("td") if clean(td.text_content())]
        return label, cells
    return None


def _is_panel(el: lxml.html.HtmlElement) -> bool:
    """Confluence's information/note/warning/tip macros, AsciiDoc's
    admonitions (a table of the label "Note" and the text, as git's manual
    pages have them) and plain panels."""
    classes = _classes(el)
    return (
        "confluence-information-macro" in classes
        or "admonitionblock" in classes
        or ("panel" in classes and "code" not in classes)
    )


def _cell_texts(tr: lxml.html.HtmlElement) -> list[str]:
    """The texts of a row's cells that hold any."""
    texts = (clean(c.text_content()) for c in tr if c.tag in ("td", "th"))
    return [t for t in texts if t]


def _nearest_owner(el: lxml.html.HtmlElement, li: lxml.html.HtmlElement) -> bool:
    """Whether `li` (a list item, a field's value) is the closest item around
    `el` (not a nested one's)."""
    for ancestor in el.iterancestors():
        if ancestor is li:
            return True
        if ancestor.tag in ("li", "ul", "ol", "table", "pre"):
            return False
    return False


def _span(value: str | None, limit: int, zero: int = 1) -> int:
    """A colspan or rowspan: 1 unless a number, `zero` for 0, at most `limit`."""
    value = (value or "").strip()
    if not value.isdigit():
        return 1
    return min(int(value), limit) or zero


def _spanned(
    cells: list[str], spanning: dict[int, tuple[str, int]], repeats: Repeats
) -> bool:
    """Append the cells that rows above span into here; whether there were any."""
    found = False
    while len(cells) in spanning:
        text, rows_left = spanning.pop(len(cells))
        if rows_left > 1:
            spanning[len(cells)] = (text, rows_left - 1)
        cells.append(repeats.again(text))
        found = True
    return found


class _Terms:
    """Terms written as indented paragraphs, as `groff -Thtml` prints a man
    page's options: a paragraph of bold or italic words alone ("--compress,
    -z") over paragraphs indented further (its description). Each term becomes
    a heading one level below the heading around it, as a <dl>'s terms do
    (_Walker.definitions), and the text after its description goes back under
    that heading."""

    def __init__(self, reader: _Walker) -> None:
        self.reader = reader
        self.margin: float | None = None  # the open term's indent
        self.outer: tuple[int, str] | None = None

    def took(self, el: lxml.html.HtmlElement, depth: int) -> bool:
        """Whether `el` is a term (written as a heading here, with the
        description a one-row table may hold beside it)."""
        found = _term_of(el)
        if found is None:
            return False
        margin, term, description = found
        self._end_term()
        out = self.reader.out
        if self.outer is None:
            out.end_list()
            self.outer = out.enclosing()
        out.heading(self.outer[0] + 1, clean(self.reader.inline(term)), _anchor(el))
        self.margin = margin
        self.reader.in_definition += 1
        if description is not None:
            self.reader.container(description, depth + 1)
        return True

    def after(self, el: lxml.html.HtmlElement) -> None:
        """Close the open term when the next paragraph is indented no deeper
        (or a heading, or nothing, comes next)."""
        if self.outer is None:
            return
        following = el.getnext()
        if following is None or following.tag in _HEADINGS:
            self.close()  # the next heading opens terms of its own
            return
        if self.margin is None:
            return
        if following.tag == "table":
            margin = _table_indent(following)  # indented less: not the term's
            if margin is None:
                return
        elif following.tag != "p":
            return  # a code block of the description
        else:
            margin = _margin(following)
        if margin is None or margin <= self.margin:
            self._end_term()
            self.reader.out.reopen(*self.outer)

    def close(self) -> None:
        self._end_term()
        if self.outer is not None:
            self.reader.out.reopen(*self.outer)
            self.outer = None

    def _end_term(self) -> None:
        if self.margin is not None:
            self.margin = None
            self.reader.in_definition -= 1


_MARGIN_RE = re.compile(r"margin-left:\s*([\d.]+)\s*%")
_PERCENT_RE = re.compile(r"\s*([\d.]+)%\s*")  # a cell's width
MAX_TERM_CHARS = 80  # an indented term is a name and its arguments, not prose


def _margin(el: lxml.html.HtmlElement) -> float | None:
    """A paragraph's left margin in percent, as groff writes it in `style`."""
    if el.tag != "p":
        return None
    found = _MARGIN_RE.search(el.get("style") or "")
    return float(found.group(1)) if found else None


_Term = tuple[float, lxml.html.HtmlElement, lxml.html.HtmlElement | None]


def _term_of(el: lxml.html.HtmlElement) -> _Term | None:
    """(indent in percent, the term, the cell holding its description or
    None) when `el` is a term as groff lays one out: a term paragraph, or a
    one-row table (_table_term), with its description beside it or in the
    paragraph after it, indented deeper."""
    if el.tag == "table":
        found = _table_term(el)
    elif (margin := _margin(el)) is not None and _is_term_paragraph(el):
        found = (margin, el, None)
    else:
        return None
    if found is None or found[2] is not None:
        return found
    following = el.getnext()
    deeper = _margin(following) if following is not None else None
    return found if deeper is not None and deeper > found[0] else None


def _table_indent(table: lxml.html.HtmlElement) -> float | None:
    """The indent (percent) of a table's first row's text: the widths of the
    empty cells before it, as groff lays text out; None without them."""
    row = next((tr for tr in table.iter("tr") if _owning_table(tr) is table), None)
    indent = 0.0
    for cell in row if row is not None else ():
        if cell.tag not in ("td", "th"):
            continue
        if cell.text_content().strip():
            return indent or None
        found = _PERCENT_RE.fullmatch(cell.get("width") or "")
        if found is None:
            return None
        indent += float(found.group(1))
    return None


def _table_term(table: lxml.html.HtmlElement) -> _Term | None:
    """A term groff lays out as a table of one row: spacer cells, the term's
    cell ("-P", "-i[SUFFIX], --in-place[=SUFFIX]"), and maybe its description
    in a cell beside it. (indent in percent, term cell, description cell)."""
    rows: list[lxml.html.HtmlElement] = []
    for tr in table.iter("tr"):
        if _owning_table(tr) is table:
            rows.append(tr)
            if len(rows) > 1:
                return None  # a table of many rows: no need to read on
    if not rows:
        return None
    cells = [c for c in rows[0] if c.tag in ("td", "th")]
    filled = [i for i, c in enumerate(cells) if c.text_content().strip()]
    indent = _table_indent(table)
    if not filled or len(filled) > 2 or not indent:
        return None
    term = cells[filled[0]]
    blocks = [c for c in term if isinstance(c.tag, str)]
    inner = blocks[0] if len(blocks) == 1 and blocks[0].tag == "p" else term
    if not _is_term_paragraph(inner):
        return None
    description = cells[filled[1]] if len(filled) == 2 else None
    return indent, inner, description


def _is_term_text(text: str) -> bool:
    """Short, without a full stop or colon at its end: a name and its
    arguments, not a sentence."""
    return bool(text) and len(text) <= MAX_TERM_CHARS and text[-1] not in ".:;?!"


def _is_term_paragraph(el: lxml.html.HtmlElement) -> bool:
    """A name and its arguments, not a sentence: "--compress, -z", "-mtime n",
    "-I replace-str" (_is_term_text, and nothing but bold or italic elements
    in it)."""
    if not _is_term_text(" ".join(el.text_content().split())):
        return False
    return all(
        child.tag in ("b", "i", "strong", "em", "code", "tt")
        for child in el
        if isinstance(child.tag, str)
    )


# A cell that only marks a line: a bullet (groff writes "o", "+" or "-"), a dash,
# or a number of an ordered list.
_MARKER_RE = re.compile(r"[o+*\-\u2022\u00b7\u2013\u2014]|\d{1,3}[.)]")


def _holds_text(cell: str) -> bool:
    text = clean(cell)
    return bool(text) and not _MARKER_RE.fullmatch(text)


def _laid_out(rows: list[list[str]]) -> bool:
    """Whether a table without a header row lays text out rather than holding
    data: each row has one cell of text at most, the others empty or a
    bullet ("| | o | | support for copying links |", as groff -Thtml writes a
    man page's lists). A table of one column is left a table."""
    return max((len(row) for row in rows), default=0) > 1 and all(
        sum(_holds_text(c) for c in row) <= 1 for row in rows
    )


def _laid_out_terms(rows: list[list[str]]) -> bool:
    """Whether a borderless table without a header row lays out terms and
    their definitions, as groff prints find(1)'s "-P | Never follow symbolic
    links": in every row a spacer cell, a short term, then its text. Or, with
    no spacer, a term ending in a colon: gtk-doc's parameters ("`URI`: | the
    URI of the document to load"), which read as "Column 1 | Column 2"; a
    table of values ("Total: | 42") is data."""
    labelled = described = False
    for row in rows:
        texts = [clean(c) for c in row if _holds_text(c)]
        if len(texts) != 2:
            return False
        term = texts[0]
        if len(texts) == len(row):  # no spacer: a label over a description
            if not term.endswith(":"):
                return False
            term = term[:-1].rstrip()
            labelled = True
            described = described or len(texts[1].split()) > 1
        if not _is_term_text(term):
            return False
    return bool(rows) and (described or not labelled)


def _owning_table(tr: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    for ancestor in tr.iterancestors():
        if ancestor.tag == "table":
            return ancestor
    return None


def _too_deep(name: str) -> str:
    return gettext("%(file)s is nested too deeply to read") % {"file": name}
