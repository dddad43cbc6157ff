"""Big tables and definition lists (issue #29, items 2 and 3): each table row's
chunk carries its table's caption, the label of its group row and its column
names; group rows are labels, not chunks; a term travels with its definition."""

from __future__ import annotations

import io

import docx
from django.test import SimpleTestCase, TestCase
from docx.enum.style import WD_STYLE_TYPE
from docx.shared import Inches

from kb import answering, readers
from kb.chunking import ChunkKind, chunk_document, group_rows
from kb.embedding import count_tokens
from kb.parsing import parse
from tests import base

ERRCODES_HTML = """<html><head><title>Error codes</title></head><body><main>
<h1>Appendix A. Error Codes</h1>
<p>Every message the server sends carries a five-character code.</p>
<table>
<caption>Server error codes</caption>
<thead><tr><th>Error Code</th><th>Condition Name</th></tr></thead>
<tbody>
<tr><td colspan="2"><b>Class 08 — Connection Exception</b></td></tr>
<tr><td><code>08000</code></td><td><code>connection_exception</code></td></tr>
<tr><td><code>08003</code></td><td><code>connection_does_not_exist</code></td></tr>
<tr><td colspan="2"><b>Class 23 — Integrity Constraint Violation</b></td></tr>
<tr><td><code>23502</code></td><td><code>not_null_violation</code></td></tr>
<tr><td><code>23505</code></td><td><code>unique_violation</code></td></tr>
</tbody></table>
</main></body></html>"""

# As DocBook's HTML (PostgreSQL's manual) writes a table's title.
DOCBOOK_HTML = """<html><body><div class="appendix">
<h2>Error Codes</h2>
<div class="table" id="ERRCODES-TABLE"><p class="title"><strong>Table A.1.
<span class="productname">Acme</span> Error Codes</strong></p>
<div class="table-contents"><table class="table" border="1">
<thead><tr><th>Error Code</th><th>Condition Name</th></tr></thead><tbody>
<tr><td colspan="2"><span class="bold"><strong>Class 42 — Syntax Error
</strong></span></td></tr>
<tr><td><code class="literal">42601</code></td>
<td><code class="symbol">syntax_error</code></td></tr>
</tbody></table></div></div></div></body></html>"""

MARKDOWN_TABLE = """# Limits

Table 3: Upload limits per plan

| Plan | Limit |
| --- | --- |
| **Free plans** | |
| Starter | 10 MB |
| **Paid plans** | |
| Team | 1 GB |
| Enterprise | 10 GB |
"""


def _rows(text: str, name: str = "t.md") -> list:
    result = chunk_document(parse(text, name), text, count_tokens=count_tokens)
    return [c for c in result.chunks if c.kind == ChunkKind.TABLE_ROW]


def _read(name: str, data: bytes) -> str:
    return readers.read(name, data).text


def _docx_bytes(document: docx.Document) -> bytes:
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


class BigTableReadersTestCase(SimpleTestCase):
    def test_it_writes_an_html_caption_above_its_table(self):
        text = _read("e.html", ERRCODES_HTML.encode())
        self.assertIn("Server error codes\n\n| Error Code | Condition Name |", text)

    def test_it_writes_a_group_row_s_label_once(self):
        text = _read("e.html", ERRCODES_HTML.encode())
        self.assertIn("| Class 23 — Integrity Constraint Violation |  |", text)

    def test_it_writes_a_docx_caption_below_a_table_above_it(self):
        document = docx.Document()
        table = document.add_table(rows=4, cols=2)
        values = [("Code", "Meaning"), ("Class 23", ""), ("23505", "unique")]
        for r, row in enumerate(values + [("23502", "not null")]):
            for c, value in enumerate(row):
                table.cell(r, c).text = value
        group = table.cell(1, 0).merge(table.cell(1, 1))
        group.text = "Class 23 — Integrity"
        document.add_paragraph("Table 1: Error codes", style="Caption")
        text = _read("e.docx", _docx_bytes(document))
        self.assertIn(
            "Table 1: Error codes\n\n| Code | Meaning |\n| --- | --- |\n"
            "| Class 23 — Integrity |  |\n| 23505 | unique |",
            text,
        )


