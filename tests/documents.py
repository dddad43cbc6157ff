"""Small PDF files written by hand for the reader tests (no PDF library).

A `Page` lays blocks out top to bottom in the standard fonts (Helvetica,
Helvetica-Bold, Courier, Courier-Bold), with bullets and table rules drawn as
shapes, the way browsers and word processors print them. `build_pdf` writes the
file with a correct cross-reference table.
"""

from __future__ import annotations

import zlib

WIDTH, HEIGHT = 612, 792
FONTS = {
    "F1": "Helvetica",
    "F2": "Helvetica-Bold",
    "F3": "Courier",
    "F4": "Courier-Bold",
    "F5": "Helvetica",  # with ASTRAL's ToUnicode map
    "F8": "CMBX10",  # TeX's bold: "bold extended", no "bold" in its name
}
# Fonts outside the standard 14, given by their widths (characters 32 to 126)
# and metrics alone, no font file (pdfium reads the text by them): F6 is
# monospaced, with a name no list of code fonts holds and Noto Sans Mono's tall
# ascent and descent, and without the fixed-pitch flag ("~" narrower, or pdfium
# would set the flag for widths all equal); F7 is proportional (Helvetica's
# widths) with "Mono" in its name (issue #26).
HELVETICA_WIDTHS = (
    [278, 278, 355, 556, 556, 889, 667, 191, 333, 333, 389, 584, 278, 333, 278, 278]
    + [556] * 10
    + [278, 278, 584, 584, 584, 556, 1015, 667, 667, 722, 722, 667, 611, 778, 722]
    + [278, 500, 667, 556, 833, 722, 778, 667, 778, 722, 667, 611, 722, 667, 944]
    + [667, 667, 611, 278, 278, 278, 469, 556, 333, 556, 556, 500, 556, 556, 278]
    + [556, 556, 222, 222, 500, 222, 833, 556, 556, 556, 556, 333, 500, 278, 556]
    + [500, 722, 500, 500, 500, 334, 260, 334, 584]
)
DESCRIBED = {
    "F6": ("Iosevka-Term", [600] * 94 + [500], 1069, -293),
    "F7": ("Monoline-Sans", HELVETICA_WIDTHS, 905, -212),
}
# Codes of font F5 that its ToUnicode map reads as characters outside the Basic
# Multilingual Plane, and one as a lone UTF-16 surrogate: pdfium hands each out
# as two UTF-16 halves (issue #26).
ASTRAL = {
    "\x80": "\U0001f62d",  # loudly crying face
    "\x81": "\U0001d518",  # mathematical fraktur capital U
    "\x82": "\U00020000",  # a CJK ideograph of extension B
    "\x83": "\ud83d",  # a lone high surrogate
    "\x84": "\u2212",  # the minus sign TeX sets for a hyphen in code
    "\x85": "\uf0b7",  # Symbol's bullet, as Word and LibreOffice map it
    "\x86": "\u2014",  # an em dash, the marker of a French list
    "\x87": "\u2190",  # the arrow of dblatex's "←-", a wrapped line of code
}


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


