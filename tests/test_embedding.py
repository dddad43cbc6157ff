"""The embedder against sentence-transformers' own vectors (issue #3).

No database: these are SimpleTestCases. The model loads once per process
through get_embedder()'s singleton, so the whole file runs in seconds.
"""

from __future__ import annotations

import json
import tempfile
from io import StringIO
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import SimpleTestCase
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kb.embedding import (
    Embedder,
    ModelSource,
    WindowExceededError,
    count_tokens,
    get_embedder,
    synthetic_text,
)
from tests.base import shared_or_skip

FIXTURE = Path(settings.BASE_DIR).parent / "shared/fixtures/minilm_reference.json"
DISTINCTIVE = " Finally, the purple giraffe orchestra rehearses underwater at midnight."
PARAGRAPH = (
    "To restore the database, stop the workers, take a snapshot of the volume, "
    "and run the restore script with the backup's timestamp. Check the logs for "
    "replication errors before restarting the web servers. "
)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _reference_cases() -> list[dict[str, Any]]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]


def _text_of_about(tokens: int) -> str:
    """Natural prose, whole sentences, just under `tokens` tokens."""
    text = ""
    while count_tokens(text + PARAGRAPH) <= tokens:
        text += PARAGRAPH
    return text.strip()


class ReferenceVectorsTestCase(SimpleTestCase):
    def setUp(self) -> None:
        shared_or_skip(FIXTURE)
        self.cases = _reference_cases()
        self.texts = [case["text"] for case in self.cases]

    def _cosines(self, precision: str) -> list[float]:
        vectors = get_embedder(precision=precision).embed(self.texts)
        return [
            _cosine(vector, np.array(case["vector"]))
            for vector, case in zip(vectors, self.cases)
        ]

    def test_it_matches_sentence_transformers_in_fp32(self) -> None:
        cosines = self._cosines("fp32")
        print(f"fp32 vs sentence-transformers: min cosine {min(cosines):.12f}")
        for text, cosine in zip(self.texts, cosines):
            self.assertGreater(cosine, 0.9999, text[:40])

    def test_it_stays_close_in_int8(self) -> None:
        cosines = self._cosines("int8")
        print(f"int8 vs sentence-transformers: min cosine {min(cosines):.4f}")
        self.assertGreater(min(cosines), 0.95)

    def test_it_counts_tokens_without_truncation(self) -> None:
        for case in self.cases:
            self.assertEqual(count_tokens(case["text"]), case["tokens_untruncated"])


class WindowTestCase(SimpleTestCase):
    def setUp(self) -> None:
        self.embedder = get_embedder(precision="fp32")

    def test_it_counts_special_tokens(self) -> None:
        self.assertEqual(count_tokens(""), 2)
        self.assertEqual(self.embedder.special_tokens, 2)
        self.assertEqual(self.embedder.usable_window, self.embedder.window - 2)

    def test_it_embeds_a_text_exactly_at_the_window(self) -> None:
        text = synthetic_text(self.embedder, self.embedder.window)
        vectors = self.embedder.embed([text])
        self.assertEqual(vectors.shape, (1, 384))
        self.assertAlmostEqual(float(np.linalg.norm(vectors[0])), 1.0, places=5)

    def test_it_refuses_a_text_over_the_window(self) -> None:
        window = self.embedder.window
        text = synthetic_text(self.embedder, window + 1)
        origin = "chunk 4 of 'Deploy runbook'"
        with self.assertRaises(WindowExceededError) as caught:
            self.embedder.embed(["short", text], origins=["chunk 3", origin])
        message = str(caught.exception)
        self.assertIn(origin, message)
        self.assertIn(f"{window + 1} tokens", message)
        self.assertIn(f"reads {window}", message)

    def test_it_truncates_only_when_asked(self) -> None:
        window = self.embedder.window
        text = synthetic_text(self.embedder, window + 40)
        # Synthetic words are one token each: the kept part is the first words.
        kept = " ".join(text.split()[: self.embedder.usable_window])
        truncated, short = self.embedder.embed_truncating([text, "short"])
        self.assertGreater(_cosine(truncated, self.embedder.embed([kept])[0]), 0.99999)
        self.assertGreater(_cosine(short, self.embedder.embed(["short"])[0]), 0.99999)

    def test_it_sees_a_sentence_appended_to_a_long_text(self) -> None:
        text = _text_of_about(200)
        self.assertGreater(count_tokens(text), 150)
        longer = text + DISTINCTIVE
        self.assertLessEqual(count_tokens(longer), self.embedder.window)
        before, after = self.embedder.embed([text, longer])
        self.assertLess(_cosine(before, after), 0.9999)

    def test_it_reports_the_tokenizer_truncation_as_handled_not_a_warning(self):
        info = self.embedder.describe()
        self.assertEqual(info["tokenizer_truncation"], 128)
        self.assertIn("switched off", info["tokenizer_truncation_note"])
        self.assertEqual(info["warnings"], [])


