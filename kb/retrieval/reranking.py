"""Cross-encoder reranking of the top sections (issue #17), off by default.

Set KB_RERANKER_DIR to a directory holding an ONNX cross-encoder as `model.onnx`
and its `tokenizer.json` (the layout of the common ms-marco MiniLM cross-encoders
exported to ONNX). Retrieval then takes max(k, KB_RERANKER_TOP_N) sections, has
the model score the first KB_RERANKER_TOP_N against the question, puts them in
the order of its scores (the rest keep theirs, after them) and packs the budget
from the first k (kb/retrieval/).

The model reads `[CLS] question [SEP] passage [SEP]` (the tokenizer's own pair
template) and gives one relevance logit per pair. Its window is KB_RERANKER_WINDOW,
else the truncation of tokenizer.json, else tokenizer_config.json's
model_max_length, else config.json's max_position_embeddings.

The window guard: the question is never cut (a question that leaves too little
room is not reranked, and the report says so); a passage too long for the rest of
the window is cut on its side only, to the tokens around its section's best hit
(the hit neighbourhood), not to its first tokens, since the hit is why the section
is a candidate at all. Every score comes with the character range and the number
of tokens it read against the passage's total: a section is never reported as
read whole when only part of it was.

No quality figure for reranking exists here: no cross-encoder weights can be
installed on the machine this was built on. The tests use a tiny hand-made model.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from tokenizers import Encoding, Tokenizer

from kb.embedding import (
    default_threads,
    model_inputs,
    model_name_of,
    open_session,
    pad,
)
from kb.embedding_models import read_json

if TYPE_CHECKING:
    import onnxruntime

logger = logging.getLogger(__name__)

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
# A question must leave at least this many tokens of the window for the passage.
MIN_PASSAGE_TOKENS = 32
# tokenizer_config.json says "no limit" with a huge model_max_length (1e30).
MAX_SENSIBLE_WINDOW = 100_000
LOGITS_NAME = "logits"


class RerankError(Exception):
    """The reranker cannot score the given input."""


class QuestionTooLongError(RerankError):
    def __init__(self, tokens: int, window: int) -> None:
        self.tokens, self.window = tokens, window
        super().__init__(
            f"the question has {tokens} tokens; the reranker's window of {window} "
            f"leaves fewer than {MIN_PASSAGE_TOKENS} for a passage"
        )


@dataclass(frozen=True)
class Scored:
    """The score of one passage and the part of it the model read."""

    score: float
    start: int  # characters of the passage read, [start, end)
    end: int
    tokens: int  # passage tokens read (specials and question not counted)
    total_tokens: int  # passage tokens in all

    @property
    def truncated(self) -> bool:
        return self.tokens < self.total_tokens


def missing_files(directory: str | Path) -> list[str]:
    """What a reranker directory lacks (the system check kb.E002 and loading)."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        return [f"KB_RERANKER_DIR {path} is not a directory"]
    return [
        f"KB_RERANKER_DIR {path} has no {name}"
        for name in (MODEL_FILE, TOKENIZER_FILE)
        if not (path / name).is_file()
    ]