class BigTableChunksTestCase(SimpleTestCase):
    def test_each_html_row_carries_caption_group_and_column_names(self):
        text = _read("e.html", ERRCODES_HTML.encode())
        rows = {c.text: c.embed_text for c in _rows(text, "e.html")}
        self.assertEqual(
            rows["| `23505` | `unique_violation` |"],
            "Server error codes; Class 23 — Integrity Constraint Violation; "
            "Error Code: `23505`; Condition Name: `unique_violation`",
        )
        self.assertIn(
            "Class 08 — Connection Exception",
            rows["| `08003` | `connection_does_not_exist` |"],
        )

    def test_group_rows_are_no_chunks_of_their_own(self):
        text = _read("e.html", ERRCODES_HTML.encode())
        rows = _rows(text, "e.html")
        self.assertEqual(len(rows), 4)
        self.assertFalse([c for c in rows if "Class" in c.text])

    def test_a_docbook_table_title_is_the_caption(self):
        text = _read("d.html", DOCBOOK_HTML.encode())
        (row,) = _rows(text, "d.html")
        self.assertEqual(
            row.embed_text,
            "Table A.1. Acme Error Codes; Class 42 — Syntax Error; "
            "Error Code: `42601`; Condition Name: `syntax_error`",
        )

    def test_a_markdown_caption_line_and_bold_group_rows(self):
        rows = [c.embed_text for c in _rows(MARKDOWN_TABLE)]
        self.assertEqual(
            rows,
            [
                "Table 3: Upload limits per plan; **Free plans**; Plan: Starter; "
                "Limit: 10 MB",
                "Table 3: Upload limits per plan; **Paid plans**; Plan: Team; "
                "Limit: 1 GB",
                "Table 3: Upload limits per plan; **Paid plans**; Plan: Enterprise; "
                "Limit: 10 GB",
            ],
        )

    def test_a_docx_table_keeps_its_caption_and_group(self):
        document = docx.Document()
        document.add_paragraph("Table 2: Fees", style="Caption")
        table = document.add_table(rows=3, cols=2)
        for r, row in enumerate([("Item", "Fee"), ("Travel", ""), ("Taxi", "20")]):
            for c, value in enumerate(row):
                table.cell(r, c).text = value
        (row,) = _rows(_read("f.docx", _docx_bytes(document)), "f.docx")
        self.assertEqual(row.embed_text, "Table 2: Fees; Travel; Item: Taxi; Fee: 20")

    def test_a_sentence_above_a_table_is_no_caption(self):
        text = (
            "# T\n\nThe plans differ in price.\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n"
        )
        (row,) = _rows(text)
        self.assertEqual(row.embed_text, "a: 1; b: 2")

    def test_a_last_row_with_one_cell_is_data_not_a_group(self):
        text = "| a | b |\n| --- | --- |\n| 1 | 2 |\n| 3 | |\n"
        doc = parse(text, "t.md")
        (block,) = [b for b in doc.sections[0].blocks if b.kind == "table"]
        self.assertEqual(group_rows(block), set())
        self.assertEqual([c.embed_text for c in _rows(text)], ["a: 1; b: 2", "a: 3"])


class DefinitionListsTestCase(SimpleTestCase):
    def _items(self, text: str) -> list[str]:
        doc = parse(text, "g.md")
        return [
            text[item.start : item.end]
            for section in doc.sections
            for block in section.blocks
            if block.kind == "list"
            for item in block.items
        ]

    def test_a_colon_definition_list_is_one_item_per_term(self):
        text = (
            "# Glossary\n\nTaint\n: Repels pods from a node.\n: Set by kubectl.\n\n"
            "Toleration\n\n: Lets a pod onto a tainted node.\n"
        )
        self.assertEqual(
            self._items(text),
            [
                "Taint\n: Repels pods from a node.\n: Set by kubectl.",
                "Toleration\n\n: Lets a pod onto a tainted node.",
            ],
        )

    def test_bold_terms_are_one_item_each_and_a_lone_note_is_not(self):
        text = (
            "# Glossary\n\n**Pod** — the smallest unit.\n**Node**: a machine.\n\n"
            "**Note:** read the following:\n\n- one\n"
        )
        self.assertEqual(
            self._items(text),
            ["**Pod** — the smallest unit.", "**Node**: a machine.", "- one"],
        )

    def test_a_term_and_its_definition_share_a_chunk(self):
        filler = " ".join(f"Word{n} fills the glossary." for n in range(30))
        text = f"# Glossary\n\n{filler}\n\n-S\n: Sets the shared buffers size.\n"
        result = chunk_document(
            parse(text, "g.md"), text, count_tokens=count_tokens, max_tokens=60
        )
        (chunk,) = [c for c in result.chunks if "shared buffers" in c.text]
        self.assertIn("-S\n: Sets the shared buffers size.", chunk.text)

    def test_docx_term_styles_become_a_definition_list(self):
        document = docx.Document()
        term = document.styles.add_style("Definition Term", WD_STYLE_TYPE.PARAGRAPH)
        definition = document.styles.add_style("Definition", WD_STYLE_TYPE.PARAGRAPH)
        document.add_paragraph("Taint", style=term)
        document.add_paragraph("Repels pods from a node.", style=definition)
        document.add_paragraph("Toleration", style=term)
        document.add_paragraph("Lets a pod onto a tainted node.", style=definition)
        text = _read("g.docx", _docx_bytes(document))
        self.assertEqual(
            text,
            "Taint\n: Repels pods from a node.\n\n"
            "Toleration\n: Lets a pod onto a tainted node.\n",
        )
        self.assertEqual(
            self._items(text),
            [
                "Taint\n: Repels pods from a node.",
                "Toleration\n: Lets a pod onto a tainted node.",
            ],
        )

    def test_a_bold_docx_paragraph_over_an_indented_one_is_a_term(self):
        document = docx.Document()
        document.add_paragraph().add_run("max_connections").bold = True
        body = document.add_paragraph("The most clients at once.")
        body.paragraph_format.left_indent = Inches(0.5)
        document.add_paragraph("Plain text after.")
        text = _read("g.docx", _docx_bytes(document))
        self.assertEqual(
            text,
            "max_connections\n: The most clients at once.\n\nPlain text after.\n",
        )

    def test_a_paragraph_opening_with_a_colon_is_escaped(self):
        document = docx.Document()
        document.add_paragraph("Term")
        document.add_paragraph(": not a definition")
        text = _read("g.docx", _docx_bytes(document))
        self.assertEqual(text, "Term\n\n\\: not a definition\n")
        self.assertEqual(self._items(text), [])


class BigTableAnswersTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = base.collection_of(
            "Codes",
            {
                "errcodes.html": ERRCODES_HTML.encode(),
                "limits.md": MARKDOWN_TABLE,
                "logging.md": "# Logging\n\nThe server writes errors to its log "
                "with their code and a message.\n",
            },
        )

    def test_a_code_question_quotes_its_row_with_its_group(self):
        result, reply = answering.ask(self.collection, "What does 23505 mean?")
        self.assertEqual(result.passages[0].file_name, "errcodes.html")
        self.assertIn("| `23505` | `unique_violation` |", reply.text)
        self.assertIn("| Class 23 — Integrity Constraint Violation | |", reply.text)
        self.assertIn("| Error Code | Condition Name |", reply.text)


def _long_codes_table() -> str:
    """An error-code appendix of 12 classes of 8 codes (as PostgreSQL's HTML
    writes one), far longer than a context window: a row's window does not
    reach the header. Class 38's conditions share the word "sqlstate"."""
    names = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
    rows = []
    for n in range(20, 44, 2):
        rows.append(f'<tr><td colspan="2"><b>Class {n} — Group {n}</b></td></tr>')
        for i, name in enumerate(names):
            code, condition = f"{n}00{i}", f"{name}_{n}_failure"
            if n == 38:
                condition = f"invalid_sqlstate_{name}"
            rows.append(f"<tr><td><code>{code}</code></td><td>{condition}</td></tr>")
        if n == 22:
            rows.append(
                "<tr><td colspan='2'><b>Class 23 — Integrity Constraint "
                "Violation</b></td></tr>"
            )
            for code, condition in (
                ("23502", "not_null_violation"),
                ("23503", "foreign_key_violation"),
                ("23505", "unique_violation"),
                ("23514", "check_violation"),
            ):
                rows.append(
                    f"<tr><td><code>{code}</code></td>"
                    f"<td><code>{condition}</code></td></tr>"
                )
    return (
        "<html><body><main><h1>Appendix A. Error Codes</h1>"
        "<p>Every message carries a five-character SQLSTATE code.</p>"
        "<table><thead><tr><th>Error Code</th><th>Condition Name</th></tr></thead>"
        "<tbody>" + "\n".join(rows) + "</tbody></table></main></body></html>"
    )


class LongTableAnswersTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.collection = base.collection_of(
            "Appendix", {"errcodes.html": _long_codes_table().encode()}
        )

    def test_the_row_of_the_code_asked_comes_under_its_group_alone(self):
        """QA of issue #29: the row of 23505 came as one table, its group's
        label as another, and rows of other classes sharing "sqlstate" after."""
        question = "Our logs show SQLSTATE 23505: what condition is that?"
        _, reply = answering.ask(self.collection, question)
        table = (
            "| Error Code | Condition Name |\n| --- | --- |\n| … | … |\n"
            "| Class 23 — Integrity Constraint Violation | |\n| … | … |\n"
            "| `23505` | `unique_violation` |\n["
        )
        self.assertIn(table, reply.text)
        self.assertEqual(reply.text.count("| Error Code |"), 1, reply.text)
        self.assertNotIn("invalid_sqlstate", reply.text)
