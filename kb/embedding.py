"""Sentence vectors on onnxruntime (issue #3), from the model a collection
names (kb/embedding_models.py, issue #27).

The rest of the app takes an embedder from `get_embedder(model, precision)` or
`for_collection(collection)`, and embeds indexed text with `embed_passages()`
and questions with `embed_query()`, which put the model's prompts (e5's
`passage: ` / `query: `) before the text; `count_passage_tokens()` counts what
the model reads of an indexed text, prompt included. Tokenizing is cheap and
needs no ONNX model; the inference session is created (and the graph built, if
not cached) on the first call that embeds.

Nothing is ever truncated: a text longer than the window raises
`WindowExceededError` naming where it came from.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import random
import re
import threading
import time
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from tokenizers import Encoding, Tokenizer

from kb import embedding_models
from kb.embedding_models import ModelSource, read_json

if TYPE_CHECKING:
    import onnxruntime

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = embedding_models.MINILM_NAME
PRECISIONS = ("fp32", "int8")
# Some HF exports name the output differently; we take the first output then.
OUTPUT_NAME = "last_hidden_state"


class EmbeddingError(Exception):
    """The embedder cannot produce a vector for the given input."""


class WindowExceededError(EmbeddingError):
    """A text has more tokens than the model reads; it would be cut silently."""

    def __init__(self, origin: str, token_count: int, window: int) -> None:
        self.origin = origin
        self.token_count = token_count
        self.window = window
        super().__init__(f"{origin} has {token_count} tokens; the model reads {window}")


def model_name_of(directory: Path) -> str:
    config = read_json(directory / "config.json")
    return str(config.get("_name_or_path") or directory.name)


# onnxruntime graph rewrites left out per precision (issue #8). In the int8 graph,
# fusing each residual Add into the next LayerNormalization (SkipLayerNormalization)
# took 20 % of the run time on an AVX-512 CPU; unfused, int8 ran 1.50x -> 1.81x
# fp32 at 250 tokens and 1.68x -> 2.16x at 120, with the same vectors (min cosine
# to fp32 0.988). The fp32 graph is not affected either way.
DISABLED_FUSIONS = {"fp32": [], "int8": ["SkipLayerNormFusion"]}


class TokenStates(NamedTuple):
    """A text's token states (one unit row per token read) and its tokens."""

    states: np.ndarray  # float32 [tokens, dim]
    tokens: list[str]


