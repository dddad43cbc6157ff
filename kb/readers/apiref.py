"""Generated API reference in HTML -> plain HTML the HTML reader walks (issue #29).

`javadoc(body)` rebuilds a Javadoc class page (javadoc 8, 11 and 17 layouts) as
the class heading (h1), the package line and class overview, then one h2 per
member (field, constructor, method, enum constant, annotation element): its id
is the member's anchor and its text the member's name and parameter types
(`isBlank(CharSequence)`), followed by the signature (`pre`), the description
and the block tags as a list ("Parameters: cs - the CharSequence to check").
The summary tables, which repeat the details, and the inherited-member lists
are left out. A page without member details (package, overview, index pages)
returns None and is read as any page.

`rustdoc(body)` rebuilds a rustdoc page (a struct, enum, trait or function;
a module's or crate's page, a list of items, is read as any page) the same
way: the item's heading, its declaration as code and its description; then
each impl block a section (h2, `impl Duration`) and each of its members one
(h3, `Duration::new`, with the member's anchor as its id): its signature as
code, "Stable since Rust version 1.3.0." and its docs, whose "Panics" and
"Examples" are sections under it. Enum variants and struct fields are members
too. Auto-trait and blanket impls (the same on every page) are left out, with
the page's furniture ("source", "[−]", "Run", "Read more").

`pydoc(body, title)` rebuilds a page `python -m pydoc -w` writes (Python 3.11
and later): the module's heading and docstring, each class a section (h2,
`class shlex(builtins.object)`, its anchor as its id) with one section per
member it defines (h3, `shlex.get_token`), the functions one each under
"Functions" (`shlex.join`), then "Data". Docstrings keep their line breaks:
paragraphs, and indented lines or doctests as code. The modules it imports,
a package's contents, the class tree and inherited members are left out.

`doxygen(body)` rebuilds a Doxygen page (1.6 to 1.9) the same way: its title
and description, each documentation group a section ("Member Function
Documentation") of one section per member (h3, `Json::Value::append`, its
anchor as its id): the signature as code and the docs, whose parameters,
return value and notes are a list. The summary tables are left out but for
the members they alone document.

`sphinx_signature(dt)` reads the term of a Sphinx object description
(`<dl class="py method"><dt class="sig" id=...>`) as a short name and its
signature; `is_field_list(dl)` tells the lists of an object's fields
(Parameters, Returns, Raises), which stay lists, from other definition lists.

No ORM: lxml elements in, lxml elements out; `body` is changed in place only
by removing the elements it no longer needs.
"""

from __future__ import annotations

import copy
import re
from collections import Counter

import lxml.etree
import lxml.html
from lxml.html import builder as E

# javadoc 17: a section with the member's id holding its signature
_JAVADOC17_MEMBERS = (
    ".//section[contains(concat(' ', normalize-space(@class), ' '), ' detail ')]"
    "[@id][.//div[contains(@class, 'member-signature')]]"
)
# javadoc 8 and 11: a list item headed by an h4 with a pre signature, after
# the member's anchor
_JAVADOC11_MEMBERS = ".//ul[contains(@class, 'blockList')]/li[h4][pre]"
_CLASS_HEADING = ".//*[self::h1 or self::h2][contains(@class, 'title')]"
_SUB_TITLE = ".//*[contains(@class, 'sub-title') or contains(@class, 'subTitle')]"
_OVERVIEW = (
    ".//section[contains(@class, 'class-description')]",  # javadoc 17
    ".//div[@class='description']/ul/li",  # javadoc 8 and 11
)
_SIGNATURE_CLASSES = {"member-signature", "type-signature", "methodSignature"}
_PACKAGE_RE = re.compile(r"\b(?:[a-z_]\w*\.)+(?=[A-Za-z_])")
# Sphinx object descriptions: the domains' directives and the field lists
_SPHINX_DOMAINS = {"py", "c", "cpp", "js", "rst", "std"}
_FIELD_LIST_CLASSES = {"field-list", "docinfo", "footnote", "citation"}
_PAREN_SPACE_RE = re.compile(r"\s+(?=[()])|(?<=\()\s+")
_LINK_MARKS = (
    ".//*[contains(@class, 'headerlink') or contains(@class, 'viewcode-link')]"
)


