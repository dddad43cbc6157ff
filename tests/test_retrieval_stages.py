"""The pure stages of retrieval (kb/retrieval/): tables, expansion, passages.

No database: these are SimpleTestCases, and the stages themselves must import no
ORM, so they can be read and tested apart from the queries that feed them.
"""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings
from django.test import SimpleTestCase, override_settings

from kb.chunking import ChunkKind
from kb.retrieval import expansion, tables
from kb.retrieval.passages import (
    Hit,
    Location,
    Passage,
    TextWindow,
    context_tokens,
    merge,
)
from kb.retrieval.rows import ChunkRow, SectionRow, Selected

PURE_STAGES = [
    "kb.retrieval.expansion",
    "kb.retrieval.passages",
    "kb.retrieval.rows",
    "kb.retrieval.tables",
]
# django.apps is not among them: the stages word their refusals with
# django.utils.translation (issue #27), which imports the app registry's module
# (for its autoreloader) but not the ORM.
ORM = ("django.db", "kb.models", "django.contrib")


def _passage(start: int, end: int, text: str, section_id: int = 1) -> Passage:
    location = Location(section_id, f"Guide > {section_id}", start, end, [section_id])
    return Passage(
        1,
        "Guide",
        "guide.md",
        start,
        end,
        text[start:end],
        1.0 / section_id,
        {"vector"},
        [location],
        source_text=TextWindow([(0, text)]),
    )


def _chunk(
    index: int, start: int, end: int, text: str, after: int, kind=ChunkKind.TEXT
):
    """Chunk `index` of section 1 over text[start:end]; its lead is the text
    between the chunk before it (ending at `after`) and itself."""
    return ChunkRow(
        10 + index,
        1,
        1,
        index,
        start,
        end,
        context_tokens(text[start:end]),
        text[start:end],
        text[after:start],
        kind,
    )


class PureStagesTestCase(SimpleTestCase):
    def test_it_imports_the_pure_stages_without_the_orm(self):
        code = (
            f"import sys\nfor m in {PURE_STAGES!r}: __import__(m)\n"
            f"print(sorted(m for m in sys.modules if m.startswith({ORM!r})))"
        )
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=settings.BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), "[]")


class MergeTestCase(SimpleTestCase):
    TEXT = "First part of the guide.\n\nSecond part.\n\nThird part, far below."

    def test_it_merges_overlapping_passages_keeping_every_location(self):
        merged = merge([_passage(0, 30, self.TEXT, 1), _passage(20, 40, self.TEXT, 2)])
        self.assertEqual(len(merged), 1)
        self.assertEqual((merged[0].start, merged[0].end), (0, 40))
        self.assertEqual(merged[0].text, self.TEXT[:40])
        self.assertEqual([loc.section_id for loc in merged[0].locations], [1, 2])
        self.assertEqual(merged[0].sections_merged, 2)

    def test_it_merges_passages_only_whitespace_apart(self):
        first, second = self.TEXT.index("Second"), self.TEXT.index("Third")
        merged = merge(
            [_passage(0, 24, self.TEXT, 1), _passage(first, 38, self.TEXT, 2)]
        )
        self.assertEqual([(p.start, p.end) for p in merged], [(0, 38)])
        apart = merge(
            [_passage(0, 24, self.TEXT, 1), _passage(second, 50, self.TEXT, 2)]
        )
        self.assertEqual(len(apart), 2)

    def test_the_best_ranked_passage_leads_a_merge(self):
        later, earlier = _passage(20, 40, self.TEXT, 1), _passage(0, 30, self.TEXT, 2)
        merged = merge([later, earlier])
        self.assertIs(merged[0], later)
        self.assertEqual(merged[0].score, 1.0)
        self.assertEqual([loc.start for loc in merged[0].locations], [0, 20])

    def test_a_merge_is_labelled_by_the_section_it_was_chosen_for(self):
        """QA over Bash's PDF manual: the entry "globstar" merged with the
        "globskipdots" entry before it was labelled "globskipdots"."""
        chosen, before = _passage(20, 40, self.TEXT, 7), _passage(0, 30, self.TEXT, 2)
        merged = merge([chosen, before])
        self.assertEqual(merged[0].heading_path, "Guide > 7")
        self.assertEqual(merged[0].locations[0].heading_path, "Guide > 2")