class Reranker:
    """A cross-encoder and its tokenizer, loaded from one directory."""

    def __init__(
        self,
        directory: str | Path,
        window: int = 0,
        batch_size: int = 16,
        threads: int = 0,
    ) -> None:
        if problems := missing_files(directory):
            raise ImproperlyConfigured("; ".join(problems))
        self.directory = Path(directory).expanduser().resolve()
        self.model_name = model_name_of(self.directory)
        self.batch_size = max(1, batch_size)
        self.threads = threads or os.cpu_count() or 1
        self.tokenizer = Tokenizer.from_file(str(self.directory / TOKENIZER_FILE))
        self.tokenizer.no_truncation()  # we cut, on the passage side only
        self.tokenizer.no_padding()  # we pad per batch
        self.pair_specials = self.tokenizer.num_special_tokens_to_add(True)
        self.window, self.window_source = self._resolve_window(window)
        self.session = self._load()

    @classmethod
    def from_settings(cls) -> Reranker:
        return cls(
            settings.KB_RERANKER_DIR,
            window=settings.KB_RERANKER_WINDOW,
            batch_size=settings.KB_RERANKER_BATCH,
            threads=settings.KB_EMBED_THREADS or default_threads(),
        )

    def _resolve_window(self, configured: int) -> tuple[int, str]:
        """The window and where it came from, most explicit source first."""
        tokenizer_json = read_json(self.directory / TOKENIZER_FILE)
        config = read_json(self.directory / "config.json")
        positions = config.get("max_position_embeddings")
        candidates = [
            (configured, "KB_RERANKER_WINDOW"),
            (
                (tokenizer_json.get("truncation") or {}).get("max_length"),
                "tokenizer.json truncation",
            ),
            (
                read_json(self.directory / "tokenizer_config.json").get(
                    "model_max_length"
                ),
                "tokenizer_config.json model_max_length",
            ),
            (positions, "config.json max_position_embeddings"),
        ]
        for window, source in candidates:
            if window and int(window) < MAX_SENSIBLE_WINDOW:
                window = int(window)
                if positions and window > int(positions):
                    raise ImproperlyConfigured(
                        f"reranker window {window} ({source}) exceeds the model's "
                        f"{positions} position embeddings"
                    )
                return window, source
        raise ImproperlyConfigured(
            "cannot tell the reranker's window; set KB_RERANKER_WINDOW"
        )

    def _load(self) -> onnxruntime.InferenceSession:
        started = time.perf_counter()
        try:
            session = open_session(self.directory / MODEL_FILE, self.threads)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise ImproperlyConfigured(
                f"KB_RERANKER_DIR {self.directory}: {MODEL_FILE} does not load: {exc}"
            ) from exc
        names = {spec.name for spec in session.get_inputs()}
        unknown = names - {"input_ids", "attention_mask", "token_type_ids"}
        if unknown or "input_ids" not in names:
            raise ImproperlyConfigured(
                f"KB_RERANKER_DIR {self.directory}: the model takes inputs "
                f"{sorted(names)}; a cross-encoder takes input_ids, attention_mask "
                "and optionally token_type_ids"
            )
        logger.info(
            "Loaded reranker %s from %s in %.2f s (window %d from %s)",
            self.model_name,
            self.directory,
            time.perf_counter() - started,
            self.window,
            self.window_source,
        )
        return session

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "directory": str(self.directory),
            "window": self.window,
            "window_source": self.window_source,
            "batch_size": self.batch_size,
            "threads": self.threads,
            "inputs": [spec.name for spec in self.session.get_inputs()],
        }

    # --- scoring -----------------------------------------------------------

    def score(
        self,
        question: str,
        passages: list[str],
        focus: list[tuple[int, int]] | None = None,
    ) -> list[Scored]:
        """A relevance score per passage, in input order (higher is better).

        `focus` gives, per passage, the character range to keep when the passage
        must be cut to the window (default: its start). Raises
        QuestionTooLongError when the question leaves no room for a passage.
        """
        if not passages:
            return []
        query = self.tokenizer.encode(question, add_special_tokens=False)
        room = self.window - self.pair_specials - len(query.ids)
        if room < MIN_PASSAGE_TOKENS:
            raise QuestionTooLongError(len(query.ids), self.window)
        encoded = self.tokenizer.encode_batch(passages, add_special_tokens=False)
        pairs: list[Encoding] = []
        scored: list[tuple[int, int, int, int]] = []
        for i, passage in enumerate(encoded):
            total = len(passage.ids)
            first, last = _span(passage, (focus or [])[i : i + 1], room)
            start, end = _characters(passage, first, last, len(passages[i]))
            passage.truncate(last, direction="right")
            passage.truncate(last - first, direction="left")
            pairs.append(self.tokenizer.post_process(query, passage, True))
            scored.append((start, end, last - first, total))
        logits = self._run(pairs)
        return [Scored(float(s), *rest) for s, rest in zip(logits, scored, strict=True)]

    def _run(self, pairs: list[Encoding]) -> np.ndarray:
        """Logits in input order; pairs sorted by length so that each batch pads
        only to its own longest."""
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i].ids))
        logits = np.zeros(len(pairs), dtype=np.float64)
        for first in range(0, len(order), self.batch_size):
            batch = order[first : first + self.batch_size]
            logits[batch] = self._run_batch([pairs[i] for i in batch])
        return logits

    def _run_batch(self, pairs: list[Encoding]) -> np.ndarray:
        inputs = model_inputs(self.session, pad(pairs))
        names = [output.name for output in self.session.get_outputs()]
        output = LOGITS_NAME if LOGITS_NAME in names else names[0]
        return relevance(self.session.run([output], inputs)[0], len(pairs))


def relevance(logits: np.ndarray, rows: int) -> np.ndarray:
    """One score per pair from logits shaped (n,), (n, 1) or (n, 2).

    Two columns are (not relevant, relevant): their difference is the log-odds
    of relevance, which orders pairs as the softmax probability does (the second
    logit alone does not).
    """
    logits = np.asarray(logits, dtype=np.float64)
    if logits.shape == (rows,):
        return logits
    if logits.shape == (rows, 1):
        return logits[:, 0]
    if logits.shape == (rows, 2):
        return logits[:, 1] - logits[:, 0]
    raise RerankError(
        f"the reranker's output has shape {logits.shape}; expected ({rows},), "
        f"({rows}, 1) or ({rows}, 2)"
    )


