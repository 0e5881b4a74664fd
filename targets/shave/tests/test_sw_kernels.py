"""SW kernel layers: ops the Tokenizer leaves outside Subgraphs compiled to their own SHAVE kernels, simulated and
checked against numpy float64 within docs/kernel_abi.md's tolerances ("SW kernels")."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from elftools.elf.elffile import ELFFile
from onnx import TensorProto, helper

import snippets_core
from snippets_core.errors import UnsupportedOpError
from snippets_shave import sw_kernels as swk
from snippets_shave.abi import ParamsLayout
from snippets_shave.blob import Target, write_blob
from snippets_shave.constants import WIN_D
from snippets_shave.schedule import ScheduleBuilder
from snippets_shave.sim import run

ROOT = Path(__file__).resolve().parents[3]
ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
#: f32: rtol 1e-5, atol 1e-6 of float64; f16: computed in f32, rounded once
TOL = {np.float32: {"rtol": 1e-5, "atol": 1e-6}, np.float16: {"rtol": 2e-3, "atol": 2e-3}}
_erf = np.vectorize(math.erf)


def _compile_run(
    tmp_path: Path,
    nodes: list[onnx.NodeProto],
    inputs: dict[str, np.ndarray],
    out_shape: tuple[int, ...],
    inits: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    options: dict | None = None,
) -> np.ndarray:
    dtype = next(iter(inputs.values())).dtype.type
    graph = helper.make_graph(
        nodes,
        "sw",
        [helper.make_tensor_value_info(k, ONNX_TYPES[v.dtype.type], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", ONNX_TYPES[dtype], out_shape)],
        initializer=list(inits),
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)
    config = {"target_options": {"check_races": True, **(options or {})}}
    cm = snippets_core.compile_model(str(path), target="shave", config=config)
    return cm(inputs)["y"]


def _check(out: np.ndarray, ref: np.ndarray, dtype: type) -> None:
    assert out.dtype == dtype and out.shape == ref.shape
    np.testing.assert_allclose(out.astype(np.float64), ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("axis", [0, 1, 2, -3])
def test_softmax_on_any_axis(tmp_path: Path, dtype: type, axis: int) -> None:
    x = (np.random.default_rng(axis + 3).standard_normal((3, 6, 9)) * 4).astype(dtype)
    out = _compile_run(tmp_path, [helper.make_node("Softmax", ["x"], ["y"], axis=axis)], {"x": x}, x.shape)
    v = x.astype(np.float64)
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    _check(out, e / e.sum(axis=axis, keepdims=True), dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["Erf", "Gelu-erf", "Gelu-tanh", "Log", "SoftPlus"])
def test_unary_sw_kernels(tmp_path: Path, dtype: type, op: str) -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(0.01, 9.0, (5, 43)) if op == "Log" else rng.uniform(-6, 6, (5, 43))
    x = x.astype(dtype)
    name, _, mode = op.partition("-")
    name = {"SoftPlus": "Softplus"}.get(name, name)
    node = helper.make_node(name, ["x"], ["y"], **({"approximate": "none" if mode == "erf" else mode} if mode else {}))
    out = _compile_run(tmp_path, [node], {"x": x}, x.shape)
    v = x.astype(np.float64)
    ref = {
        "Erf": lambda: _erf(v),
        "Gelu-erf": lambda: 0.5 * v * (1 + _erf(v / math.sqrt(2))),
        "Gelu-tanh": lambda: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
        "Log": lambda: np.log(v),
        "SoftPlus": lambda: np.log1p(np.exp(v)),
    }[op]()
    _check(out, ref, dtype)


def test_erf_and_gelu_tails(tmp_path: Path) -> None:
    """Relative accuracy where the values are tiny: erf near 0, Gelu in its negative tail."""
    x = np.concatenate([np.geomspace(1e-6, 1e-1, 20), -np.geomspace(1, 9, 20)]).astype(np.float32)[None]
    erf = _compile_run(tmp_path, [helper.make_node("Erf", ["x"], ["y"])], {"x": x}, x.shape)
    np.testing.assert_allclose(erf, _erf(x.astype(np.float64)), rtol=2e-6, atol=1e-7)
    gelu = _compile_run(tmp_path, [helper.make_node("Gelu", ["x"], ["y"])], {"x": x}, x.shape)
    v = x.astype(np.float64)
    ref = 0.5 * v * np.vectorize(math.erfc)(-v / math.sqrt(2))
    np.testing.assert_allclose(gelu, ref, rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(("axis", "bias"), [(-1, True), (1, True), (2, False)])
def test_layer_norm(tmp_path: Path, dtype: type, axis: int, bias: bool) -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((2, 3, 21)) * 3 + 1).astype(dtype)
    norm_shape = x.shape[axis:]
    g = rng.uniform(0.5, 1.5, norm_shape).astype(dtype)
    b = rng.uniform(-1, 1, norm_shape).astype(dtype)
    inits = [helper.make_tensor("g", ONNX_TYPES[dtype], g.shape, g.astype(np.float32).reshape(-1).tolist())]
    ins = ["x", "g"]
    if bias:
        inits.append(helper.make_tensor("b", ONNX_TYPES[dtype], b.shape, b.astype(np.float32).reshape(-1).tolist()))
        ins.append("b")
    node = helper.make_node("LayerNormalization", ins, ["y"], axis=axis, epsilon=1e-3)
    out = _compile_run(tmp_path, [node], {"x": x}, x.shape, inits)
    v = x.astype(np.float64)
    red = tuple(range(axis % 3, 3))
    ref = (v - v.mean(axis=red, keepdims=True)) / np.sqrt(v.var(axis=red, keepdims=True) + 1e-3) * g
    _check(out, ref + b if bias else ref, dtype)


CMP = {
    "Equal": np.equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("cmp", sorted(CMP))
def test_comparisons_make_masks_that_select(tmp_path: Path, dtype: type, cmp: str) -> None:
    """cmp(a, b) is a boolean (u8) mask in DDR; Where(mask, x, y) with broadcasting reads it."""
    rng = np.random.default_rng(5)
    a = rng.integers(-2, 3, (4, 1, 7)).astype(dtype)
    b = rng.integers(-2, 3, (1, 5, 7)).astype(dtype)
    x = rng.standard_normal((4, 5, 7)).astype(dtype)
    y = rng.standard_normal((7,)).astype(dtype)
    nodes = [helper.make_node(cmp, ["a", "b"], ["m"]), helper.make_node("Where", ["m", "x", "y0"], ["y"])]
    out = _compile_run(tmp_path, nodes, {"a": a, "b": b, "x": x, "y0": y}, x.shape)
    np.testing.assert_array_equal(out, np.where(CMP[cmp](a, b), x, y))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("axes", [[0], [1], [2], [1, 2], [-1], []])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean_any_axes(tmp_path: Path, dtype: type, axes: list[int], keepdims: int) -> None:
    x = np.random.default_rng(len(axes)).standard_normal((3, 5, 10)).astype(dtype)
    ref = x.astype(np.float64).mean(axis=tuple(axes) if axes else None, keepdims=bool(keepdims))
    inits = [helper.make_tensor("axes", TensorProto.INT64, [len(axes)], axes)]
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keepdims)
    out = _compile_run(tmp_path, [node], {"x": x}, ref.shape, inits)
    _check(out, np.asarray(ref), dtype)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2"])
def test_other_reductions_on_a_middle_axis(tmp_path: Path, op: str) -> None:
    x = np.random.default_rng(3).uniform(0.5, 1.5, (4, 6, 5)).astype(np.float32)
    inits = [helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    out = _compile_run(tmp_path, [helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)], {"x": x}, (4, 5), inits)
    v = x.astype(np.float64)
    ref = {
        "ReduceSum": v.sum(1), "ReduceMax": v.max(1), "ReduceMin": v.min(1), "ReduceProd": v.prod(1),
        "ReduceL1": np.abs(v).sum(1), "ReduceL2": np.sqrt((v * v).sum(1)),
    }[op]  # fmt: skip
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("perm", [[0, 2, 1, 3], [0, 2, 3, 1], [3, 2, 1, 0], [1, 0, 2, 3]])
def test_transpose_is_exact(tmp_path: Path, dtype: type, perm: list[int]) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 7)).astype(dtype)
    ref = x.transpose(perm)
    out = _compile_run(tmp_path, [helper.make_node("Transpose", ["x"], ["y"], perm=perm)], {"x": x}, ref.shape)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceL1", "ReduceSumSquare"])
@pytest.mark.parametrize("axes", [[0, 2], [0, 1, 3], [1, 3]])
def test_reduce_over_separate_runs_of_axes_in_stages(tmp_path: Path, op: str, axes: list[int]) -> None:
    x = np.random.default_rng(6).uniform(-2, 2, (3, 4, 1, 5, 6)).astype(np.float32)
    ax = tuple(a if a < 2 else a + 1 for a in axes)  # the unit dim 2 does not separate runs
    inits = [helper.make_tensor("axes", TensorProto.INT64, [len(ax)], list(ax))]
    v = x.astype(np.float64)
    ref = {
        "ReduceMean": lambda: v.mean(ax), "ReduceSum": lambda: v.sum(ax), "ReduceMax": lambda: v.max(ax),
        "ReduceL1": lambda: np.abs(v).sum(ax), "ReduceSumSquare": lambda: (v * v).sum(ax),
    }[op]()  # fmt: skip
    node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=0)
    out = _compile_run(tmp_path, [node], {"x": x}, ref.shape, inits)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_reduce_l2_over_separate_runs_is_a_typed_error(tmp_path: Path) -> None:
    x = np.ones((3, 4, 5), np.float32)
    inits = [helper.make_tensor("axes", TensorProto.INT64, [2], [0, 2])]
    with pytest.raises(UnsupportedOpError, match="not contiguous"):
        _compile_run(tmp_path, [helper.make_node("ReduceL2", ["x", "axes"], ["y"], keepdims=0)], {"x": x}, (4,), inits)


# --- the whole models -------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["37xx", "40xx"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_layernorm_gelu_softmax_select_transpose_reducemean_model(tmp_path: Path, dtype: type, preset: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 24)).astype(dtype)
    thr = rng.uniform(0, 0.3, (1, 1, 24)).astype(dtype)
    g = np.linspace(0.5, 1.5, 24).astype(dtype)
    b = np.linspace(-1, 1, 24).astype(dtype)
    t = ONNX_TYPES[dtype]
    inits = [
        helper.make_tensor("g", t, [24], g.astype(np.float32).tolist()),
        helper.make_tensor("b", t, [24], b.astype(np.float32).tolist()),
        helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
    ]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("Gelu", ["ln"], ["ge"]),
        helper.make_node("Softmax", ["ge"], ["sm"], axis=1),
        helper.make_node("Greater", ["sm", "thr"], ["mask"]),
        helper.make_node("Where", ["mask", "sm", "ge"], ["sel"]),
        helper.make_node("Transpose", ["sel"], ["tr"], perm=[0, 2, 1]),
        helper.make_node("ReduceMean", ["tr", "axes"], ["y"], keepdims=1),
    ]
    out = _compile_run(tmp_path, nodes, {"x": x, "thr": thr}, (2, 1, 6), inits, {"preset": preset})
    v = x.astype(np.float64)
    ln = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5) * g + b
    ge = 0.5 * ln * (1 + _erf(ln / math.sqrt(2)))
    e = np.exp(ge - ge.max(1, keepdims=True))
    sm = e / e.sum(1, keepdims=True)
    sel = np.where(sm > thr, sm, ge)
    ref = sel.transpose(0, 2, 1).mean(1, keepdims=True)
    # f16: every layer rounds its output to f16 once, so the model is within a few f16 ulps of float64
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-2, "atol": 1e-2}
    assert out.dtype == dtype
    np.testing.assert_allclose(out.astype(np.float64), ref, **tol)


def test_transformer_block_runs_its_matmuls_on_dpus_and_the_rest_on_shaves() -> None:
    cm = snippets_core.compile_model(str(ROOT / "examples" / "transformer_block.onnx"), target="shave")
    where = {op: w for _, op, w in cm.placement()}
    assert where["MatMul"] == "dpu" and sum(op == "MatMul" for _, op, _ in cm.placement()) == 8
    assert {w for op, w in where.items() if op != "MatMul"} <= {"shave", "shave-sw", "dma"}


# --- the kernels' contract: scalars in the params struct, constant tables in .rodata -----------------------


def _sections(elf_bytes: bytes) -> dict[str, bytes]:
    elf = ELFFile(io.BytesIO(elf_bytes))
    return {s.name: s.data() for s in elf.iter_sections()}, elf  # type: ignore[return-value]


def test_erf_coefficients_live_in_rodata_and_geometry_in_params() -> None:
    elf_bytes = swk.map_kernel("erf", ("f32", "f32"), (False, False))
    sections, elf = _sections(elf_bytes)
    ro = np.frombuffer(sections[".rodata"], np.float32)
    for c in swk.ERFC_COEFFS:
        assert np.float32(c) in ro
    rodata = elf.get_section_by_name(".rodata")
    text = elf.get_section_by_name(".text")
    assert rodata["sh_addr"] == WIN_D + (text["sh_size"] + 15) // 16 * 16
    # the coefficients are not immediates of the code: the code reads them from .rodata
    words = np.frombuffer(sections[".text"], np.uint64)
    imms = {int(w) & 0xFFFFFFFF for w in words}
    assert not any(int(np.float32(c).view(np.uint32)) in imms for c in swk.ERFC_COEFFS)
    layout = swk.map_layout(1)
    assert layout.signature == "mm:" + "i" * (4 + 2 * 4)
    assert swk.norm_layout(True, True).signature == "mmmm:iiffbb"
    assert swk.AXIS_LAYOUT.signature == "mm:iiif"


def _run_single(
    elf: bytes, layout: ParamsLayout, arrays: list[np.ndarray], out: np.ndarray, scalars: dict
) -> np.ndarray:
    """One invocation on tile 0: DMA every array into CMX, run, DMA the output back."""
    sb = ScheduleBuilder("single", target=Target())
    kernel = sb.add_kernel(elf)
    refs, cursor = [], sb.cmx_workspace_start
    b_in, b_out = sb.new_barrier(), sb.new_barrier()
    for i, a in enumerate(arrays):
        src = sb.add_input(f"x{i}", a.shape, a.dtype)
        refs.append(sb.cmx(0, cursor, a.shape, a.dtype))
        cursor += (a.nbytes + 63) // 64 * 64
        sb.dma(src, refs[-1], update=[b_in])
    refs.append(sb.cmx(0, cursor, out.shape, out.dtype))
    dst = sb.add_output("y", out.shape, out.dtype)
    sb.act(kernel, 0, refs, scalars, wait=[b_in], update=[b_out], layout=layout)
    sb.dma(refs[-1], dst, wait=[b_out])
    return run(write_blob(sb.build()), {f"x{i}": a for i, a in enumerate(arrays)})["y"]


@pytest.mark.parametrize("eps_outside", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
def test_mvn_eps_inside_or_outside_the_sqrt(eps_outside: bool, normalize: bool) -> None:
    x = (np.random.default_rng(2).standard_normal((5, 19)) * 2 + 3).astype(np.float32)
    scalars = {"outer": 5, "n": 19, "inv_n": 1 / 19, "eps": 0.25, "eps_outside": eps_outside, "normalize": normalize}
    out = _run_single(swk.norm_kernel("f32"), swk.norm_layout(False, False), [x], np.empty_like(x), scalars)
    v = x.astype(np.float64)
    centered = v - v.mean(-1, keepdims=True)
    std = v.std(-1, keepdims=True)
    ref = centered if not normalize else centered / (std + 0.25 if eps_outside else np.sqrt(std**2 + 0.25))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_not_equal_kernel_writes_a_u8_mask() -> None:
    """NotEqual (no ONNX op, but the core's) writes 0/1 bytes; the output is gathered lane by lane."""
    a = (np.arange(4 * 9) % 3).astype(np.float32).reshape(4, 9)
    z = np.zeros((4, 9), np.float32)
    elf = swk.map_kernel("not_equal", ("f32", "f32", "u8"), (False, False, True))
    scalars = {"d0": 1, "d1": 1, "d2": 1, "d3": 36}
    for k, size in enumerate((4, 4, 1)):
        scalars.update({f"s{k}_0": 0, f"s{k}_1": 0, f"s{k}_2": 0, f"s{k}_3": size})
    out = _run_single(elf, swk.map_layout(2), [a, z], np.empty((4, 9), np.uint8), scalars)
    np.testing.assert_array_equal(out, (a != 0).astype(np.uint8))


@pytest.mark.parametrize("t", ["f32", "f16"])
@pytest.mark.parametrize("op", ["log", "softplus", "erf", "gelu_erf", "gelu_tanh"])
def test_unary_map_kernels_run_alone(t: str, op: str) -> None:
    """The SW kernels themselves (Log and SoftPlus are normally fused into Subgraphs by the Tokenizer)."""
    dtype = {"f32": np.float32, "f16": np.float16}[t]
    rng = np.random.default_rng(4)
    x = (rng.uniform(0.01, 50, (3, 23)) if op == "log" else rng.uniform(-30, 30, (3, 23))).astype(dtype)
    size = x.itemsize
    scalars = {"d0": 1, "d1": 1, "d2": 3, "d3": 23}
    for k in range(2):
        scalars.update({f"s{k}_0": 0, f"s{k}_1": 0, f"s{k}_2": 23 * size, f"s{k}_3": size})
    elf = swk.map_kernel(op, (t, t), (False, False))
    out = _run_single(elf, swk.map_layout(1), [x], np.empty_like(x), scalars)
    v = x.astype(np.float64)
    ref = {
        "log": lambda: np.log(v),
        "softplus": lambda: np.logaddexp(0, v),
        "erf": lambda: _erf(v),
        "gelu_erf": lambda: 0.5 * v * np.vectorize(math.erfc)(-v / math.sqrt(2)),
        "gelu_tanh": lambda: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
    }[op]()
    _check(out, ref, dtype)


def test_a_layer_larger_than_a_slot_is_split_over_invocations(tmp_path: Path) -> None:
    """LayerNorm over 3 MiB of f32 rows: 2 x 64 KiB slots per tile cannot hold it in one piece."""
    x = np.random.default_rng(9).standard_normal((48, 4, 2048)).astype(np.float32)
    g = np.ones(2048, np.float32)
    inits = [helper.make_tensor("g", TensorProto.FLOAT, [2048], g.tolist())]
    node = helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-5)
    out = _compile_run(tmp_path, [node], {"x": x}, x.shape, inits, {"cmx_bytes_per_tile": 256 * 1024})
    v = x.astype(np.float64)
    ref = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_a_boolean_model_output_is_u8(tmp_path: Path) -> None:
    """A comparison as a model output: the blob stores booleans as u8 0/1 (DType has no bool)."""
    graph = helper.make_graph(
        [helper.make_node("Less", ["a", "b"], ["y"])],
        "cmp",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 17]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, [3, 17])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), tmp_path / "cmp.onnx")
    cm = snippets_core.compile_model(str(tmp_path / "cmp.onnx"), target="shave")
    rng = np.random.default_rng(8)
    a, b = rng.integers(0, 3, (2, 3, 17)).astype(np.float32)
    out = cm({"a": a, "b": b})["y"]
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, (a < b).astype(np.uint8))


