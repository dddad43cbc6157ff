"""kb.chunking and kb_chunk: exact offsets, the window, structure (no database).

Budgets are counted like kb.embedding.count_tokens, [CLS] and [SEP] included.
The embedder reads `window` tokens including those two specials, so the exact
limit is count_tokens(embed_text) <= window; we assert the stricter
count_tokens(embed_text) <= usable_window, which is what kb_chunk clamps to.
"""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kb.chunking import (
    ChunkData,
    ChunkKind,
    ChunkResult,
    chunk_document,
    group_rows,
)
from kb.decoding import decode_upload
from kb.embedding import count_tokens, get_embedder
from kb.parsing import Document, ParseError, parse, parse_markdown
from tests.markdown_samples import NESTED_50, markdown_documents

DEMO_DIR = Path(settings.BASE_DIR) / "kb" / "demo" / "content"
BUDGETS = st.sampled_from([24, 60, 200, 254])


def _chunk(text: str, name: str = "t.md", **options: object) -> ChunkResult:
    return chunk_document(parse(text, name), text, count_tokens=count_tokens, **options)


def _demo(name: str, max_tokens: int = 200) -> tuple[str, ChunkResult]:
    path = DEMO_DIR / name
    if not path.exists():
        pytest.skip(f"{path} is not there")
    text = decode_upload(path.read_bytes(), name)
    return text, _chunk(text, name, max_tokens=max_tokens)


def _containing(result: ChunkResult, needle: str) -> list[ChunkData]:
    return [chunk for chunk in result.chunks if needle in chunk.text]


def _uncovered(text: str, doc: Document, chunks: list[ChunkData]) -> list[int]:
    """Non-blank characters of section bodies that no chunk range covers.

    Table header and delimiter lines, and group rows, are exempt: they are
    carried in every (grouped) row's embed_text instead.
    """
    covered = bytearray(len(text))
    for chunk in chunks:
        covered[chunk.start : chunk.end] = b"\x01" * (chunk.end - chunk.start)
    for section in doc.sections:
        for block in section.blocks:
            if block.kind == "table" and block.rows:
                end = block.rows[0].start
                covered[block.start : end] = b"\x01" * (end - block.start)
                for position in group_rows(block):
                    row = block.rows[position]
                    covered[row.start : row.end] = b"\x01" * (row.end - row.start)
    return [
        position
        for section in doc.sections
        for position in range(section.body_start, section.end)
        if not text[position].isspace() and not covered[position]
    ]


@hypothesis_settings(max_examples=60, deadline=None)
@given(markdown_documents(), BUDGETS)
def test_it_keeps_offsets_exact_and_embed_text_inside_the_window(text, budget):
    doc = parse_markdown(text, "Generated")
    result = chunk_document(doc, text, count_tokens=count_tokens, max_tokens=budget)
    usable = get_embedder().usable_window
    assert [c.chunk_index for c in result.chunks] == list(range(len(result.chunks)))
    for chunk in result.chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.token_count == count_tokens(chunk.embed_text)
        assert chunk.token_count <= budget <= usable
        if chunk.kind == ChunkKind.TABLE_ROW:
            assert "\n" not in chunk.text and "\r" not in chunk.text
        elif chunk.kind == ChunkKind.TEXT:
            assert chunk.embed_text == chunk.text


@hypothesis_settings(max_examples=60, deadline=None)
@given(markdown_documents(), BUDGETS)
def test_it_covers_each_section_without_overlap(text, budget):
    doc = parse_markdown(text, "Generated")
    result = chunk_document(doc, text, count_tokens=count_tokens, max_tokens=budget)
    for section in doc.sections:
        chunks = [c for c in result.chunks if c.section_index == section.index]
        for before, after in zip(chunks, chunks[1:], strict=False):
            assert before.end <= after.start
        for chunk in chunks:
            assert section.body_start <= chunk.start < chunk.end <= section.end
            assert chunk.heading_path == section.heading_path
    assert _uncovered(text, doc, result.chunks) == []


@hypothesis_settings(max_examples=30, deadline=None)
@given(markdown_documents(), st.sampled_from([8, 30]))
def test_it_overlaps_within_budget_and_still_covers(text, overlap):
    doc = parse_markdown(text, "Generated")
    result = chunk_document(
        doc, text, count_tokens=count_tokens, max_tokens=80, overlap=overlap
    )
    for chunk in result.chunks:
        assert chunk.text == text[chunk.start : chunk.end]
        assert chunk.token_count <= 80
    assert _uncovered(text, doc, result.chunks) == []