class TableHeadersTestCase(SimpleTestCase):
    TEXT = (
        "Limits of the plans.\n\n"
        "| Plan | Jobs |\n| --- | ---: |\n| Free | 10 |\n| Pro | 1000 |\n\n"
        "Ask support for more."
    )

    def _chunks(self) -> list[ChunkRow]:
        free, pro = self.TEXT.index("| Free"), self.TEXT.index("| Pro")
        after = self.TEXT.index("Ask")
        row = ChunkKind.TABLE_ROW
        return [
            _chunk(0, 0, 20, self.TEXT, 0),
            _chunk(1, free, free + 13, self.TEXT, 20, row),
            _chunk(2, pro, pro + 14, self.TEXT, free + 13, row),
            _chunk(3, after, len(self.TEXT), self.TEXT, pro + 14),
        ]

    def test_every_row_of_a_table_gets_its_header_line(self):
        headers = tables.table_headers(self._chunks(), {})
        header = self.TEXT.index("| Plan")
        self.assertEqual(headers, {1: (header, header + 15), 2: (header, header + 15)})
        self.assertEqual(self.TEXT[slice(*headers[1])], "| Plan | Jobs |")

    def test_a_lead_without_a_delimiter_line_has_no_header(self):
        self.assertIsNone(tables.header_line("Just a paragraph.\n\n", 0))
        self.assertEqual(tables.header_line("a | b\n---|---\n", 100), (100, 105))

    def test_a_window_starting_mid_table_takes_the_header_of_its_first_row(self):
        first, second = self._chunks()[1:3]
        window = [second]  # a window of a long section, without the first row
        self.assertTrue(tables.mid_table_start(window, 0))
        self.assertEqual(tables.table_headers(window, {}), {})
        found = {(1, 2): tables.FirstRow(1, first.start, first.lead)}
        header = self.TEXT.index("| Plan")
        self.assertEqual(
            tables.table_headers(window, found), {0: (header, header + 15)}
        )


class ExpansionTestCase(SimpleTestCase):
    TEXT = (
        "Apples grow on trees in the orchard.\n\n"
        "Pears ripen after they are picked.\n\n"
        "Plums are dried into prunes."
    )

    def _selected(self) -> Selected:
        starts = [0, self.TEXT.index("Pears"), self.TEXT.index("Plums")]
        ends = [
            self.TEXT.index(".") + 1,
            self.TEXT.index("picked.") + 7,
            len(self.TEXT),
        ]
        chunks = [
            _chunk(i, s, e, self.TEXT, ends[i - 1] if i else 0)
            for i, (s, e) in enumerate(zip(starts, ends, strict=True))
        ]
        section = SectionRow(
            1,
            1,
            "Fruit",
            "fruit.md",
            "Fruit",
            0,
            0,
            len(self.TEXT),
            context_tokens(self.TEXT),
            self.TEXT,
        )
        hit = Hit(12, 1, 1, 2, starts[2], ends[2], vector_rank=1, score=0.5)
        return Selected(section, [hit], 0.5, chunks, TextWindow([(0, self.TEXT)]))

    def test_a_section_that_fits_goes_in_whole(self):
        item = self._selected()
        expanded = expansion.expand([item], 1000)
        [passage] = expanded.passages
        self.assertEqual(passage.text, self.TEXT)
        self.assertEqual(passage.chunk_indexes, [0, 1, 2])
        self.assertEqual(expanded.whole, [item])
        self.assertEqual(expanded.remaining, 1000 - context_tokens(self.TEXT))

    @override_settings(KB_WINDOW_GROWTH=True)
    def test_a_tight_budget_keeps_only_the_hit(self):
        item = self._selected()
        hit_text = self.TEXT[self.TEXT.index("Plums") :]
        expanded = expansion.expand([item], context_tokens(hit_text))
        [passage] = expanded.passages
        self.assertEqual((passage.text, passage.chunk_indexes), (hit_text, [2]))
        self.assertEqual((expanded.whole, expanded.remaining), ([], 0))

    def test_a_section_whose_best_chunk_does_not_fit_is_dropped(self):
        expanded = expansion.expand([self._selected()], 2)
        self.assertEqual(expanded.passages, [])

    def test_a_short_gap_between_two_hits_of_a_section_is_taken_first(self):
        """QA over React's French docs: two rows of the refs-or-state table
        were hits, the row between them was not, and the next section's second
        hit took the budget before windows could reach over the gap: the
        table was shown with its key row missing."""
        fruit = self._selected()
        starts = [c.start for c in fruit.chunks]
        fruit.hits = [
            Hit(10, 1, 1, 0, starts[0], fruit.chunks[0].end, vector_rank=1, score=0.9),
            Hit(12, 1, 1, 2, starts[2], fruit.chunks[2].end, vector_rank=2, score=0.8),
        ]
        text = "Grapes grow on vines.\n\nRaisins are dried grapes."
        cut = text.index("Raisins")
        chunks = [
            ChunkRow(20, 2, 2, 0, 0, cut - 2, 5, text[: cut - 2], "", ChunkKind.TEXT),
            ChunkRow(
                21, 2, 2, 1, cut, len(text), 5, text[cut:], "\n\n", ChunkKind.TEXT
            ),
        ]
        grapes = Selected(
            SectionRow(
                2,
                2,
                "Grapes",
                "grapes.md",
                "Grapes",
                0,
                0,
                len(text),
                context_tokens(text),
                text,
            ),
            [
                Hit(20, 2, 2, 0, 0, cut - 2, vector_rank=3, score=0.7),
                Hit(21, 2, 2, 1, cut, len(text), vector_rank=4, score=0.6),
            ],
            0.7,
            chunks,
            TextWindow([(0, text)]),
        )
        # the fruit section's hits and the gap, then the grapes' best chunk
        budget = context_tokens(self.TEXT) + context_tokens(text[: cut - 2])
        expanded = expansion.expand([fruit, grapes], budget)
        first = expanded.passages[0]
        self.assertEqual(first.chunk_indexes, [0, 1, 2], first.text)
        self.assertIn("Pears ripen", first.text)

    def test_regions_join_adjacent_taken_chunks(self):
        chunks = self._selected().chunks
        regions = expansion.regions_of(chunks, dict.fromkeys([1, 2]))
        self.assertEqual(regions, [(chunks[1].start, chunks[2].end, [1, 2])])