class Page:
    def __init__(self, top: float = 740, left: float = 72) -> None:
        self.ops: list[str] = []
        self.y = top
        self.left = left
        self.image = False
        self.form: list[str] = []  # operators drawn through a form XObject

    def text(self, x: float, y: float, text: str, size: float = 11, font: str = "F1"):
        self.ops.append(
            f"BT /{font} {size} Tf {x:.2f} {y:.2f} Td ({_escape(text)}) Tj ET"
        )

    def lines(self, rows: list[tuple[float, str, str, float]], size: float = 11):
        """(x, text, font, step down to the next line) rows, from the page's y."""
        for x, text, font, step in rows:
            self.text(x, self.y, text, size, font)
            self.y -= step
        return self

    def rect(self, x: float, y: float, w: float, h: float) -> None:
        self.ops.append(f"{x:.2f} {y:.2f} {w:.2f} {h:.2f} re f")

    def heading(self, text: str, size: float = 20, font: str = "F2") -> Page:
        self.y -= size * 0.6
        self.text(self.left, self.y, text, size, font)
        self.y -= size * 0.9
        return self

    def paragraph(
        self, lines: list[str], x: float | None = None, font: str = "F1"
    ) -> Page:
        for line in lines:
            self.text(self.left if x is None else x, self.y, line, font=font)
            self.y -= 14
        self.y -= 10
        return self

    def bullets(self, items: list[tuple[int, str]]) -> Page:
        """(depth, text) items, each with a square bullet drawn before it."""
        for depth, text in items:
            x = self.left + 20 + 20 * depth
            self.rect(x - 10, self.y + 2, 3.5, 3.5)
            self.text(x, self.y, text)
            self.y -= 14
        self.y -= 10
        return self

    def numbered(self, items: list[str]) -> Page:
        for number, text in enumerate(items, start=1):
            self.text(self.left + 10, self.y, f"{number}. {text}")
            self.y -= 14
        self.y -= 10
        return self

    def code(self, lines: list[str]) -> Page:
        for line in lines:
            indent = len(line) - len(line.lstrip())
            self.text(self.left + 6 * indent, self.y, line.lstrip(), 10, "F3")
            self.y -= 12
        self.y -= 10
        return self

    def table(self, rows: list[list[str]], widths: list[float], bold_header=True):
        """A ruled table: every cell boxed by thin rules."""
        height = 18
        top = self.y + 12
        for r, row in enumerate(rows):
            x = self.left
            for width, cell in zip(widths, row, strict=True):
                font = "F2" if r == 0 and bold_header else "F1"
                self.text(x + 4, top - 13, cell, 10, font)
                x += width
            top -= height
        total = sum(widths)
        y_top = self.y + 12
        for r in range(len(rows) + 1):
            self.rect(self.left, y_top - r * height, total, 0.8)
        x = self.left
        for width in [0, *widths]:
            x += width
            self.rect(x - 0.4, top, 0.8, y_top - top)
        self.y = top - 20
        return self

    def grid(self, rows: list[list[str]], widths: list[float], bold_header=True):
        """A table without rules: each row's cells on one baseline, at the left
        edges of their columns; a cell holding a list of lines wraps (aligned to
        the top of its row)."""
        for r, row in enumerate(rows):
            font = "F2" if r == 0 and bold_header else "F1"
            x, depth = self.left, 1
            for width, cell in zip(widths, row, strict=True):
                for k, line in enumerate([cell] if isinstance(cell, str) else cell):
                    self.text(x, self.y - 13 * k, line, 10, font)
                    depth = max(depth, k + 1)
                x += width
            self.y -= 13 * depth + 5
        self.y -= 12
        return self

    def stream(self) -> bytes:
        ops = list(self.ops)
        if self.image:
            ops.append("q 400 0 0 500 100 150 cm /Im1 Do Q")
        if self.form:
            ops.append("/Fm1 Do")
        return "\n".join(ops).encode("latin-1")


def running_pages(header: str, count: int = 3) -> list[Page]:
    """`count` pages with the same small header and a "Page n of count" footer."""
    pages = []
    for number in range(1, count + 1):
        page = Page()
        page.text(72, 770, header, 9)
        page.text(300, 30, f"Page {number} of {count}", 9)
        pages.append(page)
    return pages


MEALS_Q = "What is the daily cap for meals in Paris?"
CLAIMS_Q = "When do approved claims arrive with the salary?"


def handbook_pages() -> list[Page]:
    """Three pages with a running header and footer; "Claims" runs onto page 3."""
    pages = running_pages("ACME Corp - Office handbook")
    one, two, three = pages
    one.heading("Office handbook", 22).paragraph(
        ["This handbook covers travel, meals and expense claims."]
    )
    one.heading("Travel", 15).paragraph(
        ["Book trains through the travel portal at least a week ahead."]
    )
    two.heading("Meals", 15).paragraph(
        ["The company pays meals up to a daily cap of sixty euros in Paris."]
    )
    two.heading("Claims", 15).paragraph(
        ["Submit every expense claim within thirty days of the expense."]
    )
    three.paragraph(
        ["Approved claims arrive with the next salary once a manager signs them."]
    )
    three.heading("Parking", 15).paragraph(
        ["Visitors park in the north garage next to the loading bay."]
    )
    return pages


def scanned_page() -> Page:
    """A page holding only a picture: what a scanner produces."""
    page = Page()
    page.image = True
    return page