@hypothesis_settings(max_examples=30, deadline=None)
@given(markdown_documents(), st.sampled_from([40, 800]), st.sampled_from([0, 10]))
def test_it_keeps_fixed_chunks_exact_and_in_order(text, size, overlap):
    doc = parse_markdown(text, "Generated")
    result = chunk_document(
        doc,
        text,
        count_tokens=count_tokens,
        max_tokens=size,
        overlap=overlap,
        strategy="fixed",
    )
    starts = [chunk.start for chunk in result.chunks]
    assert starts == sorted(set(starts))
    for chunk in result.chunks:
        assert chunk.text == text[chunk.start : chunk.end]


@hypothesis_settings(max_examples=60, deadline=None)
@given(st.text(min_size=1))
def test_it_raises_nothing_but_parse_error_on_arbitrary_text(text):
    try:
        _chunk(text, "any.md", max_tokens=24)
    except ParseError:
        pass


def test_it_labels_table_row_values_with_their_column_names():
    text, result = _demo("refund-policy.md")
    (row,) = _containing(result, "Team, annual")
    assert row.kind == ChunkKind.TABLE_ROW
    assert row.text == text[row.start : row.end]
    assert row.text.startswith("| Team, annual") and row.text.endswith("|")
    assert "Refund window: 45 days" in row.embed_text
    assert "Approval needed: Finance" in row.embed_text
    assert row.heading_path == "Refund policy > Refund windows by plan"


def test_it_never_cuts_a_code_block_mid_line():
    text, result = _demo("api-reference.md", max_tokens=80)
    code = [chunk for chunk in result.chunks if chunk.kind == ChunkKind.CODE]
    assert len(code) > 2  # the Python example does not fit in 80 tokens
    for chunk in code:
        assert chunk.start == 0 or text[chunk.start - 1] == "\n"
        assert chunk.end == len(text) or text[chunk.end] == "\n"
        assert chunk.token_count <= 80
    python = [c for c in code if "```python" in c.embed_text]
    assert all(c.embed_text.startswith("The following Python") for c in python)


def test_it_carries_the_heading_path_into_a_chunk_that_starts_mid_section():
    text, result = _demo("deployment-runbook.md", max_tokens=40)
    before = [c for c in result.chunks if c.heading_path.endswith("Before you deploy")]
    assert len(before) > 1
    assert before[1].start > before[0].end
    assert before[1].heading_path == "Deployment runbook > Before you deploy"


def test_it_keeps_a_rule_and_its_exception_in_one_chunk():
    _, result = _demo("deployment-runbook.md")
    (chunk,) = _containing(result, "do not roll back; roll forward")
    assert "only after the on-call engineering manager has approved it" in chunk.text
    (freeze,) = _containing(result, "Deploys are frozen on Fridays")
    assert "except for security fixes" in freeze.text


def test_it_keeps_a_lead_in_line_with_its_list():
    _, result = _demo("deployment-runbook.md", max_tokens=60)
    (lead,) = _containing(result, "Check all of the following")
    assert "- The release tag points" in lead.text


def test_it_keeps_lead_ins_with_inline_fixtures_too():
    text = "# T\n\n" + "Filler sentence here. " * 30 + "\n\nDo this:\n\n- one\n- two\n"
    result = _chunk(text, max_tokens=40)
    (lead,) = _containing(result, "Do this:")
    assert "- one" in lead.text


def test_it_splits_a_50000_character_line_at_sentences():
    text = "The rule applies to every plan and every region. " * 1000
    result = _chunk(text.strip(), "long.txt")
    assert len(text) >= 49_000 and result.word_fallbacks == 0
    assert all(c.token_count <= 200 for c in result.chunks)
    assert all(c.text.endswith(".") for c in result.chunks)


def test_it_falls_back_to_words_and_characters_and_counts_it():
    words = ("alpha " * 400).strip()
    punctuation = "-".join(["ab"] * 2000)  # one "word", far over budget
    for text in (words, punctuation):
        result = _chunk(text, "x.txt", max_tokens=50)
        assert result.word_fallbacks == len(result.chunks) > 1
        assert result.word_fallback_share == 1.0
        assert all(c.token_count <= 50 for c in result.chunks)
        joiner = " " if " " in text else ""
        assert joiner.join(c.text for c in result.chunks) == text


def test_it_refuses_empty_text():
    with pytest.raises(ParseError, match="is empty"):
        _chunk("   \n")


