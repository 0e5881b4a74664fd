"""DPU (NCE) tasks: each op's numerics against numpy float64 (f16/int8 inputs, f32 accumulation, f16 output),
the loader's checks, the per-variant barriers of compiled layers (a property of the timing model's schedule), the
physical barrier mapping under a small limit, and the whole examples against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from snippets_core import compile_model, read_onnx
from snippets_core.errors import BlobFormatError
from snippets_core.frontends import builder as sb
from snippets_shave.blob import DpuOp, DpuTask, Executor
from snippets_shave.constants import DType
from snippets_shave.schedule import ScheduleBuilder
from snippets_shave.sim import load_blob, simulate
from snippets_shave.vpurt.ir import VpurtTask
from snippets_shave.vpurt.parser import parse_module
from snippets_shave.vpurt.printer import print_module
from snippets_shave.vpurt.serialize import module_from_blob

RNG = np.random.default_rng(14)
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _run_dpu(
    op: DpuOp, x: np.ndarray, w: np.ndarray | None, out_dims: tuple[int, ...], **geometry: object
) -> np.ndarray:
    """One variant on DPU 0: inputs DMA'd from network inputs into CMX, the DPU, the output DMA'd out."""
    b = ScheduleBuilder("dpu_one")
    start = b.cmx_workspace_start
    refs, ins, cursor = [], {}, start
    for name, value in (("x", x), ("w", w)):
        if value is None:
            continue
        src = b.add_input(name, value.shape, value.dtype)
        dst = b.cmx(0, cursor, value.shape, value.dtype, f"{name}.cmx")
        cursor += (value.nbytes + 63) // 64 * 64
        b.dma(src, dst, update=[0] if not refs else [0], name=f"in.{name}")
        refs.append(dst)
        ins[name] = value
    b.num_barriers = 2
    out = b.cmx(0, cursor, out_dims, DType.F16, "y.cmx")
    b.dpu(DpuTask(op, refs[0], out, refs[1] if len(refs) > 1 else None, **geometry), 0, wait=[0], update=[1],
          name="variant")  # type: ignore[arg-type]
    y = b.add_output("y", out_dims, np.float16)
    b.dma(out, y, wait=[1], name="out")
    return simulate(b.build(), ins).outputs["y"]


def _f16(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float16)


def _check(got: np.ndarray, want: np.ndarray, scale: np.ndarray | float) -> None:
    """f16 output rounding (2**-11 relative) plus f32 accumulation error over |terms| (``scale``)."""
    assert got.dtype == np.float16
    bound = np.abs(want) * 2.0**-11 + np.asarray(scale) * 1e-6 + 1e-7
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound), np.abs(got - want).max()


def _windows(x: np.ndarray, kernel, strides, pads, dil, fill):  # type: ignore[no-untyped-def]
    """float64 reference windows [N, C, OH, OW, KH, KW] by explicit loops over the output positions."""
    t, left, bt, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bt), (left, r)), constant_values=fill)
    oh = (xp.shape[2] - dil[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dil[1] * (kernel[1] - 1) - 1) // strides[1] + 1
    out = np.empty((*x.shape[:2], oh, ow, *kernel))
    for i in range(oh):
        for j in range(ow):
            rows = i * strides[0] + dil[0] * np.arange(kernel[0])
            cols = j * strides[1] + dil[1] * np.arange(kernel[1])
            out[:, :, i, j] = xp[:, :, rows][:, :, :, cols]
    return out


@pytest.mark.parametrize("transpose_b", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.int8])
def test_matmul_variant_against_float64(transpose_b: bool, dtype: type) -> None:
    m, k, n = 13, 70, 21
    if dtype == np.int8:
        # small magnitudes: the f16 output holds the sums (|sum| <= 70 * 16 * 16 < 65504)
        x = RNG.integers(-16, 16, (m, k)).astype(np.int8)
        w = RNG.integers(-16, 16, (n, k) if transpose_b else (k, n)).astype(np.int8)
    else:
        x, w = _f16((m, k)), _f16((n, k) if transpose_b else (k, n))
    w64 = w.astype(np.float64).T if transpose_b else w.astype(np.float64)
    want = x.astype(np.float64) @ w64
    got = _run_dpu(DpuOp.MATMUL, x, w, (m, n), transpose_b=transpose_b)
    _check(got, want, np.abs(x.astype(np.float64)) @ np.abs(w64))


@pytest.mark.parametrize(
    ("strides", "pads", "dilations"), [((1, 1), (1, 1, 1, 1), (1, 1)), ((2, 2), (0, 1, 2, 0), (1, 1)),
                                       ((1, 2), (2, 2, 2, 2), (2, 1))],
)  # fmt: skip
def test_conv_variant_against_float64(strides, pads, dilations) -> None:  # type: ignore[no-untyped-def]
    x, w = _f16((2, 5, 11, 9)), _f16((6, 5, 3, 3))
    win = _windows(x, (3, 3), strides, pads, dilations, 0.0)  # [N, C, OH, OW, KH, KW]
    want = np.einsum("ncijhw,ochw->noij", win, w.astype(np.float64))
    scale = np.einsum("ncijhw,ochw->noij", np.abs(win), np.abs(w.astype(np.float64)))
    got = _run_dpu(DpuOp.CONV, x, w, want.shape, kernel=(3, 3), strides=strides, pads=pads, dilations=dilations)
    _check(got, want, scale)


def test_int8_conv_variant_is_exact_before_the_f16_rounding() -> None:
    x = RNG.integers(0, 32, (1, 4, 7, 7)).astype(np.uint8)  # |sum| <= 36 * 31 * 16: within f16's range
    w = RNG.integers(-16, 16, (3, 4, 3, 3)).astype(np.int8)
    win = _windows(x, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0.0)
    want = np.einsum("ncijhw,ochw->noij", win, w.astype(np.float64))
    got = _run_dpu(DpuOp.CONV, x, w, want.shape, kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1))
    assert np.array_equal(got, want.astype(np.float16))  # integer sums are exact in f32: one rounding to f16


@pytest.mark.parametrize("exclude_pad", [False, True])
def test_pool_variants_against_float64(exclude_pad: bool) -> None:
    x = _f16((1, 3, 9, 8))
    geometry = {"kernel": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 1)}
    win = _windows(x, (3, 2), (2, 2), (1, 0, 1, 1), (1, 1), np.nan)
    want_max = np.nanmax(win, axis=(4, 5))
    got = _run_dpu(DpuOp.MAXPOOL, x, None, want_max.shape, **geometry)
    assert np.array_equal(got, want_max.astype(np.float16))  # a max of f16 values is exact
    counts = np.sum(~np.isnan(win), axis=(4, 5)) if exclude_pad else 6
    want_avg = np.nansum(win, axis=(4, 5)) / counts
    got = _run_dpu(DpuOp.AVGPOOL, x, None, want_avg.shape, exclude_pad=exclude_pad, **geometry)
    _check(got, want_avg, np.nansum(np.abs(win), axis=(4, 5)))


@pytest.mark.parametrize(("op", "fn"), [(DpuOp.ADD, np.add), (DpuOp.MUL, np.multiply)])
def test_eltwise_variants_against_float64(op: DpuOp, fn) -> None:  # type: ignore[no-untyped-def]
    x, w = _f16((3, 40)), _f16((3, 40))
    want = fn(x.astype(np.float64), w.astype(np.float64))
    _check(_run_dpu(op, x, w, (3, 40)), want, 0.0)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: {"output": t.output.__class__(**{**t.output.__dict__, "dims": (4, 4)})}, "the op computes"),
        (lambda t: {"weights": None}, "needs weights"),
        (lambda t: {"input": t.input.__class__(**{**t.input.__dict__, "dtype": DType.F32})}, "the NCE takes"),
        (lambda t: {"output": t.input}, "output"),
        (lambda t: {"variant": 3}, "variant 3 of 1"),
        (lambda t: {"variants": 2}, "variants \\[0\\] of 2"),
        (lambda t: {"strides": (1, 1)}, "MATMUL takes no strides"),
    ],
)
def test_loader_rejects_bad_dpu_tasks(edit, message: str) -> None:  # type: ignore[no-untyped-def]
    b = ScheduleBuilder("bad")
    at = b.cmx_workspace_start
    x = b.cmx(0, at, (4, 8), DType.F16, "x")
    w = b.cmx(0, at + 64, (8, 5), DType.F16, "w")
    y = b.cmx(0, at + 192, (4, 5), DType.F16, "y")
    task = DpuTask(DpuOp.MATMUL, x, y, w)
    bad = DpuTask(**{**task.__dict__, **edit(task)})
    b.dpu(bad, 0, name="v")
    with pytest.raises(BlobFormatError, match=message):
        load_blob(b.build())


def _mlp(m: int = 64, k: int = 48, n: int = 80) -> object:
    x = sb.parameter([m, k], "f32", name="x")
    w = sb.constant(RNG.standard_normal((k, n)).astype(np.float32), name="w")
    return sb.model([sb.relu(sb.matmul(x, w))], name="mlp")


def _layer_tasks(cm, layer: str) -> tuple[list[VpurtTask], list[VpurtTask]]:  # type: ignore[no-untyped-def]
    module = module_from_blob(cm.loaded.blob)
    tasks = [t for _, t in module.tasks()]
    variants = [t for t in tasks if isinstance(t.op, DpuTask) and t.op.layer == layer]
    posts = [t for t in tasks if t.name.startswith(f"{layer}.v") and t.name.endswith(".post")]
    return variants, posts


@pytest.mark.parametrize("preset", ["37xx", "40xx"])
def test_layer_is_split_into_variants_each_with_its_own_barrier(preset: str) -> None:
    cm = compile_model(_mlp(), target="shave", config={"target_options": {"preset": preset, "variants_per_dpu": 2}})
    hw = cm.loaded.blob.header.target
    variants, posts = _layer_tasks(cm, _matmul_name(cm))
    assert len(variants) == 2 * hw.dpus and len(posts) == len(variants)
    assert len({t.updates for t in variants}) == len(variants)  # one barrier each
    for v, p in zip(variants, posts, strict=True):
        assert p.waits == v.updates  # the post-processing waits on its variant only
    assert {tl.queue for tl in cm.loaded.blob.task_lists if tl.executor == Executor.DPU} == set(range(hw.dpus))
    x = RNG.standard_normal((64, 48)).astype(np.float32)
    w = np.asarray(next(n for n in cm.model.get_ordered_ops() if n.type_name == "Constant").value, np.float64)
    want = np.maximum(x.astype(np.float16).astype(np.float64) @ w.astype(np.float16).astype(np.float64), 0)
    got = cm({"x": x})[cm.output_names[0]]
    assert np.abs(got - want).max() <= 2.0**-10 * np.abs(want).max()


def _matmul_name(cm) -> str:  # type: ignore[no-untyped-def]
    return next(t.op.layer for _, t in module_from_blob(cm.loaded.blob).tasks() if isinstance(t.op, DpuTask))


@pytest.mark.parametrize(("m", "k", "n"), [(1, 32, 40), (3, 20, 48)])
def test_few_rows_are_split_over_output_channels(m: int, k: int, n: int) -> None:
    cm = compile_model(_mlp(m, k, n), target="shave")
    variants, _ = _layer_tasks(cm, _matmul_name(cm))
    assert len(variants) == 4 and {t.op.output.dims for t in variants} == {(m, n // 4)}  # column blocks
    x = RNG.standard_normal((m, k)).astype(np.float32)
    w = np.asarray(next(n.value for n in cm.model.get_ordered_ops() if n.type_name == "Constant"), np.float64)
    want = np.maximum(x.astype(np.float16).astype(np.float64) @ w.astype(np.float16).astype(np.float64), 0)
    got = simulate(cm.loaded, {"x": x}, check_races=True).outputs[cm.output_names[0]]
    assert np.abs(got - want).max() <= 2.0**-10 * np.abs(want).max()


@pytest.mark.parametrize("scheme", ["per_variant", "shared"])
def test_post_processing_starts_before_the_last_variant_ends_only_with_per_variant_barriers(scheme: str) -> None:
    cm = compile_model(_mlp(), target="shave", config={"target_options": {"dpu_barriers": scheme}})
    result = simulate(cm.loaded, {"x": RNG.standard_normal((64, 48)).astype(np.float32)})
    variants, posts = _layer_tasks(cm, _matmul_name(cm))
    last_variant_end = max(result.timing.end[t.id] for t in variants)
    first_post_start = min(result.timing.start[t.id] for t in posts)
    if scheme == "per_variant":
        assert first_post_start < last_variant_end
    else:
        assert len({t.updates for t in variants}) == 1
        assert first_post_start > last_variant_end


def test_dpu_schedule_round_trips_through_the_text() -> None:
    cm = compile_model(_mlp(), target="shave")
    module = module_from_blob(cm.loaded.blob)
    text = print_module(module)
    assert "VPUIP.NCE.DPUTask {op = \"MATMUL\"" in text and "VPURT.TaskList @DPU [dpu 1]" in text
    assert parse_module(text) == module


@pytest.mark.parametrize(("name", "shape"), [("transformer_block", None), ("cnn_block", None)])
def test_whole_example_in_one_blob_matches_onnxruntime(name: str, shape: object) -> None:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the outside oracle of the whole examples")
    path = EXAMPLES / f"{name}.onnx"
    sess = ort.InferenceSession(str(path))
    inputs = {i.name: RNG.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    want = sess.run(None, inputs)[0].astype(np.float64)
    # a small barrier limit: the per-variant barriers must still map onto the physical ones
    cm = compile_model(read_onnx(path), target="shave", config={"target_options": {"max_barriers": 24}})
    blob = cm.loaded.blob
    assert len(blob.barriers) > 24 and all(0 <= b.real_id < 24 for b in blob.barriers)
    assert any(tl.executor == Executor.DPU for tl in blob.task_lists)
    result = simulate(cm.loaded, inputs, check_races=True)
    got = result.outputs[cm.output_names[0]]
    # f16 operands and f16 DPU outputs through the whole block: a few f16 ulps of the output's scale
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max() + 1e-3
    # every DPU layer's post-processing waits on its own variant only (per-variant barriers, the default)
    layers = {t.op.layer for _, t in module_from_blob(blob).tasks() if isinstance(t.op, DpuTask)}
    for layer in layers:
        variants, posts = _layer_tasks(cm, layer)
        assert [p.waits for p in posts] == [v.updates for v in variants] and len(set(p.waits for p in posts)) > 1



def _conv_pool_model(group: int = 1) -> object:
    from snippets_core.ir.model import Model
    from snippets_core.ir.ops.io import Constant, Parameter, Result
    from snippets_core.ir.ops.nn import AvgPool, Convolution

    x = Parameter("f32", (1, 4, 10, 9), name="x")
    w = Constant(RNG.standard_normal((6, 4 // group, 3, 3)).astype(np.float32), name="w")
    conv = Convolution(x, w, strides=(2, 1), pads=(1, 0, 1, 2), group=group, name="conv")
    pool = AvgPool(conv, kernel=(2, 2), strides=(1, 2), pads=(0, 1, 1, 0), count_include_pad=False, name="pool")
    return Model([Result(pool, name="y")], [x], name="conv_pool")


def test_strided_padded_conv_and_avgpool_layers_against_float64() -> None:
    cm = compile_model(_conv_pool_model(), target="shave")
    assert {op for _, op, where in cm.placement() if where == "dpu"} == {"Convolution", "AvgPool"}
    x = RNG.standard_normal((1, 4, 10, 9)).astype(np.float32)
    w = next(n.value for n in cm.model.get_ordered_ops() if n.type_name == "Constant" and n.value.ndim == 4)
    x16, w16 = x.astype(np.float16).astype(np.float64), np.asarray(w).astype(np.float16).astype(np.float64)
    conv = np.einsum("ncijhw,ochw->noij", _windows(x16, (3, 3), (2, 1), (1, 0, 1, 2), (1, 1), 0.0), w16)
    win = _windows(conv.astype(np.float16), (2, 2), (1, 2), (0, 1, 1, 0), (1, 1), np.nan)
    want = np.nanmean(win, axis=(4, 5))
    got = cm({"x": x})["y"]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 2.0**-9 * np.abs(conv).max()  # two f16 roundings of the conv's scale


def test_layers_the_nce_cannot_run_and_bad_options_are_typed_errors() -> None:
    from snippets_core.config import ConfigError
    from snippets_core.errors import CodegenError, UnsupportedOpError

    with pytest.raises(UnsupportedOpError, match="group 2"):
        compile_model(_conv_pool_model(group=2), target="shave")
    with pytest.raises(ConfigError, match="dpu_barriers"):
        compile_model(_mlp(), target="shave", config={"target_options": {"dpu_barriers": "none"}})
    with pytest.raises(CodegenError, match="DPU region"):  # 48x80 weights do not fit a 16 KiB-CMX region
        compile_model(_mlp(), target="shave", config={"target_options": {"cmx_bytes_per_tile": 65536}})