def build_pdf(pages: list[Page]) -> bytes:
    objects: list[bytes] = []  # object n is objects[n - 1]

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")
    pages_id = add(b"")
    to_unicode = add(_stream(_to_unicode(ASTRAL)))
    fonts = {
        key: add(
            f"<< /Type /Font /Subtype /Type1 /BaseFont /{name} "
            f"/Encoding /WinAnsiEncoding"
            f"{f' /ToUnicode {to_unicode} 0 R' if key == 'F5' else ''} >>".encode()
        )
        for key, name in FONTS.items()
    }
    for key, (name, widths, ascent, descent) in DESCRIBED.items():
        descriptor = add(
            f"<< /Type /FontDescriptor /FontName /{name} /Flags 32 /FontBBox "
            f"[0 {descent} 1000 {ascent}] /ItalicAngle 0 /Ascent {ascent} "
            f"/Descent {descent} /CapHeight 700 /StemV 80 >>".encode()
        )
        fonts[key] = add(
            f"<< /Type /Font /Subtype /TrueType /BaseFont /{name} /FirstChar 32 "
            f"/LastChar 126 /Widths [{' '.join(map(str, widths))}] "
            f"/FontDescriptor {descriptor} 0 R /Encoding /WinAnsiEncoding >>".encode()
        )
    pixels = zlib.compress(bytes([128]) * 16)
    image = add(
        b"<< /Type /XObject /Subtype /Image /Width 4 /Height 4 /ColorSpace "
        b"/DeviceGray /BitsPerComponent 8 /Filter /FlateDecode /Length "
        + str(len(pixels)).encode()
        + b" >>\nstream\n"
        + pixels
        + b"\nendstream"
    )
    font_dict = " ".join(f"/{k} {v} 0 R" for k, v in fonts.items())
    kids = []
    for page in pages:
        content = page.stream()
        stream = add(
            f"<< /Length {len(content)} >>\nstream\n".encode()
            + content
            + b"\nendstream"
        )
        form = "\n".join(page.form).encode("latin-1")
        form_id = add(
            f"<< /Type /XObject /Subtype /Form /BBox [0 0 {WIDTH} {HEIGHT}] "
            f"/Resources << /Font << {font_dict} >> >> /Length {len(form)} >>"
            "\nstream\n".encode()
            + form
            + b"\nendstream"
        )
        kids.append(
            add(
                f"<< /Type /Page /Parent {pages_id} 0 R "
                f"/MediaBox [0 0 {WIDTH} {HEIGHT}] /Resources << /Font << {font_dict} "
                f">> /XObject << /Im1 {image} 0 R /Fm1 {form_id} 0 R >> >> "
                f"/Contents {stream} 0 R >>".encode()
            )
        )
    objects[catalog - 1] = f"<< /Type /Catalog /Pages {pages_id} 0 R >>".encode()
    objects[pages_id - 1] = (
        f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] "
        f"/Count {len(kids)} >>".encode()
    )
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root {catalog} 0 R >>\n"
        f"startxref\n{xref}\n%%EOF\n".encode()
    )
    return bytes(out)


def padded_object_stream_pdf(padding_mb: int) -> bytes:
    """A one-page PDF whose catalog, page tree and page sit in a Flate-compressed
    object stream padded with `padding_mb` MB of NUL bytes (whitespace to PDF):
    the file is about a thousandth of that, and a reader that opens it inflates it
    all. The objects are found through a cross-reference stream (issue #26)."""
    objects = [
        b"<< /Type /Catalog /Pages 3 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        f"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 {WIDTH} {HEIGHT}] >>".encode(),
    ]
    header, body = b"", b""
    for number, obj in zip((2, 3, 4), objects, strict=True):
        header += f"{number} {len(body)} ".encode()
        body += obj + b"\n"
    packer = zlib.compressobj()
    packed = packer.compress(header + body)
    megabyte = bytes(1 << 20)
    for _ in range(padding_mb):
        packed += packer.compress(megabyte)
    packed += packer.flush()
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    stream_at = len(out)
    out += (
        f"1 0 obj\n<< /Type /ObjStm /N 3 /First {len(header)} /Filter /FlateDecode "
        f"/Length {len(packed)} >>\nstream\n".encode()
        + packed
        + b"\nendstream\nendobj\n"
    )
    xref_at = len(out)
    # each row: type (0 free, 1 at an offset, 2 in an object stream), field, field
    rows = [(0, 0, 0xFFFF), (1, stream_at, 0), (2, 1, 0), (2, 1, 1), (2, 1, 2)]
    rows.append((1, xref_at, 0))
    table = b"".join(
        kind.to_bytes(1, "big") + a.to_bytes(4, "big") + b.to_bytes(2, "big")
        for kind, a, b in rows
    )
    out += (
        f"5 0 obj\n<< /Type /XRef /Size 6 /W [1 4 2] /Root 2 0 R "
        f"/Length {len(table)} >>\nstream\n".encode()
        + table
        + f"\nendstream\nendobj\nstartxref\n{xref_at}\n%%EOF\n".encode()
    )
    return bytes(out)


def _stream(data: bytes) -> bytes:
    return f"<< /Length {len(data)} >>\nstream\n".encode() + data + b"\nendstream"


def _to_unicode(codes: dict[str, str]) -> bytes:
    """A ToUnicode CMap reading each one-byte code as its text (in UTF-16BE)."""
    pairs = "\n".join(
        f"<{ord(code):02X}> <{text.encode('utf-16-be', 'surrogatepass').hex()}>"
        for code, text in codes.items()
    )
    return (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        "/CMapName /Astral def 1 begincodespacerange <00> <FF> endcodespacerange\n"
        f"{len(codes)} beginbfchar\n{pairs}\nendbfchar\n"
        "endcmap CMapName currentdict /CMap defineresource pop end end"
    ).encode()
