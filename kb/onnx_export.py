"""Build the BERT encoder of all-MiniLM-L6-v2 as ONNX from model.safetensors.

No torch: safetensors is an 8-byte header length, a JSON header and raw
little-endian arrays, read here with numpy. The graph is cached under
KB_DATA_DIR/models/<sha256[:16]>/ and written atomically (temp file + rename),
so several processes may race to build it and all end up with a whole file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

OPSET = 20  # Gelu (exact erf form) and LayerNormalization are standard ops here
MS_DOMAIN = "com.microsoft"
LAYER_NORM_EPS = 1e-12
SAFETENSORS_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
}
INT8_NAME = "model.int8.onnx"


class ExportError(Exception):
    """The weights cannot be turned into an ONNX graph."""


# --- safetensors --------------------------------------------------------


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors of a .safetensors file as (read-only) numpy arrays."""
    data = path.read_bytes()
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_size])
    body = memoryview(data)[8 + header_size :]
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype = SAFETENSORS_DTYPES.get(spec["dtype"])
        if dtype is None:
            raise ExportError(f"{name}: unsupported dtype {spec['dtype']}")
        start, end = spec["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=np.dtype(dtype).newbyteorder("<"))
        tensors[name] = array.reshape(spec["shape"]).astype(dtype, copy=False)
    return tensors


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


# --- graph ----------------------------------------------------------------


class _GraphBuilder:
    """Collects nodes and initializers with unique names."""

    def __init__(
        self, weights: dict[str, np.ndarray], eps: float = LAYER_NORM_EPS
    ) -> None:
        self.weights = weights
        self.eps = eps
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def const(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str, transpose: bool = False) -> str:
        array = self.weights[name]
        # torch Linear stores [out, in]; MatMul wants [in, out].
        return self.const(name, np.ascontiguousarray(array.T if transpose else array))

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        from onnx import helper

        self._count += 1
        output = f"{op_type.lower()}_{self._count}"
        domain = attrs.pop("domain", "")
        self.nodes.append(
            helper.make_node(
                op_type, inputs, [output], name=output, domain=domain, **attrs
            )
        )
        return output

    def linear(self, x: str, prefix: str) -> str:
        product = self.op("MatMul", [x, self.weight(f"{prefix}.weight", True)])
        return self.op("Add", [product, self.weight(f"{prefix}.bias")])

    def layer_norm(self, x: str, prefix: str) -> str:
        return self.op(
            "LayerNormalization",
            [x, self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")],
            axis=-1,
            epsilon=self.eps,
        )


def _embeddings(g: _GraphBuilder) -> str:
    words = g.op("Gather", [g.weight("embeddings.word_embeddings.weight"), "input_ids"])
    types = g.op(
        "Gather",
        [g.weight("embeddings.token_type_embeddings.weight"), "token_type_ids"],
    )
    # Positions 0..S-1: slice the table to the batch's sequence length.
    seq_len = g.op("Shape", ["input_ids"], start=1, end=2)
    positions = g.op(
        "Slice",
        [
            g.weight("embeddings.position_embeddings.weight"),
            g.const("zero_1d", np.array([0], dtype=np.int64)),
            seq_len,
            g.const("axis0_1d", np.array([0], dtype=np.int64)),
        ],
    )
    summed = g.op("Add", [g.op("Add", [words, types]), positions])
    return g.layer_norm(summed, "embeddings.LayerNorm")


def _fused_attention(g: _GraphBuilder, x: str, prefix: str, heads: int) -> str:
    """com.microsoft Attention: one QKV MatMul + fused softmax on CPU."""
    parts = [f"{prefix}.self.{name}" for name in ("query", "key", "value")]
    qkv_weight = np.concatenate([g.weights[f"{p}.weight"].T for p in parts], axis=1)
    qkv_bias = np.concatenate([g.weights[f"{p}.bias"] for p in parts])
    context = g.op(
        "Attention",
        [
            x,
            g.const(f"{prefix}.qkv.weight", np.ascontiguousarray(qkv_weight)),
            g.const(f"{prefix}.qkv.bias", qkv_bias),
            "mask_index",
        ],
        num_heads=heads,
        domain=MS_DOMAIN,
    )
    return g.linear(context, f"{prefix}.output.dense")


def _plain_attention(g: _GraphBuilder, x: str, prefix: str, heads: int) -> str:
    """Standard-op attention, for runtimes without the contrib op."""
    hidden = g.weights[f"{prefix}.self.query.weight"].shape[0]
    head_dim = hidden // heads
    split = g.const(f"{prefix}.split_shape", np.array([0, 0, heads, head_dim]))
    merge = g.const(f"{prefix}.merge_shape", np.array([0, 0, hidden]))

    def heads_of(name: str, perm: list[int]) -> str:
        projected = g.linear(x, f"{prefix}.self.{name}")
        return g.op("Transpose", [g.op("Reshape", [projected, split])], perm=perm)

    query = heads_of("query", [0, 2, 1, 3])
    key = heads_of("key", [0, 2, 3, 1])
    value = heads_of("value", [0, 2, 1, 3])
    scale = g.const(f"{prefix}.scale", np.array(1 / math.sqrt(head_dim), np.float32))
    scores = g.op("Mul", [g.op("MatMul", [query, key]), scale])
    probs = g.op("Softmax", [g.op("Add", [scores, "mask_bias"])], axis=-1)
    context = g.op("Transpose", [g.op("MatMul", [probs, value])], perm=[0, 2, 1, 3])
    return g.linear(g.op("Reshape", [context, merge]), f"{prefix}.output.dense")


def _mask_inputs(g: _GraphBuilder, fused: bool) -> None:
    """Derive the mask each attention flavour wants from attention_mask."""
    from onnx import TensorProto, helper

    if fused:
        g.nodes.append(
            helper.make_node(
                "Cast", ["attention_mask"], ["mask_index"], to=TensorProto.INT32
            )
        )
        return
    # (1 - mask) * big negative, shaped [B, 1, 1, S] to broadcast over heads.
    as_float = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    one = g.const("one", np.array(1.0, np.float32))
    negative = g.const("mask_negative", np.array(-1e9, np.float32))
    bias = g.op("Mul", [g.op("Sub", [one, as_float]), negative])
    axes = g.const("mask_axes", np.array([1, 2], dtype=np.int64))
    g.nodes.append(helper.make_node("Unsqueeze", [bias, axes], ["mask_bias"]))


def build_model(
    weights: dict[str, np.ndarray], config: dict[str, Any], fused: bool = True
) -> Any:
    """An onnx.ModelProto computing last_hidden_state of the BERT encoder."""
    from onnx import TensorProto, helper

    heads = int(config["num_attention_heads"])
    # config.json's layer_norm_eps (issue #27: e5's pack states its own).
    g = _GraphBuilder(weights, float(config.get("layer_norm_eps", LAYER_NORM_EPS)))
    _mask_inputs(g, fused)
    attention = _fused_attention if fused else _plain_attention
    x = _embeddings(g)
    for layer in range(int(config["num_hidden_layers"])):
        prefix = f"encoder.layer.{layer}"
        attended = attention(g, x, f"{prefix}.attention", heads)
        x = g.layer_norm(
            g.op("Add", [attended, x]), f"{prefix}.attention.output.LayerNorm"
        )
        inner = g.op("Gelu", [g.linear(x, f"{prefix}.intermediate.dense")])
        out = g.linear(inner, f"{prefix}.output.dense")
        x = g.layer_norm(g.op("Add", [out, x]), f"{prefix}.output.LayerNorm")
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))

    def int_input(name: str) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])

    graph = helper.make_graph(
        g.nodes,
        "minilm_encoder",
        [int_input(n) for n in ("input_ids", "attention_mask", "token_type_ids")],
        [
            helper.make_tensor_value_info(
                "last_hidden_state",
                TensorProto.FLOAT,
                ["batch", "seq", int(config["hidden_size"])],
            )
        ],
        initializer=g.initializers,
    )
    opsets = [helper.make_opsetid("", OPSET)]
    if fused:
        opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="kb")
    model.ir_version = 9  # readable by every onnxruntime that knows opset 20
    return model