CORPORA = Path(settings.BASE_DIR).parent / "shared/corpora"
# Whitespace, control and format characters, accents, CJK, punctuation (a
# word is counted as its marks and the runs between them) and literal special
# tokens: everything that decides where the tokenizer splits.
AWKWARD = st.sampled_from(
    list(" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u2003\u2028\u200b\ufeff\x00\ufffd")
    + ["[CLS]", "[SEP]", "[MASK]", "##", "é", "e\u0301", "日本", "😀", "x" * 120]
    + list("();:[]`~-_.,!?'\"/\\@{}|")
    + ["\u037e", ";\u0301", "—", "«", "x" * 99]
)


class TokenCountTestCase(SimpleTestCase):
    """count_tokens sums remembered word counts: it must equal whole-text encoding."""

    def _encoded(self, text: str) -> int:
        return len(get_embedder().tokenizer.encode(text).ids)

    @hypothesis_settings(max_examples=300, deadline=None)
    @given(st.lists(st.one_of(st.text(max_size=12), AWKWARD), max_size=30))
    @example(["a\x0bb", " ", "c\x1cd"])  # dropped control characters join words
    @example(["[CLS]x", "\xa0", "y[SEP]"])
    @example(["limit;", " (limit", " [CLS];x", " a;\u0301b", " ", "x" * 99, "!"])
    def test_it_counts_like_the_tokenizer(self, parts: list[str]) -> None:
        text = "".join(parts)
        self.assertEqual(count_tokens(text), self._encoded(text))

    def test_it_counts_the_shared_corpora_like_the_tokenizer(self) -> None:
        shared_or_skip(CORPORA)
        for path in sorted(CORPORA.rglob("*.md")):
            text = path.read_text(encoding="utf-8")
            for piece in (text, text[: len(text) // 3], text[len(text) // 3 :]):
                with self.subTest(path=path.name):
                    self.assertEqual(count_tokens(piece), self._encoded(piece))


class BatchingTestCase(SimpleTestCase):
    def test_it_gives_the_same_vector_alone_and_in_a_mixed_batch(self) -> None:
        embedder = get_embedder(precision="fp32")
        target = "How do I rotate the API keys for the billing service?"
        others = [_text_of_about(n) for n in (40, 120, 200)] + ["ok", "yes"]
        alone = embedder.embed([target])[0]
        mixed = embedder.embed(others[:3] + [target] + others[3:], batch_size=4)
        self.assertGreater(_cosine(alone, mixed[3]), 0.99999)
        self.assertEqual(mixed.dtype, np.float32)


class ReadyModelDirTestCase(SimpleTestCase):
    """KB_MODEL_DIR: a Hugging Face style directory with model.onnx is used as-is."""

    def test_it_runs_a_ready_model_onnx(self) -> None:
        built = get_embedder(precision="fp32")
        built.embed(["warm up"])  # makes sure model.onnx exists in the cache
        with tempfile.TemporaryDirectory() as directory:
            ready = Path(directory)
            (ready / "model.onnx").symlink_to(built.model_path)
            for name in ("tokenizer.json", "config.json"):
                (ready / name).symlink_to(built.source.directory / name)
            embedder = Embedder(ModelSource("ready", ready, builds_graph=False))
            vector = embedder.embed(["hello world"])[0]
        # No sentence_bert_config.json: the tokenizer's own limit is the window.
        self.assertEqual(embedder.window_source, "tokenizer.json truncation")
        self.assertEqual(embedder.window, 128)
        self.assertGreater(_cosine(vector, built.embed(["hello world"])[0]), 0.999999)


class EmbedderCommandTestCase(SimpleTestCase):
    def test_it_prints_the_window_and_budget(self) -> None:
        out = StringIO()
        call_command("kb_embedder", precision="fp32", stdout=out)
        self.assertIn("usable chunk budget: 254 tokens", out.getvalue())
        self.assertIn(
            "tokenizer.json truncation: 128, switched off: texts are checked "
            "against the 256-token window instead",
            out.getvalue(),
        )
        self.assertNotIn("warning", out.getvalue())

    def test_it_embeds_json_lines(self) -> None:
        texts = ["The quick brown fox jumps over the lazy dog.", "hello"]
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "in.jsonl"
            lines = [
                json.dumps({"id": "a", "text": texts[0]}),
                json.dumps({"text": texts[1]}),
            ]
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            out = StringIO()
            call_command("kb_embedder", embed=str(path), precision="fp32", stdout=out)
        rows = [json.loads(line) for line in out.getvalue().splitlines()]
        self.assertEqual([row.get("id") for row in rows], ["a", None])
        self.assertEqual(rows[0]["token_count"], 12)
        expected = get_embedder(precision="fp32").embed(texts)
        for row, vector in zip(rows, expected):
            self.assertGreater(_cosine(np.array(row["vector"]), vector), 0.999999)

    def test_it_refuses_a_line_json_cannot_read_naming_it(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "in.jsonl"
            path.write_text('{"text": "a"}\n' + "[" * 100000 + "\n", "utf-8")
            with self.assertRaisesMessage(CommandError, "line 2 is nested too deeply"):
                call_command("kb_embedder", embed=str(path), stdout=StringIO())