def test_describe_and_placement_list_the_sw_layers(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Softmax", ["e"], ["y"], axis=0)],
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 8])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), tmp_path / "two.onnx")
    cm = snippets_core.compile_model(str(tmp_path / "two.onnx"), target="shave")
    sw = [p for p in cm.placement() if p[2] == "shave-sw"]
    assert sw == [("Erf_0", "Erf", "shave-sw"), ("Softmax_1", "Softmax", "shave-sw")]
    assert "[shave-sw] Softmax Softmax_1" in cm.describe()


def test_softmax_over_axis_0_is_split_by_columns_with_2d_dma(tmp_path: Path) -> None:
    """outer = 1: the invocations take column blocks (strided 2-D DMAs), more of them than SHAVEs when the
    rows of one block would not fit a 60 KiB slot."""
    x = (np.random.default_rng(12).standard_normal((1024, 128)) * 3).astype(np.float32)
    node = helper.make_node("Softmax", ["x"], ["y"], axis=0)
    out = _compile_run(tmp_path, [node], {"x": x}, x.shape, options={"cmx_bytes_per_tile": 128 * 1024})
    v = x.astype(np.float64)
    e = np.exp(v - v.max(0))
    np.testing.assert_allclose(out, e / e.sum(0), rtol=2e-5, atol=1e-9)