# --- cache ----------------------------------------------------------------


def ensure_model(
    source_dir: Path, cache_root: Path, precision: str, prebuilt: bool = False
) -> tuple[Path, float | None]:
    """Path of the ONNX file for `precision`, building it if missing.

    Returns (path, seconds spent building now, or None if it was cached).
    """
    started = time.perf_counter()
    if prebuilt:
        fp32_path = source_dir / "model.onnx"
        cache_dir = cache_root / f"onnx-{file_sha256(fp32_path)[:16]}"
    else:
        cache_dir = cache_root / file_sha256(source_dir / "model.safetensors")[:16]
        fp32_path = cache_dir / "model.onnx"
    built = False
    if not fp32_path.exists():
        _build_fp32(source_dir, fp32_path)
        built = True
    path = fp32_path
    if precision == "int8":
        path = cache_dir / INT8_NAME
        if not path.exists():
            _quantize(fp32_path, path)
            built = True
    return path, (time.perf_counter() - started) if built else None


def build_from_dir(source_dir: Path) -> Any:
    """Checked ModelProto from a directory with model.safetensors + config.json."""
    import onnx

    weights = read_safetensors(source_dir / "model.safetensors")
    # A BertFor... checkpoint names the encoder's weights "bert.<name>".
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
    config = json.loads((source_dir / "config.json").read_text(encoding="utf-8"))
    model = build_model(weights, config)
    onnx.checker.check_model(model)
    return model


def _build_fp32(source_dir: Path, target: Path) -> None:
    import onnx

    logger.info("Building ONNX encoder from %s", source_dir)
    model = build_from_dir(source_dir)
    write_atomically(target, lambda tmp: onnx.save_model(model, str(tmp)))


def _quantize(fp32_path: Path, target: Path) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logger.info("Quantising %s to int8 (per channel)", fp32_path)

    def write(tmp: Path) -> None:
        # quantize_dynamic writes "<input>-inferred.onnx" beside its input; a
        # private link to the input keeps racing processes off each other's.
        private_input = tmp.with_name("input.onnx")
        private_input.symlink_to(fp32_path.resolve())
        quantize_dynamic(
            str(private_input),
            str(tmp),
            per_channel=True,
            weight_type=QuantType.QInt8,
            # Shape inference cannot type the com.microsoft Attention output;
            # everything in this graph is float32 anyway.
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )

    # quantize_dynamic logs through the root logger, which makes logging install
    # a root handler and print every later kb.* record twice; undo that.
    root_handlers = list(logging.root.handlers)
    try:
        write_atomically(target, write)
    finally:
        logging.root.handlers = root_handlers


def write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Let `write` fill a file in a private temp dir, then rename it to `target`.

    The temp dir sits beside `target` so the rename stays on one filesystem and
    is atomic: readers see no file or a whole one, never half of one.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(
        prefix=f".{target.stem}-", dir=target.parent
    ) as private:
        tmp = Path(private) / target.name
        write(tmp)
        os.replace(tmp, target)