def javadoc(body: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    """The page's class and its members, rebuilt; None if it lists no members."""
    members = _members(body)
    if not members:
        return None
    page = E.DIV()
    heading = _first(body, _CLASS_HEADING)
    if heading is not None:
        page.append(E.H1(_text(heading)))
    package = _first(body, _SUB_TITLE)
    if package is not None:
        page.append(E.P(_text(package)))
    for xpath in _OVERVIEW:
        overview = _first(body, xpath)
        if overview is not None:
            page.extend(_parts(overview))
            break
    for anchor, member in members:
        page.append(E.H2(_member_name(anchor, member), id=anchor))
        page.extend(_parts(member))
    return page


# rustdoc: the page's parts, in document order
_RUSTDOC_PARTS = lxml.etree.XPath(
    ".//h1[contains(@class, 'fqn')] | .//div[contains(@class, 'main-heading')]/h1"
    " | .//*[contains(@class, 'item-decl')]"
    " | .//details[contains(@class, 'top-doc')]/div[contains(@class, 'docblock')]"
    " | .//*[self::section or self::div][@id][*[contains(@class, 'code-header')]]"
    " | .//h2[starts-with(@id, 'deref-methods')]"
    " | .//*[@id][contains(@class, 'section-header')]"
    "[contains(concat(' ', normalize-space(@class), ' '), ' variant ')"
    " or contains(concat(' ', normalize-space(@class), ' '), ' structfield ')]"
)
_RUSTDOC_LEFT_OUT = (  # impls every type has; a trait's implementors
    "synthetic-implementations-list",
    "blanket-implementations-list",
    "implementors-list",
)
_RUSTDOC_FURNITURE = lxml.etree.XPath(
    ".//*[contains(@class, 'test-arrow') or contains(@class, 'anchor')"
    " or contains(@class, 'tooltip') or contains(@class, 'notable-traits')"
    " or contains(@class, 'rightside') or contains(@class, 'srclink')]"
    " | .//button | .//a[normalize-space() = 'Read more']"
)
_HEADING_TAGS = ("h1", "h2", "h3", "h4", "h5", "h6")


def rustdoc(body: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    """A rustdoc page rebuilt (see above); None for any other page."""
    classes = (body.get("class") or "").split()
    if "rustdoc" not in classes:
        return None
    if "mod" in classes:  # a module's or crate's page: its item lists, as any
        for mark in _RUSTDOC_PAGE_FURNITURE(body):  # page, without furniture
            mark.drop_tree()
        return None
    left_out = {
        el for name in _RUSTDOC_LEFT_OUT for el in body.xpath(f".//*[@id='{name}']")
    }
    page = E.DIV()
    item = ""  # the page's item: "Duration"
    inherent = True  # the item's own members: a trait's, `impl Duration`'s
    for part in _RUSTDOC_PARTS(body):
        if any(a in left_out for a in part.iterancestors()):
            continue
        classes = set((part.get("class") or "").split())
        if part.tag == "h1":
            title = _without_furniture(part)
            item = title.rsplit("::", 1)[-1].split()[-1] if title else ""
            page.append(E.H1(title))
            page.extend(_since(part.getparent()))  # the item's version
        elif part.tag == "h2":  # "Methods from Deref<Target = str>"
            heading = _text(part)
            page.append(E.H2(heading, id=part.get("id")))
            target = _DEREF_TARGET_RE.search(heading)
            item = target.group(1).strip() if target else item
            inherent = True  # its members are the target's: `str::len`
        elif "item-decl" in classes:
            page.append(E.PRE(_code(part)))
        elif "docblock" in classes:  # the item's description
            page.extend(_docs(part, None))
        elif _is_member(part) and part.get("id", "").startswith("impl"):
            header = _signature(_header(part))
            inherent = " for " not in header
            page.append(E.H2(header, id=part.get("id")))
            page.extend(_since(part))
            page.extend(_member_docs(part))
        else:
            anchor = part.get("id")
            name = (
                anchor.split(".", 1)[-1].rsplit("-", 1)[0] if "." in anchor else anchor
            )
            if item and (inherent or not _is_member(part)):
                name = f"{item}::{name}"  # a variant, a field: the item's
            page.append(E.H3(name, id=anchor))
            if _is_member(part):
                page.append(E.PRE(_signature(_header(part))))
                page.extend(_since(part))
            elif (declared := _without_furniture(part)) != name.rsplit(":", 1)[-1]:
                page.append(E.PRE(declared))  # "NotUnicode(OsString)"
            page.extend(_member_docs(part))
    return page if len(page) else None


_PYDOC_SECTIONS = lxml.etree.XPath(
    ".//table[contains(concat(' ', normalize-space(@class), ' '), ' section ')]"
)
_PYDOC_LEFT_OUT = {"Modules", "Package Contents", "Submodules"}
_PYDOC_EVERY_CLASS = {"__dict__", "__weakref__"}  # what every class says


def pydoc(body: lxml.html.HtmlElement, title: str) -> lxml.html.HtmlElement | None:
    """A pydoc page rebuilt (see above); None for any other page."""
    if not title.startswith("Python: "):
        return None  # (before walking the page: every HTML page comes here)
    heading = body.xpath(
        ".//table[contains(@class, 'heading')]//strong[contains(@class, 'title')]"
    )
    if not heading:
        return None
    module = _text(heading[0])
    page = E.DIV(E.H1(title.removeprefix("Python: ")))
    table = next(heading[0].iterancestors("table"))
    for el in table.itersiblings():
        if el.tag == "table":
            break
        for code in el.xpath(".//span[contains(@class, 'code')] | .//tt"):
            page.extend(_docstring(code))
    sections = _PYDOC_SECTIONS(body)
    for section in sections:
        if any(a in sections for a in section.iterancestors("table")):
            continue  # a class, read with its "Classes"
        name = _section_title(section)
        if name in _PYDOC_LEFT_OUT:
            continue
        if name == "Classes":
            for cls in _PYDOC_SECTIONS(section):
                page.extend(_pydoc_class(cls))
            continue
        page.append(E.H2(name))
        cell = section.xpath(".//td[contains(@class, 'singlecolumn')]")
        if not cell:
            continue
        if name == "Functions":
            page.extend(_pydoc_members(cell[0], module))
        elif name == "Data":  # one constant a line: "hexdigits = '0123...'"
            page.extend(E.P(line) for line in _lines(cell[0]) if line.strip())
        else:
            page.extend(_docstring(cell[0]))
    return page


def _section_title(section: lxml.html.HtmlElement) -> str:
    found = section.xpath(".//td[contains(@class, 'section-title')]")
    return _text(found[0]) if found else ""


# A class table's own rows (lxml may add a tbody): its docstring, its members
_CLASS_DOCSTRING = lxml.etree.XPath(
    "(./tr | ./tbody/tr)/td[contains(@class, 'title-decor')][@colspan]/span"
)
_OWN_CELLS = lxml.etree.XPath(
    "(./tr | ./tbody/tr)/td[contains(@class, 'singlecolumn')]"
)


def _pydoc_class(cls: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """A class's section: its title, docstring and the members it defines."""
    named = cls.xpath(".//td[contains(@class, 'section-title')]//a[@name]")
    anchor = named[0].get("name") if named else None
    name = (
        _text(named[0].find("strong"))
        if named and named[0].find("strong") is not None
        else ""
    )
    parts = [
        E.H2(_section_title(cls), id=anchor) if anchor else E.H2(_section_title(cls))
    ]
    for doc in _CLASS_DOCSTRING(cls):
        said = _docstring(doc)
        if said and name and said[0].tag == "p" and _text(said[0]).startswith(name):
            said[0].tag = "pre"  # "shlex(instream=None, ...)": how it is made
        parts += said
    cells = _OWN_CELLS(cls)
    if cells:
        parts += _pydoc_members(cells[-1], name or anchor or "")
    return parts


def _pydoc_members(cell: lxml.html.HtmlElement, owner: str) -> list:
    """The members of a class or module cell (one `dl` each, under labels such
    as "Methods defined here:"), but those inherited."""
    parts: list[lxml.html.HtmlElement] = []
    inherited = "inherited from" in (cell.text or "")
    for el in cell:
        if el.tag == "hr":
            inherited = "inherited from" in (el.tail or "")
        elif el.tag == "dl" and not inherited:
            for dt in el.findall("dt"):
                named = dt.find("a")
                label = dt.find(".//strong")
                member = _text(label) if label is not None else _text(dt)
                if member in _PYDOC_EVERY_CLASS or named is None and label is None:
                    continue  # "Method resolution order:" over the class's bases
                anchor = named.get("name") if named is not None else None
                heading = f"{owner}.{member}" if owner else member
                parts.append(E.H3(heading, id=anchor) if anchor else E.H3(heading))
                parts.append(E.PRE(signature(dt)))
                dd = dt.getnext()
                if dd is not None and dd.tag == "dd":
                    parts += _docstring(dd)
    return parts


# an indented line, a doctest, a row of a reST grid table
_CODE_LINE_RE = re.compile(r"    |\s*>>>|\s*\+[-=+]|\s*\|")


def _docstring(el: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """pydoc's text (line breaks as <br>, spaces as no-break spaces) as
    paragraphs; indented lines, doctests and reST tables as code."""
    blocks: list[lxml.html.HtmlElement] = []
    for paragraph in re.split(r"\n[ \t]*\n", "\n".join(_lines(el))):
        lines = [line.rstrip() for line in paragraph.split("\n") if line.strip()]
        if not lines:
            continue
        if _is_code(lines):
            blocks.append(E.PRE("\n".join(lines)))
        else:
            blocks += _lines_as_blocks([line.strip() for line in lines])
    return blocks


def _lines(el: lxml.html.HtmlElement) -> list[str]:
    """pydoc's text as its lines (a <br> each; no-break spaces as spaces)."""
    kept = copy.deepcopy(el)
    for br in kept.iter("br"):  # (the markup's own line break is a space)
        br.tail = "\n" + (br.tail or "").lstrip("\r\n")
    return kept.text_content().replace("\xa0", " ").split("\n")


# columns set apart ("heap = []     # creates an empty heap"), a comment
_ALIGNED_RE = re.compile(r"\S {3,}\S|\s#\s")


def _is_code(lines: list[str]) -> bool:
    """Indented lines, a doctest and its output, a reST table, or lines set
    in aligned columns (a "Usage:" block of calls and their comments)."""
    if all(_CODE_LINE_RE.match(line) for line in lines):
        return True
    if _CODE_LINE_RE.match(lines[0]) and lines[0].lstrip().startswith(">>>"):
        return True
    return len(lines) > 1 and 2 * sum(
        bool(_ALIGNED_RE.search(line)) for line in lines
    ) >= len(lines)


# A docstring's list: "- prog -- The name of the program", "msg: The message"
_ITEM_LINE_RE = re.compile(r"[-*+][ \t]+\S|\w+(?: \w+)?(?::| --)[ \t]+\S")


def _lines_as_blocks(lines: list[str]) -> list[lxml.html.HtmlElement]:
    """A paragraph's lines: its list items one each (two or more lines opening
    as items: a line that does not continues the item above), any lines before
    them a paragraph; else one paragraph."""
    starts = [i for i, line in enumerate(lines) if _ITEM_LINE_RE.match(line)]
    if len(starts) < 2:
        return [E.P(" ".join(lines))]
    blocks = [E.P(" ".join(lines[: starts[0]]))] if starts[0] else []
    items = E.UL()
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        item = " ".join(lines[start:end])
        items.append(E.LI(re.sub(r"^[-*+][ \t]+", "", item)))
    return [*blocks, items]


_DEREF_TARGET_RE = re.compile(r"Target\s*=\s*([^<>]+?)\s*>?\s*$")
# A module page's furniture: the sidebar's logo, the version and source marks,
# the toggles, the examples' "Run"
_RUSTDOC_PAGE_FURNITURE = lxml.etree.XPath(
    ".//*[contains(@class, 'out-of-band') or contains(@class, 'logo-container')"
    " or contains(@class, 'hideme') or contains(@class, 'test-arrow')"
    " or contains(@class, 'stab')]"
)


def _signature(header: lxml.html.HtmlElement) -> str:
    """A member's signature without the furniture inside it ("Notable traits
    for StepBy<I>" tooltips, 1.63's)."""
    return _PAREN_SPACE_RE.sub("", _without_furniture(header))


def _is_member(part: lxml.html.HtmlElement) -> bool:
    """A member's or impl's part (its code header), not a variant's heading."""
    return bool(_CODE_HEADER(part))


_CODE_HEADER = lxml.etree.XPath("*[contains(@class, 'code-header')]")


def _header(section: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    return _CODE_HEADER(section)[0]


def _without_furniture(el: lxml.html.HtmlElement) -> str:
    kept = copy.deepcopy(el)
    for mark in kept.xpath(".//*[contains(@class, 'out-of-band')]"):
        mark.drop_tree()
    for mark in _RUSTDOC_FURNITURE(kept):
        mark.drop_tree()
    return _text(kept)


def _since(section: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """ "Stable since Rust version 1.3.0." from a member's version mark."""
    marks = section.xpath(".//*[contains(@class, 'since')]")
    if not marks:
        return []
    said = marks[0].get("title") or f"Since {_text(marks[0])}"
    if said.strip().casefold() == "const unstable":
        return []  # no version: the item is as old as its impl (the page says)
    return [E.P(said[:1].upper() + said[1:] + ".")]


def _member_docs(part: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """A member's notes (item-info: "This is a nightly-only experimental API")
    and docs: in its toggle (`details > summary > section`, then the docs),
    else the blocks right after it."""
    summary = part.getparent()
    if summary is not None and summary.tag == "summary":
        after = [*summary[summary.index(part) + 1 :]]
        after += [el for el in summary.itersiblings()]
    else:
        after = []
        for el in part.itersiblings():
            if el.tag in ("section", "details", *_HEADING_TAGS) or (
                el.get("id") and "section-header" in (el.get("class") or "")
            ):
                break  # the next member, field or variant
            after.append(el)
    blocks: list[lxml.html.HtmlElement] = []
    for el in after:
        classes = set((el.get("class") or "").split())
        if "item-info" in classes:
            blocks.append(E.P(_without_furniture(el)))
        elif "docblock" in classes:
            blocks += _docs(el, "h4")
    return blocks


def _docs(docblock: lxml.html.HtmlElement, level: str | None) -> list:
    """A docblock's blocks, without furniture; its headings at `level`."""
    kept = copy.deepcopy(docblock)
    for mark in _RUSTDOC_FURNITURE(kept):
        mark.drop_tree()
    if level:
        for heading in kept.iter(*_HEADING_TAGS):
            heading.tag = level
    return [*kept]


def _code(el: lxml.html.HtmlElement) -> str:
    return el.text_content().strip("\n")


def _members(
    body: lxml.html.HtmlElement,
) -> list[tuple[str, lxml.html.HtmlElement]]:
    found = [(s.get("id"), s) for s in body.xpath(_JAVADOC17_MEMBERS)]
    if found:
        return found
    for item in body.xpath(_JAVADOC11_MEMBERS):
        marker = item.getparent().getprevious()
        if marker is not None and marker.tag == "a":
            anchor = marker.get("id") or marker.get("name")
            if anchor:
                found.append((anchor, item))
    return found


def _member_name(anchor: str, member: lxml.html.HtmlElement) -> str:
    """`isBlank(CharSequence)` from the name heading and the anchor's types:
    `isBlank(java.lang.CharSequence)` (javadoc 11, 17) or
    `isBlank-java.lang.CharSequence-` (javadoc 8); a field's name alone."""
    heading = member.find("h3")
    if heading is None:
        heading = member.find("h4")
    name = _text(heading) if heading is not None else anchor
    if "(" in anchor and anchor.endswith(")"):
        types = anchor[anchor.index("(") + 1 : -1].split(",")
    elif anchor.endswith("-") and "-" in anchor[:-1]:
        types = anchor[anchor.index("-") + 1 : -1].split("-")
        types = [t.replace(":A", "[]") for t in types]
    else:
        return name
    shown = ", ".join(_PACKAGE_RE.sub("", t) for t in types if t)
    return f"{name}({shown})"


def _parts(member: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """A member's (or class's) blocks in order: the signature as code, the
    description as it is, each definition list of block tags as a list."""
    parts: list[lxml.html.HtmlElement] = []
    for child in member:
        if not isinstance(child.tag, str) or child.tag in ("h3", "h4", "hr"):
            continue
        classes = set((child.get("class") or "").split())
        if child.tag == "pre" or classes & _SIGNATURE_CLASSES:
            parts.append(E.PRE(signature(child)))
        elif child.tag == "dl":
            parts.append(_notes(child))
        else:
            parts.append(copy.deepcopy(child))
    return parts


def _notes(dl: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    """Javadoc's block tags as one list item per value: "Parameters: cs - the
    CharSequence to check", "Returns: ...", "Throws: ...", "Since: ..."."""
    items = E.UL()
    label = ""
    for child in dl:
        if child.tag == "dt":
            label = _text(child)
        elif child.tag == "dd":
            item = copy.deepcopy(child)
            item.tag = "li"
            for nested in item.xpath(".//ul | .//ol"):  # "See Also" lists
                joined = ", ".join(_text(li) for li in nested.iter("li"))
                nested.getparent().replace(nested, E.SPAN(joined))
            item.text = f"{label} {item.text or ''}"
            items.append(item)
    return items


def sphinx_signature(dt: lxml.html.HtmlElement) -> tuple[str, str] | None:
    """(short name, whole signature) of a Sphinx object's term: `str.join()`
    and `str.join(iterable, /)`; None for any other term."""
    if "sig" not in (dt.get("class") or "").split():
        return None
    dl = dt.getparent()
    if dl is None or not _SPHINX_DOMAINS & set((dl.get("class") or "").split()):
        return None
    term = copy.deepcopy(dt)
    for mark in term.xpath(_LINK_MARKS):
        mark.drop_tree()
    names = term.xpath(
        ".//*[contains(@class, 'sig-prename') or contains(@class, 'sig-name')]"
    )
    name = "".join(n.text_content() for n in names).strip() or _text(term)
    kinds = set((dl.get("class") or "").split())
    if "." not in name and (owner := _sphinx_owner(dl)):
        name = f"{owner}.{name}"  # autodoc's `counter()` under class Manager
    if term.xpath(".//*[contains(@class, 'sig-paren')]") and not kinds & {
        "class",
        "exception",
    }:
        name += "()"  # a call; a class is named without ("enlighten.Manager")
    return name, signature(term)


def _sphinx_owner(dl: lxml.html.HtmlElement) -> str:
    """The short name of the class a Sphinx object is described in, if any."""
    dd = dl.getparent()
    outer = dd.getparent() if dd is not None and dd.tag == "dd" else None
    if outer is None or not {"class", "exception"} & set(
        (outer.get("class") or "").split()
    ):
        return ""
    term = outer.find("dt")
    names = [] if term is None else term.xpath(".//*[contains(@class, 'sig-name')]")
    return names[0].text_content().strip() if names else ""


def is_field_list(dl: lxml.html.HtmlElement) -> bool:
    """Whether a definition list holds fields (Sphinx's Parameters, Returns,
    Raises; reST docinfo; footnotes), which stay a list under their owner."""
    return not _FIELD_LIST_CLASSES.isdisjoint((dl.get("class") or "").split())


def _first(root: lxml.html.HtmlElement, xpath: str) -> lxml.html.HtmlElement | None:
    found = root.xpath(xpath)
    return found[0] if found else None


def signature(el: lxml.html.HtmlElement) -> str:
    """A signature's text on one line, without the spaces that line breaks in
    the markup leave around its parentheses."""
    return _PAREN_SPACE_RE.sub("", _text(el))


def _text(el: lxml.html.HtmlElement) -> str:
    return " ".join(el.text_content().replace("\u200b", "").split())


# --- Doxygen ------------------------------------------------------------------
# A member's documentation: `div.memitem` (its signature in `div.memproto`,
# its docs in `div.memdoc`) after the anchor its links point to; Doxygen 1.6
# to 1.9 alike.
_DOXYGEN_MEMBERS = lxml.etree.XPath(
    ".//div[contains(concat(' ', normalize-space(@class), ' '), ' memitem ')]"
    "[div[contains(@class, 'memproto')]]"
)
_DOXYGEN_TITLE = lxml.etree.XPath(
    ".//div[contains(@class, 'headertitle')]//div[contains(@class, 'title')]"
    " | .//div[@class='header']//div[contains(@class, 'title')]"
    " | .//div[contains(@class, 'contents')]/h1"
)
# A member's furniture: where it is defined and what it references
_DOXYGEN_FURNITURE = {"definition", "reference", "memtitle", "dynheader", "dynsection"}
_DOXYGEN_LABEL_END_RE = re.compile(r"\s*:\s*$")
_MORE_RE = re.compile(r"\s*More\.\.\.\s*$")
# Doxygen 1.6's unclassed furniture: "References X::y().", "Referenced by ...",
# "Definition at line 12 of file a.cpp."
_REFERENCES_RE = re.compile(
    r"(?:References|Referenced by|Definition at line(?: of file)?)[\s,.:]*"
    r"(?:(?:and|of file)[\s,.:]*)*"
)


def doxygen(body: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    """A Doxygen page (a class, struct, namespace or file) rebuilt as its
    title (h1), its description, then each documentation group ("Member
    Function Documentation") a section (h2) of one section per member (h3,
    `Json::Value::append`, its anchor as its id): the signature as code, the
    description, and the parameters, return value, notes and "See also" as a
    list ("Returns: ..."). The summary tables, which repeat the details, are
    left out, but for the members they alone document (their brief under a
    section named as their table's group). None for a page without member
    documentation."""
    members = _DOXYGEN_MEMBERS(body)
    if not members:
        return None
    contents = _first(body, ".//div[contains(@class, 'contents')]")
    if contents is None:
        contents = members[0].getparent()
    page = E.DIV()
    titles = _DOXYGEN_TITLE(body)
    if titles:
        title = copy.deepcopy(titles[0])
        for label in title.xpath(".//span[contains(@class, 'mlabels')]"):
            label.drop_tree()  # "abstract", "final": not the class's name
        page.append(E.H1(_text(title)))
    anchors = {member: _doxygen_anchor(member) for member in members}
    documented = {anchor for anchor in anchors.values() if anchor}
    headings = _doxygen_headings(members)
    own = _doxygen_page(body)
    summary_only: dict[str, list] = {}
    in_details = False
    for child in contents:
        if not isinstance(child.tag, str):
            continue
        classes = set((child.get("class") or "").split())
        if child.tag == "table" and _is_summary(child):
            for group, parts in _summary_only(child, documented, own).items():
                summary_only.setdefault(group, []).extend(parts)
        elif child.tag == "h1":
            continue  # the page's title, above
        elif child.tag in _HEADING_TAGS and "memtitle" not in classes:
            said = _text(child)
            in_details = said == "Detailed Description"
            if said and not in_details:
                page.append(E.H2(said))
        elif child.tag == "div" and "memitem" in classes:
            name = headings.get(child) or _doxygen_name(child)
            proto = _doxygen_signature(child)
            anchor = anchors.get(child) or _doxygen_anchor(child)
            page.append(E.H3(name, id=anchor) if anchor else E.H3(name))
            page.append(E.PRE(proto))
            memdoc = _first(child, "div[contains(@class, 'memdoc')]")
            if memdoc is not None:
                page.extend(_doxygen_docs(memdoc))
        elif child.tag == "div" and "textblock" in classes:
            page.extend(_doxygen_docs(child))
        elif child.tag in ("hr", "a") or classes & _DOXYGEN_FURNITURE:
            continue
        elif child.tag == "p" and _links_only_to(child, "-members.html"):
            continue  # "List of all members."
        elif child.tag in ("ul", "p") and _links_only_to(child, "_source.html"):
            continue  # the files the page was generated from
        elif child.tag == "p" and not in_details and _MORE_RE.search(_text(child)):
            continue  # the brief above the summary: the description says it
        else:
            page.extend(_doxygen_docs(E.DIV(copy.deepcopy(child))))
    owner = next((n.rpartition("::")[0] for n in headings.values() if "::" in n), "")
    for group, parts in summary_only.items():
        page.append(E.H2(group))
        for part in parts:
            if part.tag == "h3" and owner and "::" not in (part.text or ""):
                part.text = f"{owner}::{part.text}"  # as the documented ones
            page.append(part)
    return page


def _doxygen_anchor(member: lxml.html.HtmlElement) -> str:
    """The id of the anchor just before a member (`<a class="anchor" id>`,
    `<a id name>`), across the h2 title Doxygen 1.8 and later put between."""
    before = member.getprevious()
    while before is not None and before.tag != "a":
        if before.tag not in _HEADING_TAGS:
            return ""
        before = before.getprevious()
    return (before.get("id") or before.get("name") or "") if before is not None else ""


def _doxygen_headings(members: list) -> dict:
    """Each member's heading: its name (_doxygen_name); an overload's with its
    parameters, and one still alike with its place among them ("[2/9]", as
    Doxygen numbers `as<bool>()`, `as<int>()` ...). Linear in their number."""
    names = {member: _doxygen_name(member) for member in members}
    counts = Counter(names.values())
    headings = {}
    for member, name in names.items():
        if counts[name] > 1:
            params = _doxygen_parameters(member)
            name = f"{name} ({params})" if params is not None else name
        headings[member] = name
    counts = Counter(headings.values())
    seen: Counter = Counter()
    for member, heading in headings.items():
        if counts[heading] > 1:
            seen[heading] += 1
            headings[member] = f"{heading} [{seen[heading]}/{counts[heading]}]"
    return headings


# What follows a member's name in its name cell: an initialiser ("{true}",
# "= 0"), array bounds; what precedes an operator's name is its owner
_INITIALISER_RE = re.compile(r"\s*(?:=.*|\{.*\}|\[.*\])\s*$")
_OPERATOR_RE = re.compile(r"\S*\boperator\b.*$")
_ANONYMOUS = {"enum", "struct", "union", "class"}


def _doxygen_name(member: lxml.html.HtmlElement) -> str:
    """`TiXmlElement::Attribute` from the signature's name cell: the macro a
    `#define` names (not its value), an operator whole (`Json::Value::operator
    bool`), else the last word before an initialiser."""
    cell = _first(member, ".//td[contains(@class, 'memname')]")
    if cell is None:
        return _text(member)[:80]
    said = _text(cell)
    if said.startswith("#define"):
        words = said[len("#define") :].split()
        return words[0].split("(")[0] if words else "#define"
    if operator := _OPERATOR_RE.search(said):
        return operator.group(0)
    words = _INITIALISER_RE.sub("", said).split()
    if not words:
        return said
    return f"anonymous {words[-1]}" if words[-1] in _ANONYMOUS else words[-1]


def _doxygen_parameters(member: lxml.html.HtmlElement) -> str | None:
    """The parameters of a member's name table, as written between its
    parentheses; None without them."""
    names = member.xpath(".//table[contains(@class, 'memname')]")
    said = " ".join(_text(row) for t in names for row in t.iter("tr"))
    if "(" not in said:
        return None
    inside = said.split("(", 1)[1].rsplit(")", 1)[0]
    return _PAREN_SPACE_RE.sub("", inside.replace(" ,", ",")).strip()


def _doxygen_signature(member: lxml.html.HtmlElement) -> str:
    """The signature on one line: its template line, the name table's cells
    (`const char* TiXmlElement::Attribute(const char *name, int *i) const`)
    and its labels ("[inline]", "[static]")."""
    proto = _first(member, "div[contains(@class, 'memproto')]")
    said = []
    template = _first(proto, ".//div[contains(@class, 'memtemplate')]")
    if template is not None:
        said.append(_text(template))
    names = proto.xpath(".//table[contains(@class, 'memname')]")
    said.append(" ".join(_text(row) for t in names for row in t.iter("tr")))
    labels = [_text(label) for label in proto.xpath(".//span[@class='mlabel']")]
    if labels:
        said.append("[" + ", ".join(labels) + "]")
    return _PAREN_SPACE_RE.sub("", " ".join(s for s in said if s).replace(" ,", ","))


def _doxygen_docs(memdoc: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """A member's (or page's) documentation blocks: paragraphs and lists as
    they are, code fragments as code, each definition list of Doxygen's
    sections ("Parameters", "Returns", "Note", "See also") as list items."""
    parts: list[lxml.html.HtmlElement] = []
    for child in memdoc:
        if not isinstance(child.tag, str):
            continue
        classes = set((child.get("class") or "").split())
        if classes & _DOXYGEN_FURNITURE or _is_cross_reference(child):
            continue
        if child.tag == "dl":
            parts.extend(_doxygen_notes(child))
        elif "fragment" in classes:
            lines = child.xpath("div[contains(@class, 'line')]")
            code = "\n".join(line.text_content() for line in lines)
            parts.append(E.PRE(code or child.text_content().strip("\n")))
        else:
            parts.append(copy.deepcopy(child))
    return parts


def _is_cross_reference(p: lxml.html.HtmlElement) -> bool:
    """Doxygen 1.6's unclassed "References X::y().", "Referenced by ...",
    "Definition at line 12 of file a.cpp.": a label and links, no more (a
    paragraph that opens "References to the nodes stay valid" is docs)."""
    if p.tag != "p" or not p.findall(".//a"):
        return False
    kept = copy.deepcopy(p)
    for link in kept.findall(".//a"):
        link.drop_tree()  # keeps its tail
    return bool(_REFERENCES_RE.fullmatch(_text(kept)))


# The sections whose table lists named things ("name | what it is")
_DOXYGEN_TABLE_NOTES = {
    "Parameters",
    "Template Parameters",
    "Exceptions",
    "Exception",
    "Return values",
}


def _doxygen_notes(dl: lxml.html.HtmlElement) -> list[lxml.html.HtmlElement]:
    """A Doxygen section as list items: "Returns: ...", "Parameters: name -
    its description", one per row of a parameter table. A code fragment in
    an item ("Remarks: Defaults:" over the settings) is code after it."""
    items = E.UL()
    parts = [items]
    label = ""
    for child in dl:
        if child.tag == "dt":
            label = _DOXYGEN_LABEL_END_RE.sub("", _text(child))
        elif child.tag == "dd":
            listed = label in _DOXYGEN_TABLE_NOTES or (dl.get("class") or "") in (
                "params",
                "tparams",
                "exception",
                "retval",
            )
            rows = child.xpath(".//table//tr") if listed else []
            for row in rows:
                cells = [
                    (_text(td), "paramdir" in (td.get("class") or ""))
                    for td in row.iter("td")
                ]
                # "[out]" of a parameter's direction goes after its name
                direction = " ".join(c for c, is_dir in cells if is_dir and c)
                cells = [c for c, is_dir in cells if c and not is_dir]
                if direction and cells:
                    cells[0] = f"{cells[0]} {direction}"
                said = " - ".join(cells)
                if said:
                    items.append(E.LI(f"{label}: {said}"))
            if rows:
                continue
            item = copy.deepcopy(child)
            item.tag = "li"
            item.text = f"{label}: {item.text or ''}"
            fragments = item.xpath(".//div[contains(@class, 'fragment')]")
            for fragment in fragments:
                fragment.drop_tree()
            items.append(item)
            if fragments:  # the code, then a list for the items after it
                parts.extend(_doxygen_docs(E.DIV(*fragments)))
                items = E.UL()
                parts.append(items)
    return [part for part in parts if len(part) or part.tag != "ul"]


def _is_summary(table: lxml.html.HtmlElement) -> bool:
    """A summary table (`table.memberdecls`; Doxygen 1.6 gives it no class)."""
    return "memberdecls" in (table.get("class") or "") or bool(
        table.xpath(".//td[contains(@class, 'memItemRight')]")
    )


def _links_only_to(p: lxml.html.HtmlElement, ending: str) -> bool:
    """Whether `p` is links to pages ending so, and nothing else: "List of all
    members.", "Go to the source code of this file.", a list of files."""
    links = p.findall(".//a")
    if not links or not all((a.get("href") or "").endswith(ending) for a in links):
        return False
    said = "".join(_text(a) for a in links)
    return len(re.sub(r"\W", "", _text(p))) <= len(re.sub(r"\W", "", said))


def _doxygen_page(body: lxml.html.HtmlElement) -> str:
    """The page's own file name, as its links write it ("" for "#details"):
    from the link to its detailed description."""
    for link in body.xpath(
        ".//a[contains(@href, '#details') or contains(@href, '#_details')]"
    ):
        return link.get("href").partition("#")[0]
    return ""


def _summary_only(
    table: lxml.html.HtmlElement, documented: set[str], own: str
) -> dict[str, list[lxml.html.HtmlElement]]:
    """The members a summary table lists that no member documentation holds
    (RemoveAttribute, documented by its brief alone), by their group heading:
    each an h3 of its name, its declaration as code and its brief. Members
    inherited (their rows link another page: `own` is this one's file name)
    are left out."""
    found: dict[str, list[lxml.html.HtmlElement]] = {}
    ids = set(table.xpath(".//@id"))  # Doxygen 1.6 anchors each row
    group = "Members"
    rows = list(table.iter("tr"))
    for i, row in enumerate(rows):
        heading = row.find(".//h2")
        if heading is not None:
            group = _text(heading)
            continue
        right = _first(row, "td[contains(@class, 'memItemRight')]")
        link = None if right is None else _first(right, ".//a[@href]")
        if link is None:
            continue
        if "#" not in link.get("href"):
            continue  # a class or file of its own page ("Classes", "Namespaces")
        page, _, anchor = link.get("href").rpartition("#")
        if not anchor or anchor in documented or "inherit" in (row.get("class") or ""):
            continue
        if page not in ("", own) and anchor not in ids:
            continue  # a member of another page (inherited)
        left = _first(row, "td[contains(@class, 'memItemLeft')]")
        declared = _PAREN_SPACE_RE.sub(
            "", " ".join(_text(td) for td in (left, right) if td is not None)
        )
        parts = [E.H3(_text(link), id=anchor), E.PRE(declared)]
        after = rows[i + 1] if i + 1 < len(rows) else None
        brief = (
            None
            if after is None
            else _first(after, "td[contains(@class, 'mdescRight')]")
        )
        if brief is not None and (said := _MORE_RE.sub("", _text(brief))):
            parts.append(E.P(said))
        found.setdefault(group, []).extend(parts)
    return found