class Embedder:
    """Tokenizer + lazily created ONNX session for one model and precision."""

    def __init__(
        self,
        source: ModelSource,
        precision: str = "fp32",
        window: int = 0,
        batch_size: int = 16,
        threads: int = 0,
    ) -> None:
        if precision not in PRECISIONS:
            raise ImproperlyConfigured(f"precision must be one of {PRECISIONS}")
        self.source = source
        self.model_name = source.name
        self.query_prefix = source.query_prefix
        self.passage_prefix = source.passage_prefix
        self.precision = precision
        self.batch_size = max(1, batch_size)
        self.threads = threads or os.cpu_count() or 1
        self._raw_tokenizer_config = read_json(source.tokenizer_path)
        self.tokenizer = Tokenizer.from_file(str(source.tokenizer_path))
        # The shipped tokenizer.json truncates and pads to 128: counting and
        # batching must see the whole text, and we pad per batch ourselves.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.special_tokens = len(self.tokenizer.encode("").ids)
        config = self._raw_tokenizer_config
        # SentencePiece's Metaspace (e5's XLM-R) counts by words too.
        self._metaspace = _metaspace_counts_add_up(config)
        self._word_counts: dict[str, int] | None = (
            {} if self._metaspace or _counts_add_up(config) else None
        )
        self._added = [t["content"] for t in config.get("added_tokens") or []]
        self._added_re = (
            re.compile("|".join(map(re.escape, self._added))) if self._added else None
        )
        self._stays: dict[str, bool] = {}  # characters normalized to themselves
        # Counted as the sum of remembered words' counts (fast on long texts).
        self.counts_by_words = self._word_counts is not None
        self.window, self.window_source = self._resolve_window(window)
        # What the passage prompt takes of every indexed text's window.
        self.passage_prompt_tokens = self._prompt_tokens(self.passage_prefix)
        self.usable_window = (
            self.window - self.special_tokens - self.passage_prompt_tokens
        )
        self._check_window()
        self._session: onnxruntime.InferenceSession | None = None
        self._session_lock = threading.Lock()
        self.model_path: Path | None = None
        self.build_seconds: float | None = None

    @classmethod
    def from_settings(
        cls, model: str | None = None, precision: str | None = None
    ) -> Embedder:
        source = embedding_models.source(model)
        return cls(
            source,
            precision=precision or settings.KB_EMBED_PRECISION,
            # KB_EMBED_WINDOW narrows the default model's window only.
            window=settings.KB_EMBED_WINDOW if source.is_default else 0,
            batch_size=settings.KB_EMBED_BATCH,
            threads=settings.KB_EMBED_THREADS or default_threads(),
        )

    # --- configuration -------------------------------------------------

    @cached_property
    def _model_config(self) -> dict[str, Any]:
        return read_json(self.source.directory / "config.json")

    @property
    def dim(self) -> int:
        return int(self._model_config.get("hidden_size", 384))

    @property
    def max_positions(self) -> int | None:
        value = self._model_config.get("max_position_embeddings")
        return int(value) if value else None

    @property
    def tokenizer_truncation(self) -> int | None:
        """max_length configured in tokenizer.json itself (None: no truncation)."""
        truncation = self._raw_tokenizer_config.get("truncation") or {}
        return truncation.get("max_length")

    def _resolve_window(self, configured: int) -> tuple[int, str]:
        """The window and where it came from, most explicit source first."""
        st_config = read_json(self.source.directory / "sentence_bert_config.json")
        candidates = [
            (configured, "KB_EMBED_WINDOW"),
            (st_config.get("max_seq_length"), "sentence_bert_config.json"),
            (self.tokenizer_truncation, "tokenizer.json truncation"),
            (self.max_positions, "config.json max_position_embeddings"),
        ]
        for window, source in candidates:
            if window:
                return int(window), source
        raise ImproperlyConfigured(
            "cannot tell the model's window; set KB_EMBED_WINDOW"
        )

    def _check_window(self) -> None:
        if self.usable_window < 1:
            raise ImproperlyConfigured(f"embedding window {self.window} is too small")
        if self.max_positions and self.window > self.max_positions:
            raise ImproperlyConfigured(
                f"embedding window {self.window} exceeds the model's "
                f"{self.max_positions} position embeddings"
            )

    def warnings(self) -> list[str]:
        """What a person should act on. tokenizer.json's truncation (128 tokens in
        all-MiniLM-L6-v2's, under its 256-token window) is not among them: it is
        switched off and texts are checked against the window instead, a known,
        handled fact that `truncation_note` states (issue #26)."""
        return []

    def truncation_note(self) -> str:
        """tokenizer.json's own truncation, and what kb does with it."""
        truncation = self.tokenizer_truncation
        if not truncation:
            return "none"
        if truncation == self.window:
            return f"{truncation} (the window)"
        return (
            f"{truncation}, switched off: texts are checked against the "
            f"{self.window}-token window instead, and a longer one is rejected"
        )

    def describe(self) -> dict[str, Any]:
        """Settings a person needs to trust the vectors; cheap unless it builds."""
        return {
            "model": self.model_name,
            "query_prefix": self.query_prefix,
            "passage_prefix": self.passage_prefix,
            "passage_prompt_tokens": self.passage_prompt_tokens,
            "counts_by_words": self.counts_by_words,
            "window": self.window,
            "window_source": self.window_source,
            "special_tokens": self.special_tokens,
            "usable_window": self.usable_window,
            "tokenizer_truncation": self.tokenizer_truncation,
            "tokenizer_truncation_note": self.truncation_note(),
            "precision": self.precision,
            "dim": self.dim,
            "threads": self.threads,
            "batch_size": self.batch_size,
            "model_path": str(self.model_path) if self.model_path else None,
            "build_seconds": self.build_seconds,
            "warnings": self.warnings(),
        }

    # --- tokens ----------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """Tokens the model would read, [CLS] and [SEP] included.

        With a BERT tokenizer no token spans a space, tab or line break, and
        nothing before WordPiece looks across one: the count of a text is the sum
        of its words' counts. Each distinct word is tokenized once and remembered
        (a chunker counts every text several times); other tokenizers encode the
        whole text. With SentencePiece's Metaspace (e5) the words are those of
        the normalized text (`_metaspace_words`).
        """
        counts = self._word_counts
        if counts is None:
            return len(self.tokenizer.encode(text).ids)
        extra = self.special_tokens
        if self._metaspace:
            if any(token in text for token in self._added):
                return len(self.tokenizer.encode(text).ids)
            extra += self._ends_in_space(text)
        words = _words(text)
        try:
            return extra + sum(map(counts.__getitem__, words))
        except KeyError:
            pass
        if len(counts) > MAX_REMEMBERED_WORDS:
            counts.clear()
        new = list({word for word in words if word not in counts})
        if self._metaspace:
            counts.update(zip(new, self._encoded_counts(self._metaspace_pieces(new))))
        else:
            self._count_by_pieces(new)
        return extra + sum(map(counts.__getitem__, words))

    def _encoded_counts(self, texts: list[str]) -> list[int]:
        # Only the ids are read: the fast batch skips offsets (about 2x).
        encoded = self.tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        return [len(e.ids) for e in encoded]

    def _count_by_pieces(self, words: list[str]) -> None:
        """Remember the counts of new words (BERT): each ASCII punctuation mark
        is a token of its own (BertPreTokenizer splits at it, and WordPiece
        reads one character as one token, [UNK] or not), so a word counts as
        its marks plus the runs between them. "limit;", "(limit" and "limit"
        share one tokenized run: fewer, shorter texts for the tokenizer. A word
        holding an added token ("[CLS]x", matched before any split) is
        tokenized whole."""
        counts = self._word_counts
        split: dict[str, list[str]] = {}
        whole = []
        for word in words:
            if self._added_re is not None and self._added_re.search(word):
                whole.append(word)
            else:
                split[word] = _ASCII_PUNCTUATION_RE.split(word)
        runs = {
            part
            for parts in split.values()
            for part in parts[::2]  # split() keeps the marks at odd places
            if part and part not in counts
        }
        texts = list(runs) + whole
        counts.update(zip(texts, self._encoded_counts(texts), strict=True))
        for word, parts in split.items():
            counts[word] = len(parts) // 2 + sum(
                counts[part] for part in parts[::2] if part
            )

    def _metaspace_pieces(self, words: list[str]) -> list[str]:
        """Each word as it reads inside a text (SentencePiece, e5).

        The normalizer works per character (Replace, NFKC), turns every kind
        of space into " " and collapses runs; Metaspace marks each word's start
        with "▁" (the first one's too: prepend "always") and splits there, and
        Unigram segments each piece alone. So a word's tokens are those of its
        normalized form without the spaces at its ends (a word may hold a space
        str.split() does not split at, or characters that normalize to none),
        and a text's are its words', plus a lone "▁" for a trailing space
        (`_ends_in_space`). Texts holding an added token (<s>, <mask>...) are
        encoded whole.
        """
        normalize = self.tokenizer.normalizer.normalize_str
        return [normalize(word).strip(" ") for word in words]

    def _ends_in_space(self, text: str) -> bool:
        """The normalized text ends in a space (Metaspace reads it as a "▁"
        token); only the end is normalized, back to a character that stays."""
        normalize = self.tokenizer.normalizer.normalize_str
        last = text[-1:]
        stays = self._stays.get(last)
        if stays is None:
            stays = self._stays[last] = normalize(last) == last != " "
        if stays:  # a character the normalizer keeps, and no space
            return False
        size = 16
        while True:
            tail = normalize(text[-size:])
            if tail.strip(" ") or size >= len(text):
                return tail.endswith(" ")
            size *= 4

    def count_passage_tokens(self, text: str) -> int:
        """Tokens the model reads when `text` is indexed: the passage prompt and
        the special tokens included (what chunks are sized in)."""
        return self.count_tokens(self.passage_prefix + text)

    def count_query_tokens(self, question: str) -> int:
        """Tokens the model reads for a question, its prompt included."""
        return self.count_tokens(self.query_prefix + question)

    def count_text_tokens(self, text: str) -> int:
        """Tokens of `text` alone, no prompt or special token: what it adds to a
        text it is joined to, or to an answerer's context (not embedded)."""
        return max(0, self.count_tokens(text) - self.special_tokens)

    def _prompt_tokens(self, prompt: str) -> int:
        if not prompt:
            return 0
        return len(self.tokenizer.encode(prompt, add_special_tokens=False).ids)

    def forget_words(self) -> None:
        """Drop remembered word counts (benchmarks start each run cold)."""
        if self._word_counts is not None:
            self._word_counts.clear()

    def _encode_checked(
        self, texts: list[str], origins: list[str] | None
    ) -> list[Encoding]:
        if origins is not None and len(origins) != len(texts):
            raise EmbeddingError(f"got {len(origins)} origins for {len(texts)} texts")
        encodings = self.tokenizer.encode_batch(texts)
        for index, encoding in enumerate(encodings):
            if len(encoding.ids) > self.window:
                origin = origins[index] if origins else _default_origin(texts, index)
                raise WindowExceededError(origin, len(encoding.ids), self.window)
        return encodings

    # --- inference -------------------------------------------------------

    @property
    def session(self) -> onnxruntime.InferenceSession:
        # Double-checked so concurrent first calls build/load only once.
        if self._session is None:
            with self._session_lock:
                if self._session is None:
                    self._session = self._create_session()
        return self._session

    def set_threads(self, threads: int) -> None:
        """Use `threads` from the next session on (the current one is dropped)."""
        with self._session_lock:
            if threads != self.threads:
                self.threads, self._session = threads, None

    def _create_session(self) -> onnxruntime.InferenceSession:
        from kb import onnx_export

        started = time.perf_counter()
        path, build_seconds = onnx_export.ensure_model(
            self.source.directory,
            Path(settings.KB_DATA_DIR) / "models",
            self.precision,
            prebuilt=not self.source.builds_graph,
        )
        self.model_path, self.build_seconds = path, build_seconds
        session = open_session(path, self.threads, DISABLED_FUSIONS[self.precision])
        logger.info(
            "Loaded %s (%s, %d threads) from %s in %.2f s",
            self.model_name,
            self.precision,
            self.threads,
            path,
            time.perf_counter() - started,
        )
        return session

    def embed_passages(
        self,
        texts: list[str],
        origins: list[str] | None = None,
        batch_size: int | None = None,
        truncate: bool = False,
    ) -> np.ndarray:
        """Vectors of indexed texts, each read after the passage prompt; a text
        over the window raises WindowExceededError (`truncate`: is cut, as in
        embed_truncating)."""
        prompted = [self.passage_prefix + text for text in texts]
        if truncate:
            return self.embed_truncating(prompted)
        return self.embed(prompted, origins, batch_size)

    def embed_passages_with_parts(
        self,
        texts: list[str],
        parts: list[list[tuple[int, int]]],
        origins: list[str] | None = None,
        truncate: bool = False,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """embed_passages(), and for each text the vectors of its `parts`
        ((start, end) character ranges of the text): the mean of the hidden
        states of the tokens that lie in each part, L2-normalised, read in the
        one pass that embeds the whole text, so a part is read in its context
        at no extra inference. A part no token lies in (past the window of a
        cut text) gets a zero row. The text vectors equal embed_passages()'s."""
        prompt = self.passage_prefix
        prompted = [prompt + text for text in texts]
        if truncate:
            encodings = self._encode_cut(prompted)
        else:
            encodings = self._encode_checked(prompted, origins)
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        part_vectors: list[np.ndarray] = [np.zeros((0, self.dim), np.float32)] * len(
            texts
        )
        for batch, hidden, mask in self._hidden_batches(encodings, self.batch_size):
            vectors[batch] = _mean_pool(hidden, mask)
            for row, i in enumerate(batch):
                shifted = [(lo + len(prompt), hi + len(prompt)) for lo, hi in parts[i]]
                part_vectors[i] = _pool_parts(hidden[row], encodings[i], shifted)
        return vectors, part_vectors

    def embed_queries(
        self, questions: list[str], origins: list[str] | None = None
    ) -> np.ndarray:
        """Vectors of questions, each read after the query prompt."""
        return self.embed([self.query_prefix + q for q in questions], origins)

    def embed_query(self, question: str, origin: str = "the question") -> np.ndarray:
        return self.embed_queries([question], [origin])[0]

    def embed(
        self,
        texts: list[str],
        origins: list[str] | None = None,
        batch_size: int | None = None,
    ) -> np.ndarray:
        """L2-normalised mean-pooled vectors, float32 [len(texts), dim], of the
        texts as given, no prompt added (embed_passages and embed_queries add it).

        Texts are sorted by length and batched so each batch pads only to its
        own longest text; the result keeps the input order.
        """
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = self._encode_checked(texts, origins)
        return self._embed_encodings(encodings, batch_size or self.batch_size)

    def embed_truncating(self, texts: list[str]) -> np.ndarray:
        """Like embed(), but cuts long texts to the window as sentence-transformers
        does ([CLS] first window-2 tokens [SEP]). Explicit opt-in, for baselines
        that measure what truncation loses; the count cut is logged."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._embed_encodings(self._encode_cut(texts), self.batch_size)

    def token_states(self, texts: list[str], query: bool = False) -> list[TokenStates]:
        """Each text's last hidden states, one L2-normalised row per token the
        model read, read after the passage prompt (`query`: the query prompt),
        with the tokens ([CLS], [SEP] and the prompt's left out): what the mean
        pooling of embed() averages, kept apart for late interaction
        (kb/retrieval/late_interaction.py). Texts over the window are cut to it
        as in embed_truncating (a score, not an index, reads them; the count cut
        is logged). Sorted by length and batched as in embed()."""
        if not texts:
            return []
        prompt = self.query_prefix if query else self.passage_prefix
        skip = self._prompt_tokens(prompt)
        encodings = self._encode_cut([prompt + text for text in texts])
        found: list[TokenStates | None] = [None] * len(texts)
        for batch, hidden, _ in self._hidden_batches(encodings, self.batch_size):
            for row, i in enumerate(batch):
                encoding = encodings[i]
                read = [
                    j
                    for j, special in enumerate(encoding.special_tokens_mask)
                    if not special
                ][skip:]
                states = hidden[row, read].astype(np.float32)
                norms = np.linalg.norm(states, axis=1, keepdims=True)
                found[i] = TokenStates(
                    states / np.clip(norms, 1e-12, None),
                    [encoding.tokens[j] for j in read],
                )
        return found  # type: ignore[return-value]

    def _encode_cut(self, texts: list[str]) -> list[Encoding]:
        """Encodings cut to the window ([CLS] first window-2 tokens [SEP]); the
        count cut is logged."""
        encodings = self._truncating_tokenizer.encode_batch(texts)
        cut = sum(len(e.overflowing) > 0 for e in encodings)
        if cut:
            logger.info(
                "Truncated %d of %d texts to %d tokens", cut, len(texts), self.window
            )
        return encodings

    @cached_property
    def _truncating_tokenizer(self) -> Tokenizer:
        tokenizer = Tokenizer.from_file(str(self.source.tokenizer_path))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.window)
        return tokenizer

    def _embed_encodings(self, encodings: list[Encoding], step: int) -> np.ndarray:
        vectors = np.zeros((len(encodings), self.dim), dtype=np.float32)
        for batch, hidden, mask in self._hidden_batches(encodings, step):
            vectors[batch] = _mean_pool(hidden, mask)
        return vectors

    def _hidden_batches(self, encodings: list[Encoding], step: int):
        """(indexes, last hidden states, attention mask) for batches of `step`
        encodings sorted by length, so each pads only to its own longest."""
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), step):
            batch = order[start : start + step]
            feeds = pad([encodings[i] for i in batch])
            session = self.session
            inputs = model_inputs(session, feeds)
            hidden = session.run([_output_name(session)], inputs)[0]
            yield batch, hidden, feeds["attention_mask"]


def synthetic_text(embedder: Embedder, tokens: int, seed: int = 0) -> str:
    """A text of varied real words that is exactly `tokens` tokens long.

    Words are whole-word vocabulary entries, so each adds one token; the
    count is still verified rather than assumed.
    """
    rng = random.Random(seed)
    words = single_token_words(embedder)
    text_words = rng.sample(words, tokens - embedder.special_tokens)
    text = " ".join(text_words)
    if embedder.count_tokens(text) != tokens:
        raise EmbeddingError(f"could not build a text of exactly {tokens} tokens")
    return text


def single_token_words(embedder: Embedder) -> list[str]:
    vocab = embedder.tokenizer.get_vocab()
    candidates = sorted(
        word for word in vocab if word.isalpha() and word.isascii() and len(word) > 3
    )
    encodings = embedder.tokenizer.encode_batch(candidates)
    single = 1 + embedder.special_tokens
    return [w for w, e in zip(candidates, encodings) if len(e.ids) == single]


def _default_origin(texts: list[str], index: int) -> str:
    preview = " ".join(texts[index].split()[:6])
    return f"text {index + 1} of {len(texts)} ({preview!r}...)"


def pad(encodings: list[Encoding]) -> dict[str, np.ndarray]:
    """Right-pad to the batch's longest text (pad id 0, mask 0)."""
    length = max(len(encoding.ids) for encoding in encodings)
    shape = (len(encodings), length)
    ids = np.zeros(shape, dtype=np.int64)
    mask = np.zeros(shape, dtype=np.int64)
    types = np.zeros(shape, dtype=np.int64)
    for row, encoding in enumerate(encodings):
        size = len(encoding.ids)
        ids[row, :size] = encoding.ids
        mask[row, :size] = encoding.attention_mask
        types[row, :size] = encoding.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def open_session(
    path: Path, threads: int, disabled_optimizers: list[str] | None = None
) -> onnxruntime.InferenceSession:
    """A CPU session with every graph optimisation and `threads` intra-op threads
    (the embedder's and the reranker's, kb/retrieval/reranking.py).

    Its threads sleep between operators instead of spinning: spinning threads
    took the cores from the PostgreSQL query that runs while the question is
    embedded (kb.retrieval.question), and made the two together slower than one
    after the other; batch throughput is the same either way (MiniLM 69-73 and
    e5 25-26 texts/s of 60 words, alternating runs, issue #27)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(path),
        options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=disabled_optimizers or [],
    )


def model_inputs(
    session: onnxruntime.InferenceSession, feeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The padded arrays of `pad` the model takes, in its integer type; a model
    without token_type_ids gets none."""
    inputs = {}
    for spec in session.get_inputs():
        if spec.name not in feeds:
            raise EmbeddingError(f"model input {spec.name!r} is not supported")
        dtype = np.int32 if spec.type == "tensor(int32)" else np.int64
        inputs[spec.name] = feeds[spec.name].astype(dtype, copy=False)
    return inputs


def _output_name(session: onnxruntime.InferenceSession) -> str:
    names = [output.name for output in session.get_outputs()]
    return OUTPUT_NAME if OUTPUT_NAME in names else names[0]


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' pooling: masked mean, then L2 normalisation."""
    weights = mask[:, :, None].astype(np.float64)
    summed = (hidden.astype(np.float64) * weights).sum(axis=1)
    mean = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(mean, axis=1, keepdims=True)
    return (mean / np.clip(norms, 1e-12, None)).astype(np.float32)


def _pool_parts(
    hidden: np.ndarray, encoding: Encoding, parts: list[tuple[int, int]]
) -> np.ndarray:
    """Each part's vector: the L2-normalised mean of the hidden states of the
    tokens whose middle lies in it (special tokens never do); zero when none."""
    out = np.zeros((len(parts), hidden.shape[-1]), dtype=np.float32)
    if not parts:
        return out
    offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
    keep = (np.asarray(encoding.special_tokens_mask) == 0) & (
        offsets[:, 1] > offsets[:, 0]
    )
    middles = np.where(keep, offsets.sum(axis=1) / 2, -1.0)
    states = hidden[: len(offsets)].astype(np.float64)
    for k, (lo, hi) in enumerate(parts):
        inside = (middles >= lo) & (middles < hi)
        if inside.any():
            mean = states[inside].mean(axis=0)
            out[k] = mean / max(np.linalg.norm(mean), 1e-12)
    return out


_embedders: dict[tuple[str, str], Embedder] = {}
_embedders_lock = threading.Lock()
_workers_sharing = 1  # processes embedding on this machine (share_cores)


MAX_REMEMBERED_WORDS = 500_000
# One ASCII punctuation mark (BERT's _is_punctuation: 33-47, 58-64, 91-96,
# 123-126), captured so that re.split keeps it.
_ASCII_PUNCTUATION_RE = re.compile(r"([!-/:-@\[-`{-~])")
_WORDS_RE = re.compile(r"[^ \t\n\r]+")
# Characters str.split() treats as whitespace that the tokenizer may not (it drops
# control characters, joining the words around them): split those texts by hand.
_ODD_SPACE_RE = re.compile(
    "[\x0b\x0c\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
)


def _words(text: str) -> list[str]:
    """The runs of text between spaces, tabs and line breaks."""
    if _ODD_SPACE_RE.search(text):
        return _WORDS_RE.findall(text)
    return text.split()


def _counts_add_up(config: dict) -> bool:
    """True when a text's token count is the sum of its space-separated words'.

    BertNormalizer works per character, BertPreTokenizer splits at whitespace
    and punctuation, WordPiece works per pre-token, and special tokens that do
    not absorb spaces match inside one word. Checked against whole-text encoding
    by tests/test_embedding.py.
    """
    return (
        (config.get("normalizer") or {}).get("type") == "BertNormalizer"
        and (config.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
        and (config.get("model") or {}).get("type") == "WordPiece"
        and not any(
            token.get("lstrip") or token.get("rstrip") or token.get("single_word")
            for token in config.get("added_tokens") or []
        )
    )


# Normalizers that work per character and give the same text when run twice.
_LOCAL_NORMALIZERS = {"Replace", "NFKC", "NFC", "Lowercase"}


def _metaspace_counts_add_up(config: dict) -> bool:
    """True for a SentencePiece Unigram tokenizer whose count `_metaspace_words`
    gives (e5's XLM-R, kb/e5_pack.py). Checked against whole-text encoding by
    tests/test_embedding_models.py."""
    normalizer = config.get("normalizer") or {}
    steps = normalizer.get("normalizers", [normalizer])
    pre = config.get("pre_tokenizer") or {}
    return (
        all(step.get("type") in _LOCAL_NORMALIZERS for step in steps)
        and pre.get("type") == "Metaspace"
        and pre.get("replacement") == "\u2581"
        and pre.get("prepend_scheme") == "always"
        and pre.get("split", True)
        and (config.get("model") or {}).get("type") == "Unigram"
        and not any(
            token.get("lstrip") or token.get("rstrip") or token.get("single_word")
            for token in config.get("added_tokens") or []
        )
    )


def share_cores(workers: int) -> None:
    """This process is one of `workers` embedding on this machine (kb.worker): by
    default its embedders take their share of the cores, not all of them; one
    already loaded is loaded again when its share changes."""
    global _workers_sharing
    if max(1, workers) == _workers_sharing:
        return
    _workers_sharing = max(1, workers)
    if settings.KB_EMBED_THREADS:
        return
    with _embedders_lock:
        for embedder in _embedders.values():
            embedder.set_threads(default_threads())


def default_threads() -> int:
    """Threads for an embedder when KB_EMBED_THREADS is 0."""
    return max(1, (os.cpu_count() or 1) // _workers_sharing)


def get_embedder(model: str | None = None, precision: str | None = None) -> Embedder:
    """The process-wide embedder for `model` (a name of kb/embedding_models.py,
    default: all-MiniLM-L6-v2) and `precision` (default: KB_EMBED_PRECISION)."""
    key = (model or embedding_models.DEFAULT, precision or settings.KB_EMBED_PRECISION)
    with _embedders_lock:
        if key not in _embedders:
            _embedders[key] = Embedder.from_settings(*key)
        return _embedders[key]


@functools.cache
def dictionary(model: str | None = None) -> frozenset[str]:
    """The whole words of the model's vocabulary: SentencePiece's pieces that
    open a word ("▁address", not the "dress" inside one), WordPiece's that are
    no continuation ("address", not "##dress"). A word one is no misspelling."""
    vocab = get_embedder(model).tokenizer.get_vocab()
    if any(piece.startswith("\u2581") for piece in vocab):
        return frozenset(p[1:] for p in vocab if p.startswith("\u2581") and len(p) > 1)
    return frozenset(p for p in vocab if not p.startswith("##"))


@functools.cache
def vocabulary(model: str | None = None) -> frozenset[str]:
    """The words of the model's vocabulary (SentencePiece's "▁" word mark left
    out: e5's pieces read "▁instead"): a dictionary at hand, offline. Built
    once per model: e5's 250,000 pieces take about 0.5 s, and every ask reads
    it."""
    vocab = get_embedder(model).tokenizer.get_vocab()
    return frozenset(piece.removeprefix("\u2581") for piece in vocab)


@contextlib.contextmanager
def installed(embedder: Embedder, model: str, precision: str):
    """Make `embedder` this process's embedder for (`model`, `precision`) while
    the block runs (the test suite's embedder that remembers its vectors)."""
    key = (model, precision)
    with _embedders_lock:
        _embedders[key] = embedder
    try:
        yield embedder
    finally:
        with _embedders_lock:
            if _embedders.get(key) is embedder:
                del _embedders[key]


def for_collection(collection: Any, precision: str | None = None) -> Embedder:
    """The embedder of a collection's model (Collection.embedding_model)."""
    return get_embedder(collection.embedding_model, precision)


def count_tokens(text: str) -> int:
    """Tokens the default model reads for `text`, [CLS] and [SEP] included."""
    return get_embedder().count_tokens(text)


def count_text_tokens(text: str) -> int:
    """Tokens of `text` alone, [CLS] and [SEP] left out: what it adds to a text it
    is joined to, or to an answerer's context (which is not embedded)."""
    return get_embedder().count_text_tokens(text)


def embed(texts: list[str], origins: list[str] | None = None) -> np.ndarray:
    """Unit vectors for `texts`; raises WindowExceededError instead of truncating."""
    return get_embedder().embed(texts, origins)