def test_it_chunks_deep_lists_ragged_tables_and_open_fences():
    text = (
        f"# Lists\n\n{NESTED_50}\n# Table\n\n| a | b |\n|---|---|\n| 1 |\n"
        "| 1 | 2 | 3 |\n\n# Code\n\nRun:\n\n```sh\necho hi\r\nexit\n"
    )
    result = _chunk(text, max_tokens=30)
    rows = [c.embed_text for c in result.chunks if c.kind == ChunkKind.TABLE_ROW]
    assert rows == ["a: 1", "a: 1; b: 2; Column 3: 3"]
    code = [c for c in result.chunks if c.kind == ChunkKind.CODE]
    assert code[-1].embed_text.startswith("Run:\n```sh\n")
    assert code[-1].end == len(text.rstrip())


def test_it_splits_an_over_budget_table_row_between_cells():
    cells = " | ".join(f"Value {n} is long enough to matter here" for n in range(8))
    head = " | ".join(f"Col {n}" for n in range(8))
    text = f"| {head} |\n|{'---|' * 8}\n| {cells} |\n"
    result = _chunk(text, max_tokens=40)
    parts = [c for c in result.chunks if c.kind == ChunkKind.TABLE_ROW]
    assert len(parts) > 1
    assert all(p.embed_text.startswith("Col 0: Value 0") for p in parts)
    assert parts[0].start == text.index("| Value 0")
    assert parts[-1].end == len(text.rstrip())


def test_it_repeats_overlap_tokens_from_the_previous_chunk():
    text = "# T\n\n" + " ".join(f"Sentence number {n} ends here." for n in range(60))
    result = _chunk(text, max_tokens=60, overlap=15)
    chunks = result.chunks
    assert len(chunks) > 2
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.start < before.end
        assert after.token_count <= 60


def test_it_reproduces_the_800_token_trap_with_the_fixed_strategy():
    text = "# T\n\n" + "Every word counts in this policy document. " * 400
    result = _chunk(text, max_tokens=800, strategy="fixed")
    window = get_embedder().window
    assert result.over_budget == 0
    assert max(c.token_count for c in result.chunks) > window


