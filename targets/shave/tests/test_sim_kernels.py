"""Hand-written SHVX kernels run in the simulator over multi-tile schedules, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from snippets_shave import reference_kernels as rk
from snippets_shave.abi import CLAMP_PARAMS, SOFTMAX_PARAMS
from snippets_shave.blob import Target, write_blob
from snippets_shave.sim import RaceError, find_races, load_blob, run, simulate

TARGETS = {"2tiles": Target(), "6tiles": Target.lnl()}
NUMPY_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
DTYPES = {"f32": np.float32, "f16": np.float16}


def _inputs(rng: np.random.Generator, n: int, shape: tuple[int, ...], dtype: type) -> dict[str, np.ndarray]:
    return {f"x{i}": (rng.standard_normal(shape) * 4).astype(dtype) for i in range(n)}


@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
@pytest.mark.parametrize("t", ["f32", "f16"])
@pytest.mark.parametrize("op", sorted(NUMPY_BINARY))
def test_binary_eltwise_is_exact(tiled, op: str, t: str, target: Target) -> None:
    shape = (3, 5, 67)  # 1005 elements: every chunk ends in a partial vector
    blob = write_blob(tiled(rk.eltwise_binary(op, t), 2, shape, DTYPES[t], target))
    x = _inputs(np.random.default_rng(0), 2, shape, DTYPES[t])
    out = run(blob, x)["y"]
    expect = NUMPY_BINARY[op](x["x0"], x["x1"])
    assert out.dtype == expect.dtype
    np.testing.assert_array_equal(out, expect)


@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
@pytest.mark.parametrize("t", ["f32", "f16"])
def test_relu_and_clamp_are_exact(tiled, t: str, target: Target) -> None:
    shape = (7, 131)
    x = _inputs(np.random.default_rng(1), 1, shape, DTYPES[t])
    relu = run(write_blob(tiled(rk.relu(t), 1, shape, DTYPES[t], target)), x)["y"]
    np.testing.assert_array_equal(relu, np.maximum(x["x0"], DTYPES[t](0)))
    blob = tiled(rk.clamp(t), 1, shape, DTYPES[t], target, scalars={"min": -1.25, "max": 2.5}, layout=CLAMP_PARAMS)
    clamp = run(write_blob(blob), x)["y"]
    np.testing.assert_array_equal(clamp, np.clip(x["x0"], DTYPES[t](-1.25), DTYPES[t](2.5)))


@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
def test_sigmoid_within_documented_tolerance(tiled, target: Target) -> None:
    shape = (2, 513)
    rng = np.random.default_rng(2)
    x32 = {"x0": rng.uniform(-12, 12, shape).astype(np.float32)}
    out32 = run(write_blob(tiled(rk.sigmoid("f32"), 1, shape, np.float32, target)), x32)["y"]
    ref32 = 1.0 / (1.0 + np.exp(-x32["x0"].astype(np.float64)))
    np.testing.assert_allclose(out32, ref32, rtol=1e-5, atol=0)
    x16 = {"x0": x32["x0"].astype(np.float16)}
    out16 = run(write_blob(tiled(rk.sigmoid("f16"), 1, shape, np.float16, target)), x16)["y"]
    ref16 = 1.0 / (1.0 + np.exp(-x16["x0"].astype(np.float64)))
    assert out16.dtype == np.float16
    np.testing.assert_allclose(out16.astype(np.float64), ref16, rtol=2e-3, atol=2.0**-24)  # f16 subnormal step


@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
@pytest.mark.parametrize("row_len", [1, 4, 37, 256])
def test_softmax_last_axis(tiled, target: Target, row_len: int) -> None:
    shape = (3, 13, row_len)
    rng = np.random.default_rng(row_len)
    x = {"x0": (rng.standard_normal(shape) * 5).astype(np.float32)}
    blob = tiled(
        rk.softmax_last_axis_f32(), 1, shape, np.float32, target, scalars={"axis": 1}, row_len=row_len,
        layout=SOFTMAX_PARAMS,
    )  # fmt: skip
    out = run(write_blob(blob), x)["y"]
    v = x["x0"].astype(np.float64)
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=-1, keepdims=True), rtol=2e-5, atol=1e-9)


@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
def test_task_orderings_give_identical_outputs(tiled, target: Target) -> None:
    """Different task-list orders and different scheduler interleavings must give the same bytes."""
    shape = (5, 203)
    x = _inputs(np.random.default_rng(3), 1, shape, np.float32)
    results = []
    traces = set()
    for order_seed in (None, 1, 2):
        blob = tiled(rk.sigmoid("f32"), 1, shape, np.float32, target, chunks=3 * target.tiles, order_seed=order_seed)
        loaded = load_blob(write_blob(blob))
        assert find_races(loaded) == []
        for seed in (None, 11, 12, 13):
            res = simulate(loaded, x, seed=seed)
            results.append(res.outputs["y"])
            traces.add(tuple((e.executor, e.task, e.event) for e in res.trace))
    assert len(traces) > 3  # the interleavings really differed
    for r in results[1:]:
        assert r.tobytes() == results[0].tobytes()


def test_tensor_larger_than_one_cmx_streams_through_tiles(tiled) -> None:
    """Three 800 KB tensors through two 256 KiB CMX slices: chunks reuse a ring of two buffer sets per tile."""
    target = Target(cmx_bytes_per_tile=256 * 1024)  # small slices keep the test fast
    n = 200_000
    blob = tiled(rk.eltwise_binary("add", "f32"), 2, (n,), np.float32, target, chunks=24, slots_per_tile=2)
    x = _inputs(np.random.default_rng(4), 2, (n,), np.float32)
    loaded = load_blob(write_blob(blob))
    assert find_races(loaded) == []
    res = simulate(loaded, x)
    np.testing.assert_array_equal(res.outputs["y"], x["x0"] + x["x1"])
    np.testing.assert_array_equal(simulate(loaded, x, seed=5).outputs["y"], res.outputs["y"])
    assert res.instructions > n // 4 * 8


def test_buffer_reuse_without_its_barrier_is_a_race(tiled) -> None:
    """Reusing a CMX slot before the previous chunk is copied out: the race checker names both tasks, and
    some interleavings really produce wrong data."""
    target = Target(tiles=1, shaves_per_tile=2, dma_engines=4)  # 4 queues: little implicit ordering
    shape = (4000,)
    x = _inputs(np.random.default_rng(6), 2, shape, np.float32)
    blob = tiled(rk.eltwise_binary("add", "f32"), 2, shape, np.float32, target, chunks=8, slots_per_tile=2,
                 war_barriers=False, physical_barriers=False)  # fmt: skip  (physical reuse would add order)
    loaded = load_blob(write_blob(blob))
    races = find_races(loaded)
    assert races and all("with no barrier or queue order" in r for r in races)
    assert any("writes" in r and "CMX #0" in r for r in races)
    with pytest.raises(RaceError, match="data race"):
        run(loaded, x, check_races=True)
    wrong = sum(not np.array_equal(run(loaded, x, seed=s)["y"], x["x0"] + x["x1"]) for s in range(20))
    assert wrong > 0


@pytest.mark.parametrize("target", TARGETS.values(), ids=TARGETS.keys())
@pytest.mark.parametrize("kind", ["max", "sum"])
@pytest.mark.parametrize("row_len", [1, 5, 64, 131])
def test_reduce_last_axis(kind: str, row_len: int, target: Target) -> None:
    """Rows split over the tiles; each tile reduces its rows into a (rows,) output chunk."""
    from snippets_shave.abi import REDUCE_PARAMS
    from snippets_shave.blob import TensorRef
    from snippets_shave.constants import DType
    from snippets_shave.schedule import ScheduleBuilder

    rows = 23
    sb = ScheduleBuilder("reduce", target=target)
    x = sb.add_input("x", (rows, row_len), DType.F32)
    y = sb.add_output("y", (rows,), DType.F32)
    k = sb.add_kernel(rk.reduce_last_axis_f32(kind))
    for tile, part in enumerate(np.array_split(np.arange(rows), target.tiles)):
        start, n = int(part[0]), len(part)
        base = sb.cmx_workspace_start
        cin = sb.cmx(tile, base, (n, row_len), DType.F32)
        cout = sb.cmx(tile, base + (n * row_len * 4 + 63) // 64 * 64, (n,), DType.F32)
        b_in, b_out = sb.new_barrier(), sb.new_barrier()
        src = TensorRef("x", DType.F32, (n, row_len), x.location, 0, start * row_len * 4)
        sb.dma(src, cin, engine=tile % 2, update=[b_in])
        sb.act(k, tile, [cin, cout], {"axis": 1}, wait=[b_in], update=[b_out], layout=REDUCE_PARAMS)
        sb.dma(cout, TensorRef("y", DType.F32, (n,), y.location, 0, start * 4), engine=(tile + 1) % 2, wait=[b_out])
    value = (np.random.default_rng(row_len).standard_normal((rows, row_len)) * 3).astype(np.float32)
    out = run(write_blob(sb.build()), {"x": value}, check_races=True)["y"]
    if kind == "max":
        np.testing.assert_array_equal(out, value.max(axis=1))
    else:  # per-lane f32 partial sums, then an exact horizontal sum
        np.testing.assert_allclose(out, value.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_kernel_reads_its_rodata_in_win_d_and_its_data_copy_in_win_e() -> None:
    """.rodata is mapped after .text in WIN_D, .data is copied to the start of every WIN_E image."""
    from snippets_shave.asm import Assembler, r0, r2, r3, r4, v0, v1, v2
    from snippets_shave.constants import WIN_D, WIN_E, DType
    from snippets_shave.elf import write_kernel_elf
    from snippets_shave.schedule import ScheduleBuilder

    a = Assembler()
    a.LD32(r4, r0, 0)  # input dataAddr
    a.VLD(v0, r4, 0, t="f32")
    n_instr = 11  # every instruction is 8 bytes, so the .rodata address is known before assembling
    a.MOVI(r2, WIN_D + (n_instr * 8 + 15) // 16 * 16)  # .rodata follows .text, 16-aligned
    a.VLD(v1, r2, 0, t="f32")
    a.MOVI(r3, WIN_E)
    a.VLD(v2, r3, 0, t="f32")
    a.VADD(v0, v0, v1, t="f32")
    a.VADD(v0, v0, v2, t="f32")
    a.LD32(r4, r0, 40)  # output dataAddr
    a.VST(v0, r4, 0, t="f32")
    a.RET()
    assert len(a) == n_instr
    a_text = a.assemble()
    rodata = np.array([10, 20, 30, 40], np.float32).tobytes()
    data = np.array([0.5, 0.25, 0.125, 1], np.float32).tobytes()
    elf = write_kernel_elf("consts", a_text, rodata=rodata, data=data, params_signature="mm:", params_size=80)
    sb = ScheduleBuilder("consts")
    x, y = sb.add_input("x", (4,), DType.F32), sb.add_output("y", (4,), DType.F32)
    k = sb.add_kernel(elf)
    cin, cout = (
        sb.cmx(0, sb.cmx_workspace_start, (4,), DType.F32),
        sb.cmx(0, sb.cmx_workspace_start + 64, (4,), DType.F32),
    )
    b0, b1 = sb.new_barrier(), sb.new_barrier()
    sb.dma(x, cin, update=[b0])
    sb.act(k, 0, [cin, cout], wait=[b0], update=[b1])
    sb.dma(cout, y, wait=[b1])
    value = np.array([1, 2, 3, 4], np.float32)
    out = run(write_blob(sb.build()), {"x": value})["y"]
    np.testing.assert_array_equal(out, value + np.frombuffer(rodata, np.float32) + np.frombuffer(data, np.float32))