def _span(
    passage: Encoding, focus: list[tuple[int, int]], room: int
) -> tuple[int, int]:
    """Tokens [first, last) of a passage to read: all of it when it fits, else
    `room` tokens around the focus range, starting at a whole word."""
    total = len(passage.ids)
    if total <= room:
        return 0, total
    if not focus:
        return 0, _word_end(passage, 0, room)
    lo, hi = focus[0]
    tokens = [t for t, (a, b) in enumerate(passage.offsets) if b > lo and a < hi]
    if not tokens:
        return 0, _word_end(passage, 0, room)
    first, last = tokens[0], tokens[-1] + 1
    if last - first >= room:
        return first, _word_end(passage, first, first + room)
    first = max(0, first - (room - (last - first)) // 2)
    last = min(total, first + room)
    first = max(0, last - room)
    words = passage.word_ids
    while 0 < first < tokens[0] and words[first] == words[first - 1]:
        first += 1  # start at a whole word, not inside one
    return first, _word_end(passage, first, last)


def _word_end(passage: Encoding, first: int, last: int) -> int:
    """`last`, or before the word `last` cuts (unless one word fills it all)."""
    words = passage.word_ids
    end = last
    while first + 1 < end < len(words) and words[end] == words[end - 1]:
        end -= 1
    return end if end > first + 1 else last


def _characters(
    passage: Encoding, first: int, last: int, length: int
) -> tuple[int, int]:
    if last <= first:
        return 0, 0
    if first == 0 and last == len(passage.ids):
        return 0, length
    return passage.offsets[first][0], passage.offsets[last - 1][1]


_rerankers: dict[tuple, Reranker] = {}
_rerankers_lock = threading.Lock()


def enabled() -> bool:
    return bool(settings.KB_RERANKER_DIR)


def get_reranker() -> Reranker:
    """The process-wide reranker for the current settings."""
    key = (
        settings.KB_RERANKER_DIR,
        settings.KB_RERANKER_WINDOW,
        settings.KB_RERANKER_BATCH,
        settings.KB_EMBED_THREADS,
    )
    with _rerankers_lock:
        if key not in _rerankers:
            _rerankers[key] = Reranker.from_settings()
        return _rerankers[key]


def run_config() -> dict[str, Any]:
    """What an evaluation run records of the reranker: nothing when none is set."""
    if not enabled():
        return {}
    reranker = get_reranker()
    return {
        "reranker": {
            "model": reranker.model_name,
            "top_n": settings.KB_RERANKER_TOP_N,
            "window": reranker.window,
        }
    }


# --- sections (called by pipeline.py) ---------------------------------------------


@dataclass
class SectionScore:
    section_id: int
    heading_path: str
    rank_before: int  # 1-based, in the fused ranking
    score: float
    start: int  # characters of the source the model read, [start, end)
    end: int
    tokens: int  # tokens of the section's text the model read
    total_tokens: int  # tokens of the text it was given (a long section: the
    # loaded chunks around its hits)
    truncated: bool


@dataclass
class Report:
    """What the reranker did to one question's sections (the API's `reranking`)."""

    model: str
    window: int
    top_n: int
    ms: float
    sections: list[SectionScore] = field(default_factory=list)  # in the new order
    skipped: str = ""  # why nothing was reordered, if it was not

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        for section in found["sections"]:
            section["score"] = round(section["score"], 5)
        return found


def pool_size(k: int) -> int:
    """Sections retrieval should take: k, or the reranker's top N when more."""
    return max(k, settings.KB_RERANKER_TOP_N) if enabled() else k


def rerank_sections(
    question: str, selected: list, k: int
) -> tuple[list, Report | None]:
    """The first k of `selected` (retrieval's rows.Selected, best first) once its top
    KB_RERANKER_TOP_N are reordered by the reranker, and the report; unchanged
    with no report when no reranker is configured."""
    if not enabled() or not selected:
        return selected[:k], None
    reranker = get_reranker()
    top = selected[: settings.KB_RERANKER_TOP_N]
    texts, offsets, focus = zip(*map(_section_passage, top), strict=True)
    report = Report(reranker.model_name, reranker.window, len(top), 0.0)
    started = time.perf_counter()
    try:
        scores = reranker.score(question, list(texts), list(focus))
    except QuestionTooLongError as exc:
        logger.warning("Not reranked: %s", exc)
        report.skipped = str(exc)
        return selected[:k], report
    report.ms = round((time.perf_counter() - started) * 1000, 2)
    order = sorted(range(len(top)), key=lambda i: (-scores[i].score, i))
    for i in order:
        s, section = scores[i], top[i].section
        report.sections.append(
            SectionScore(
                section.id,
                section.heading_path,
                i + 1,
                s.score,
                offsets[i] + s.start,
                offsets[i] + s.end,
                s.tokens,
                s.total_tokens,
                s.truncated,
            )
        )
    return ([top[i] for i in order] + selected[len(top) :])[:k], report


def _section_passage(item) -> tuple[str, int, tuple[int, int]]:
    """(text, its offset in the source, best hit's range in the text) of a chosen
    section: the whole section when retrieval loaded it whole, else the loaded
    chunks around its best hit (a section over MAX_WHOLE_SECTION_TOKENS)."""
    section, hit = item.section, item.hits[0]
    start, end = section.start, section.end
    if not section.body:
        for part_start, text in item.text.parts:
            if part_start <= hit.start < part_start + len(text):
                start = max(start, part_start)
                end = min(end, part_start + len(text))
                break
        else:
            start, end = hit.start, hit.end
    return item.text[start:end], start, (hit.start - start, hit.end - start)