def test_kb_chunk_prints_json_with_the_fixed_keys(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.md").write_text("# A\n\nHello there.\n\n## B\n\nMore.\n")
    (tmp_path / "empty.txt").write_text("  \n")
    out = StringIO()
    call_command("kb_chunk", str(tmp_path), "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert (report["window"], report["usable_window"]) == (256, 254)
    assert (report["files"], report["sections"], report["chunks_total"]) == (1, 2, 2)
    assert report["skipped"] == ["empty.txt: empty.txt is empty"]
    first = report["chunks"][0]
    assert {k: first[k] for k in ("file", "start", "end", "heading_path")} == {
        "file": "sub/a.md",
        "start": 5,
        "end": 17,
        "heading_path": "A",
    }
    assert first["token_count"] == count_tokens("Hello there.")


def test_kb_chunk_prints_human_figures_and_clamps_the_budget(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n" + "Some words here. " * 200)
    out = StringIO()
    call_command("kb_chunk", str(tmp_path / "a.md"), "--max-tokens", "999", stdout=out)
    output = out.getvalue()
    assert "budget 254 tokens" in output
    assert "Sections: 1" in output and "Word-boundary fallbacks: 0 of" in output
    assert "usable window 254, window 256" in output


def test_kb_chunk_refuses_a_budget_too_small(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    with pytest.raises(CommandError, match="below 16"):
        call_command("kb_chunk", str(tmp_path), "--max-tokens", "4", stdout=StringIO())


def test_a_link_is_embedded_by_its_text_and_cited_with_its_target():
    """A Markdown link's URL stays out of the vector (as the HTML, DOCX and PDF
    readers keep link text only), while the chunk's text, which citations show,
    keeps the link as written."""
    text = (
        "# Coworking\n\nBook a desk through [Deskpass](https://www.deskpass.com/ "
        '"Deskpass"), see ![the map](img/map.png) and the [policy][p].\n\n'
        "[p]: https://example.invalid/policy\n"
    )
    (chunk,) = _chunk(text).chunks
    assert "https://www.deskpass.com/" in chunk.text
    assert chunk.embed_text.endswith(
        "Book a desk through Deskpass, see the map and the policy.\n\n"
    )
    assert "http" not in chunk.embed_text and "img/" not in chunk.embed_text
    assert chunk.token_count == count_tokens(chunk.embed_text)
    assert text[chunk.start : chunk.end] == chunk.text


def test_raw_html_is_embedded_as_the_text_it_shows():
    # A README's badges: tags, attributes and URLs would pull the chunk's vector
    # towards every page of the site; alt texts and link texts say what it is.
    badges = (
        '<p align="center">\n'
        '<a href="https://github.com/acme/widgets/actions">\n'
        '    <img src="https://github.com/acme/widgets/badge.svg" alt="Build Status">\n'
        "</a>\n"
        '<img width="400px" src="/img/logo.svg">\n'
        "<!-- the logo -->\n"
        "<em>Widgets &amp; gadgets, assembled.</em>\n"
        "</p>\n"
    )
    text = f"# Widgets\n\n{badges}\nWidgets are assembled by the [line](https://acme.example/line).\n"
    (chunk,) = _chunk(text).chunks
    assert chunk.text == text[chunk.start : chunk.end]
    assert '<img src="https://github.com/acme/widgets/badge.svg"' in chunk.text
    assert chunk.embed_text == (
        "Build Status\nWidgets & gadgets, assembled.\n\n"
        "Widgets are assembled by the line."
    )
    # Cut inside a long HTML block, a chunk starts after the cut tag.
    rows = "".join(
        f'<tr><td><img src="/i/{i}.png" alt="Icon {i}"></td></tr>\n' for i in range(400)
    )
    table = f"# Icons\n\n<table>\n{rows}</table>\n"
    result = _chunk(table, max_tokens=100)
    assert len(result.chunks) > 2
    for chunk in result.chunks:
        assert "src=" not in chunk.embed_text and "<" not in chunk.embed_text
        assert chunk.embed_text.startswith("Icon ")


def test_html_embeds_no_script_or_style_and_cuts_only_inside_tags():
    from kb.chunking import HTMLBlocks, embedded_text

    def parse_html(source: str) -> HTMLBlocks:
        return HTMLBlocks(parse(source, "x.md").sections)

    text = (
        "# Page\n\n<div>\n<style>.badge{color:red}</style>"
        '<script>track("https://x.io/a")</script>\n'
        'Use a -> b to map. <img src="https://x.io/i.png" alt="Map"> done\n</div>\n'
    )
    doc = parse(text, "p.md")
    html = HTMLBlocks(doc.sections)
    block_start, end = text.index("<div>"), len(text) - 1  # the block, no "\n"
    whole = embedded_text(text, block_start, end, html)
    assert whole == "Use a -> b to map. Map done"
    # A chunk starting in the block's text keeps every word of it ...
    at_use = text.index("Use a")
    assert embedded_text(text, at_use, end, html) == "Use a -> b to map. Map done"
    # ... and one starting or ending inside a tag reads from its end, to its start.
    in_tag = text.index("x.io/i.png")
    assert embedded_text(text, in_tag, end, html) == "done"
    assert embedded_text(text, at_use, in_tag, html) == "Use a -> b to map."
    # "a < b" in a cell is text, not a tag; markup HTMLParser cannot read is no crash.
    table = "# T\n\n<table>\n<tr><td>if a < b then swap them</td></tr>\n</table>\n"
    html = HTMLBlocks(parse(table, "t.md").sections)
    end = table.index("</table>") + len("</table>")
    assert embedded_text(table, table.index("then"), end, html) == "then swap them"
    odd = "# O\n\n<div><![ x</div>\n"
    assert embedded_text(odd, odd.index("<div>"), len(odd) - 1, parse_html(odd))


def test_markup_alone_is_no_chunk():
    """QA over React's docs: a tenth of the chunks were "</Sandpack>",
    "<InlineToc />" or a "---" rule, embedded as their heading path alone and
    returned as passages for any question about that heading."""
    text = (
        "# Fragment\n\n<Intro>\n\nGroup elements without a wrapper node.\n\n"
        "</Intro>\n\n<InlineToc />\n\n---\n\n## Usage {/*usage*/}\n\n<Sandpack>"
        "\n\n```js\nreturn <>{items}</>;\n```\n\n</Sandpack>\n\n---\n\n"
        "## Pitfalls\n\n<Pitfall>\n\n</Pitfall>\n\n<DeepDive>\n\nA key goes on "
        "an explicit Fragment.\n\n</DeepDive>\n\n---\n\n"
        '<img src="tree.png" alt="The tree of nodes a fragment leaves out">\n'
    )
    result = _chunk(text, "fragment.md", max_tokens=24)
    for chunk in result.chunks:
        shown = re.sub(r"<[^<>]*>|---", "", chunk.text)
        assert re.search(r"\w", shown) or re.search(r"\w", chunk.embed_text), chunk
    said = "\n".join(c.text + c.embed_text for c in result.chunks)
    for kept in ("Group elements", "return <>{items}</>;", "A key goes", "tree of"):
        assert kept in said
