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
    if term.xpath(".//*[contains(@class, 'sig-paren')]"):
        name += "()"
    return name, signature(term)


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
