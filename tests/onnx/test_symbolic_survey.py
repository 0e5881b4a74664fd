"""Survey: models exported with dynamic axes keep every dim of every tensor known or symbolic (never ``?``).

The benchmark models (bench/model_zoo.py: the transformer blocks, the light CNNs of onnx's test data with the
``view``s torch writes for dynamic N/H/W, MobileNet-v2, the UNet decoder), the torch-like builders of
torch_like_models.py (both exporters) and the small idioms torch exports shape arithmetic with are loaded; each
tensor's shape must have a static rank and no unknown dim, and where the onnx reference evaluator can run the
model (onnxruntime for the CNNs), each symbolic dim evaluated with the input sizes must equal the size it gives that
tensor."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from snippets_core.frontends.onnx import read_onnx
from snippets_core.ir.model import Model
from snippets_core.ir.shape import SymDim

tlm = sys.modules["snippets_torch_like_models"]  # loaded by conftest.py
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import model_zoo as mz  # noqa: E402


def lost_dims(m: Model) -> list[str]:
    """Each tensor whose shape has a dynamic rank or an unknown dim, where its inputs had none (the op that lost
    it), as ``op 'name' -> shape``."""
    def bad(s: Any) -> bool:
        return not s.rank_is_static or any(d is None for d in s.sym_dims)

    return [f"{n.type_name} '{n.name}' -> {o.shape} from {[str(i.source.shape) for i in n.inputs]}"
            for n in m.get_ordered_ops() for o in n.outputs
            if bad(o.shape) and not any(bad(i.source.shape) for i in n.inputs)]


def check_against_reference(proto: onnx.ModelProto, m: Model, feeds: dict[str, np.ndarray],
                            oracle: str = "reference") -> int:
    """Every named tensor of ``m``: its symbolic dims, evaluated with the sizes of ``feeds``, equal the shape onnx's
    reference evaluator (``oracle="reference"``) or onnxruntime gives it. Returns how many tensors were compared."""

    env: dict[str, int] = {}
    for p in m.parameters:
        for sym, size in zip(p.outputs[0].shape.syms or (), feeds[p.name].shape):
            if sym is not None and sym.name is not None:
                env[sym.name] = size
    every = onnx.ModelProto()
    every.CopyFrom(proto)
    names = [o for n in proto.graph.node for o in n.output if o]
    del every.graph.output[:]
    every.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in names)
    if oracle == "reference":
        from onnx.reference import ReferenceEvaluator

        values = ReferenceEvaluator(every).run(None, feeds)
    else:
        ort = pytest.importorskip("onnxruntime")
        values = ort.InferenceSession(every.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = dict(zip(names, values))
    compared = 0
    for n in m.get_ordered_ops():
        for o in n.outputs:
            for name in o.names & got.keys():
                want = np.asarray(got[name]).shape
                dims = [d.evaluate(env) if isinstance(d, SymDim) else d for d in o.shape.sym_dims]
                assert tuple(dims) == want, f"{n.type_name} '{n.name}' ({name}): {o.shape} = {dims}, evaluator {want}"
                compared += 1
    return compared


# --- torch's shape idioms, as the TorchScript exporter writes them ----------------------------------------------
class _G:
    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.n = 0

    def op(self, op_type: str, *inputs: str, n_out: int = 1, **attrs: Any) -> Any:
        self.n += 1
        outs = [f"{op_type.lower()}_{self.n}_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=f"{op_type}_{self.n}", **attrs))
        return outs[0] if n_out == 1 else outs

    def i64(self, *v: int, scalar: bool = False) -> str:
        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(v[0] if scalar else list(v), np.int64), name))
        return name

    def size(self, x: str, i: int) -> str:  # x.size(i): a scalar
        return self.op("Gather", self.op("Shape", x), self.i64(i, scalar=True), axis=0)

    def vec(self, s: str) -> str:
        return self.op("Unsqueeze", s, self.i64(0))

    def model(self, out: str, inputs: list[tuple[str, list[Any]]], opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "idiom", [helper.make_tensor_value_info(n, TensorProto.FLOAT, d)
                                                        for n, d in inputs],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m


def _flatten_hw() -> onnx.ModelProto:
    """``x.view(b, c, h * w)`` then ``.view(b, c, h, w)`` and ``x.flatten(2)``: products of symbols."""
    g = _G()
    b, c, h, w = (g.size("x", i) for i in range(4))
    y = g.op("Reshape", "x", g.op("Concat", g.vec(b), g.vec(c), g.vec(g.op("Mul", h, w)), axis=0))
    y = g.op("Relu", g.op("Reshape", y, g.op("Concat", g.vec(b), g.vec(c), g.vec(h), g.vec(w), axis=0)))
    lead = g.op("Slice", g.op("Shape", y), g.i64(0), g.i64(2), g.i64(0))
    z = g.op("Reshape", y, g.op("Concat", lead, g.i64(-1), axis=0))
    return g.model(z, [("x", ["N", 8, "H", "W"])])


def _chunk_symbolic() -> onnx.ModelProto:
    """``x.chunk(2, dim=1)`` on a symbolic dim (opset 13's chunk: Split by computed lengths) and dynamo's
    ``Split(num_outputs=2)``."""
    g = _G()
    dim = g.vec(g.size("x", 1))
    two = g.i64(2)
    chunk = g.op("Div", g.op("Add", dim, g.i64(1)), two)  # (S + chunks - 1) // chunks
    lengths = g.op("Concat", g.op("Expand", chunk, g.i64(1)), g.op("Sub", dim, g.op("Mul", chunk, g.i64(1))), axis=0)
    a, b = g.op("Split", "x", lengths, axis=1, n_out=2)
    c, d = g.op("Split", "y", axis=1, num_outputs=2, n_out=2)
    out = g.op("Concat", g.op("Add", a, c), g.op("Sub", b, d), axis=1)
    return g.model(out, [("x", ["B", "S2", 4]), ("y", ["B", "S2", 4])], opset=18)


def _slice_half_and_tile() -> onnx.ModelProto:
    """``x[:, : x.size(1) // 2]`` (a floor quotient as a Slice end) and ``x.repeat(b, 1, 1)`` (Tile by a shape
    vector), then a ``Where`` against ``x.expand(...)``."""
    g = _G()
    half = g.vec(g.op("Div", g.size("x", 1), g.i64(2, scalar=True)))
    y = g.op("Slice", "x", g.i64(0), half, g.i64(1))
    reps = g.op("Concat", g.vec(g.size("x", 0)), g.i64(1, 1), axis=0)
    t = g.op("Tile", y, reps)
    big = g.op("Expand", "m", g.op("Shape", t))
    out = g.op("Where", g.op("Greater", big, t), t, big)
    return g.model(out, [("x", ["B", "S", 4]), ("m", [1, 1, 4])])


def _resize_to_skip() -> onnx.ModelProto:
    """``F.interpolate(x, size=skip.shape[2:])`` (Resize by a shape vector) and ``scale_factor=2`` (UNet/FPN)."""
    g = _G()
    sizes = g.op("Concat", g.op("Slice", g.op("Shape", "x"), g.i64(0), g.i64(2), g.i64(0)),
                 g.op("Slice", g.op("Shape", "skip"), g.i64(2), g.i64(4), g.i64(0)), axis=0)
    up = g.op("Resize", "x", "", "", sizes, mode="nearest")
    up2 = g.op("Resize", "x", "", g.op("Constant", value=numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32))),
               mode="nearest")
    # (an Add of up2 and skip would meet H2 and 2*H: two symbols that may differ by a broadcast 1, left unknown)
    out = g.op("Concat", g.op("Add", up, "skip"), g.op("Slice", up2, g.i64(0, 0), g.op("Slice", g.op("Shape", "skip"),
                                                       g.i64(2), g.i64(4), g.i64(0)), g.i64(2, 3)), axis=1)
    return g.model(out, [("x", ["N", 4, "H", "W"]), ("skip", ["N", 4, "H2", "W2"])])


def _pad_to_multiple() -> onnx.ModelProto:
    """``F.pad(x, (0, (8 - w % 8) % 8))``: pads computed from a dim with Mod."""
    g = _G()
    w = g.size("x", 2)
    eight = g.i64(8, scalar=True)
    extra = g.op("Mod", g.op("Sub", eight, g.op("Mod", w, eight)), eight)
    pads = g.op("Concat", g.i64(0, 0, 0, 0, 0), g.vec(extra), axis=0)
    return g.model(g.op("Pad", "x", pads), [("x", ["B", 4, "W"])])


IDIOMS = {"flatten_hw": (_flatten_hw, {"x": (2, 8, 5, 7)}),
          "chunk_symbolic": (_chunk_symbolic, {"x": (2, 7, 4), "y": (2, 7, 4)}),
          "slice_half_and_tile": (_slice_half_and_tile, {"x": (3, 9, 4), "m": (1, 1, 4)}),
          "resize_to_skip": (_resize_to_skip, {"x": (1, 4, 3, 5), "skip": (1, 4, 5, 9)}),
          "pad_to_multiple": (_pad_to_multiple, {"x": (2, 4, 13)})}


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_torch_shape_idioms_keep_symbolic_dims(name: str) -> None:
    build, shapes = IDIOMS[name]
    proto = build()
    m = read_onnx(proto)
    assert lost_dims(m) == []
    feeds = {k: np.random.default_rng(0).standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    assert check_against_reference(proto, m, feeds) > 0


# --- the benchmark models -----------------------------------------------------------------------------------------
#: light CNNs whose random weights take 10-60 s to make (their FC layers): plain Conv/Pool/LRN/Gemm chains that the
#: others cover; one ResNet-50 stays
_HEAVY = ("bvlc_alexnet", "vgg19", "zfnet512", "resnet50")


def _dynamic_zoo() -> dict[str, Any]:
    """name -> builder of each benchmark model with dynamic axes (the CNNs: N, H, W as torch exports them)."""
    rows: dict[str, Any] = {name: (lambda name=name: mz.MODELS[name]().proto) for name in
                            ("bert_s128", "gpt2_s128", "vit_t197")}
    for e in ("torchscript", "dynamo"):
        for k in ("bert", "gpt2"):
            rows[f"{k}_{e}"] = lambda k=k, e=e: tlm.BUILDERS[k](e)
        rows[f"shufflenet_v2_{e}"] = lambda e=e: tlm.shufflenet_v2(e)
        for name in mz.LIGHT_CNNS:
            if name not in _HEAVY or (name, e) == ("resnet50", "dynamo"):
                rows[f"{name}_{e}"] = lambda name=name, e=e: tlm.dynamic_cnn(mz.light_cnn(name).proto, e)
    rows["mobilenet_v2"] = lambda: tlm.dynamic_cnn(mz.mobilenet_v2(64).proto)
    rows["unet_decoder"] = lambda: tlm.dynamic_cnn(mz.unet_decoder(8, 32).proto)
    return rows


ZOO = _dynamic_zoo()


@pytest.mark.parametrize("name", sorted(ZOO))
def test_benchmark_models_keep_every_dim_symbolic(name: str) -> None:
    m = read_onnx(ZOO[name]())
    assert lost_dims(m) == []
    symbolic = {n for p in m.parameters for n in p.outputs[0].shape.symbols}
    assert symbolic, "the survey is about dynamic models: the inputs must have symbolic dims"
    for r in m.results:  # the outputs keep the batch symbol
        assert r.outputs[0].shape.symbols & symbolic


@pytest.mark.parametrize("name", ["shufflenet_torchscript", "resnet50_dynamo", "unet_decoder", "mobilenet_v2",
                                  "gpt2_dynamo"])
def test_symbolic_dims_evaluate_to_the_reference_shapes(name: str) -> None:
    """The symbolic dims are not only known but right: evaluated at one input size, each equals what onnx's
    reference evaluator computes (the CNNs at a small odd image, so strided windows floor)."""
    proto = ZOO[name]()
    m = read_onnx(proto)
    feeds: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(1)
    for vi in proto.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[vi.name] = np.ones([2 if i == 0 else 5 for i in range(len(dims))], np.int64)
        else:
            size = 197 if name.startswith(("shufflenet", "resnet")) else 13  # their classifiers need 7x7 at the end
            shape = [d if d is not None else (2 if i == 0 else size + i) for i, d in enumerate(dims)]
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    assert check_against_reference(proto, m, feeds, "reference" if name.startswith("gpt2") else "onnxruntime") > 10


# --- property: random torch-style reshape chains -------------------------------------------------------------------
STEPS = ("split", "merge", "transpose", "flatten", "copy_infer", "chunk", "slice_half")


def _reshape_chain(steps: list[tuple[str, int]], channels: int) -> onnx.ModelProto:
    """``x: [B, C, H, W]`` through ``steps`` (kind, a random int choosing where), each Reshape target read from the
    current tensor's sizes as TorchScript writes ``x.view(...)`` (Shape, Gather, Unsqueeze, Mul for a merged dim,
    0 and -1 entries), Transposes, chunks (Split then Concat) and slices to ``size // 2``; ``static`` follows which
    dims are static."""
    g = _G()
    t, static = "x", [None, channels, None, None]
    halves = 0
    for kind, r in steps:
        rank = len(static)
        sizes = [g.i64(s) if s is not None else g.vec(g.size(t, j)) for j, s in enumerate(static)]
        if kind == "split":
            cands = [j for j, s in enumerate(static) if s is not None and s % 2 == 0 and s >= 4]
            if not cands or rank >= 6:
                continue
            i = cands[r % len(cands)]
            parts = [*sizes[:i], g.i64(2, static[i] // 2), *sizes[i + 1:]]  # type: ignore[operator]
            static = [*static[:i], 2, static[i] // 2, *static[i + 1:]]  # type: ignore[operator]
            t = g.op("Reshape", t, g.op("Concat", *parts, axis=0))
        elif kind == "merge" and rank >= 3:
            i = r % (rank - 1)
            both = [g.size(t, i), g.size(t, i + 1)]
            merged = g.vec(g.op("Mul", *both))
            t = g.op("Reshape", t, g.op("Concat", *sizes[:i], merged, *sizes[i + 2:], axis=0))
            a, b = static[i], static[i + 1]
            static = [*static[:i], a * b if a is not None and b is not None else None, *static[i + 2:]]
        elif kind == "transpose":
            perm = list(np.random.default_rng(r).permutation(rank))
            t = g.op("Transpose", t, perm=[int(p) for p in perm])
            static = [static[p] for p in perm]
        elif kind == "flatten" and rank >= 2:
            k = 1 + r % (rank - 1)
            lead = g.op("Slice", g.op("Shape", t), g.i64(0), g.i64(k), g.i64(0))
            t = g.op("Reshape", t, g.op("Concat", lead, g.i64(-1), axis=0))
            rest = static[k:]
            static = [*static[:k], int(np.prod(rest)) if all(s is not None for s in rest) else None]  # type: ignore
        elif kind == "copy_infer":  # entries 0 (copy), the size itself, one -1: the same shape back
            minus = r % rank
            entries = [g.i64(-1) if j == minus else g.i64(0) if (r >> j) & 1 else sizes[j] for j in range(rank)]
            t = g.op("Reshape", t, g.op("Concat", *entries, axis=0))
        elif kind == "chunk":
            cands = [j for j, s in enumerate(static) if s is not None and s % 2 == 0]
            if not cands:
                continue
            i = cands[r % len(cands)]
            a, b = g.op("Split", t, g.i64(static[i] // 2, static[i] // 2), axis=i, n_out=2)  # type: ignore[operator]
            t = g.op("Concat", b, a, axis=i)
        elif kind == "slice_half" and halves < 2:
            cands = [j for j, s in enumerate(static) if s is None]
            if not cands:
                continue
            i = cands[r % len(cands)]
            half = g.vec(g.op("Div", g.size(t, i), g.i64(2, scalar=True)))
            t = g.op("Slice", t, g.i64(0), half, g.i64(i))
            halves += 1
    return g.model(g.op("Relu", t), [("x", ["B", channels, "H", "W"])])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(STEPS), st.integers(0, 63)), min_size=1, max_size=6),
       channels=st.sampled_from([4, 6, 8, 12]), sizes=st.lists(st.tuples(st.integers(4, 5), st.integers(4, 9),
                                                                          st.integers(4, 9)), min_size=2, max_size=2))
def test_random_reshape_chains_stay_symbolic_and_match_the_reference(steps: list[tuple[str, int]], channels: int,
                                                                     sizes: list[tuple[int, int, int]]) -> None:
    """(Sizes of at least 4 before two halvings: a zero-sized dim read into a target is ONNX's "copy" 0, which the
    exported graph itself gets wrong.)"""
    from onnx.reference import ReferenceEvaluator

    from snippets_core.runtime.compiled_model import compile_model

    proto = _reshape_chain(steps, channels)
    m = read_onnx(proto)
    assert lost_dims(m) == []
    cm = compile_model(proto, "reference")
    for b, h, w in sizes:
        x = np.random.default_rng(b * 100 + h * 10 + w).standard_normal((b, channels, h, w)).astype(np.float32)
        check_against_reference(proto, m, {"x": x})
        (want,) = ReferenceEvaluator(proto).run(None, {"x": x})
        (got,) = cm({"x": x}).values()
        np.testing.assert_array_equal(got, want)