class RegionsTestCase(SimpleTestCase):
    def test_a_header_a_run_already_holds_is_not_counted_again(self):
        def chunk(index, start, end, kind=ChunkKind.TABLE_ROW):
            return ChunkRow(
                index, 1, 1, index, start, end, 5, "x" * (end - start), "", kind
            )

        chunks = [
            chunk(0, 0, 40, ChunkKind.TEXT),
            chunk(1, 60, 80),
            chunk(2, 81, 100),
            chunk(3, 101, 120),
        ]
        headers = {1: (42, 50), 2: (42, 50), 3: (42, 50)}
        regions = expansion.regions_of(chunks, dict.fromkeys([0, 1, 3]), headers)
        self.assertEqual(regions, [(0, 80, [0, 1]), (101, 120, [3])])
        regions = expansion.regions_of(chunks, dict.fromkeys([3]), headers)
        self.assertEqual(regions, [(42, 50, []), (101, 120, [3])])

    def test_a_run_from_a_tables_first_row_starts_at_its_header(self):
        # QA over Debian's French aptitude manual: the header line alone was
        # passage 1, "| Niveau de coût | Description | Option |", and the rows
        # it names passage 2
        text = "Costs:\n\n| Level | Option |\n| --- | --- |\n| 10 | `Safe` |\n"
        first = text.index("| 10")
        header = (text.index("| Level"), text.index(" |\n| ---") + 2)
        row = ChunkRow(
            1, 1, 1, 1, first, len(text) - 1, 5, text[first:-1],
            text[header[0] : first], ChunkKind.TABLE_ROW,
        )  # fmt: skip
        regions = expansion.regions_of([row], dict.fromkeys([0]), {0: header})
        self.assertEqual(regions, [(header[0], len(text) - 1, [1])])
        self.assertEqual(
            text[regions[0][0] : regions[0][1]],
            "| Level | Option |\n| --- | --- |\n| 10 | `Safe` |",
        )


class SiblingSectionsTestCase(SimpleTestCase):
    """At most SIBLINGS of the top k sections under one parent heading (issue
    #7): sibling sections rank together and pushed a question's second part
    out of the context. Those past the cap move behind the others, not out."""

    def test_a_fourth_sibling_moves_behind_another_heading(self):
        from kb.retrieval import sections
        from kb.retrieval.passages import Hit

        paths = [
            "Benefits > Vision",
            "Benefits > Dental",
            "Benefits > Medical",
            "Benefits > Gym",
            "Travel > Per diem",
            "Benefits > Pension",
        ]
        ranked = [
            (n, [Hit(n * 10, 1, n, 0, 0, 10, heading_path=path, score=1 / n)])
            for n, path in enumerate(paths, 1)
        ]
        self.assertEqual(sections.SIBLINGS, 3)
        order = [sid for sid, _ in sections.diverse(ranked, k=3)]
        # Vision, Dental, Medical stay first; Per diem comes before Gym and
        # Pension, which are kept, behind.
        self.assertEqual(order, [1, 2, 3, 5, 4, 6])
        # Sections without a parent heading are never capped.
        flat = [(n, [Hit(n, 1, n, 0, 0, 1, heading_path=f"Top {n}")]) for n in range(6)]
        self.assertEqual(sections.diverse(flat, k=3), flat)
