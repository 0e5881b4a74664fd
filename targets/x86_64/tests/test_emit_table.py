"""The EMITTERS table end to end: for every op and every input precision its emitter takes, an Expression of a
real node gets its Emitter, the emitted code runs over arrays, and the result is compared with the node's own
numpy reference (``node.evaluate``)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from iced_x86 import Code, Decoder

from snippets_core.codegen.emitter import Emitter
from snippets_core.errors import CodegenError, UnsupportedOpError
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.node import OPS
from snippets_core.ir.ops.io import Parameter
from snippets_core.ir.ops.snippets import Scalar
from snippets_core.lowered.expression import Expression
from snippets_core.lowered.port_descriptor import PortDescriptor, Reg, RegType
from snippets_x86_64.asm import ZMM, Assembler
from snippets_x86_64.emitters.convert import register_form
from snippets_x86_64.emitters.table import EMITTERS, SPECS, jitters, supported_precisions
from snippets_x86_64.emitters.testing import aux_for, expected_writable, run_eltwise, written_registers

pytestmark = pytest.mark.avx512

N = 16 * 37 + 5  # a tail
OUT_REG = 8

#: (op, attributes) rows: every op of the table, some with several attribute sets
CASES: list[tuple[str, dict]] = [
    *[(op, {}) for op in sorted(SPECS) if op not in (
        "Clamp", "Elu", "Selu", "Gelu", "Round", "HardSigmoid", "PowerStatic", "Convert", "ConvertTruncation",
        "ConvertSaturation", "Fill", "Scalar", "BroadcastMove", "FusedMulAdd")],
    ("Clamp", {"min": -1.5, "max": 2.25}),
    ("Elu", {"alpha": 0.7}),
    ("Selu", {}),
    ("Gelu", {"approximation_mode": "erf"}),
    ("Gelu", {"approximation_mode": "tanh"}),
    ("Round", {"mode": "half_to_even"}),
    ("Round", {"mode": "half_away_from_zero"}),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("PowerStatic", {"power": 3.0}),
    ("PowerStatic", {"power": -0.5}),
    ("PowerStatic", {"power": 2.7}),
    *[(op, {"destination_type": dt}) for op in ("Convert", "ConvertTruncation", "ConvertSaturation")
      for dt in ("f32", "f16", "bf16", "i32", "i8", "u8", "boolean")],
    ("Fill", {"offset": 5, "fill_value": 0xFF7FFFFF}),
    ("BroadcastMove", {"broadcast_dim": 16}),
]  # fmt: skip

#: ops whose numpy reference the emitter reproduces bit for bit (others: within 3e-5 relative, 1e-6 absolute)
APPROXIMATE = {
    "Erf",
    "Exp",
    "Log",
    "Gelu",
    "Mish",
    "Sigmoid",
    "SoftPlus",
    "Tanh",
    "Sin",
    "Cos",
    "Swish",
    "Elu",
    "Selu",
    "Power",
    "PowerStatic",
    "HorizonSum",
    "HSwish",
    "HSigmoid",
    "HardSigmoid",
    "FloorMod",
    "Mod",
}


def values(et: ElementType, rng: np.random.Generator) -> np.ndarray:
    if et is ElementType.boolean:
        return rng.integers(0, 2, N).astype(bool)
    if et.is_real:
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.5, 3.0], dtype=np.float32)
        x = np.concatenate([special, rng.standard_normal(N - special.size) * 4]).astype(np.float32)
        return x.astype(et.numpy)
    info = np.iinfo(et.numpy)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return rng.integers(lo, hi, N, endpoint=True).astype(et.numpy)


def lanes(x: np.ndarray, et: ElementType) -> np.ndarray:
    return np.ascontiguousarray(x.astype(np.float32 if register_form(et) == "f32" else np.int32))


def make_node(op: str, attrs: dict, types: tuple[ElementType, ...]):
    params = [Parameter(t, [None, 1] if op == "BroadcastMove" else [N]) for t in types]
    if op == "Swish" and len(types) == 2:
        params[1] = Parameter(types[1], [1])
    return OPS[op](*params, **attrs)


def expression(node, n_inputs: int) -> Expression:
    expr = Expression(node)
    expr.input_descs = [PortDescriptor(reg=Reg(RegType.vec, i)) for i in range(n_inputs)]
    expr.output_descs = [PortDescriptor(reg=Reg(RegType.vec, OUT_REG))]
    return expr


def run_emitter(expr: Expression, arrays: list[np.ndarray], out_dtype) -> np.ndarray:
    """The harness loop with the emitter's code as its body (inputs zmm0.., output zmm8, aux zmm16.., k2..)."""
    cls = EMITTERS[expr.type_name]

    def body(a, dst, *rest):
        emitter = cls(expr, a)
        aux = {"vec": list(range(16, 16 + emitter.aux_vecs)), "mask": list(range(2, 2 + emitter.aux_masks))}
        assert emitter.emit_code(expr.in_regs, expr.out_regs, aux) is a

    body.__name__ = f"table_{expr.type_name}"
    return run_eltwise(body, *arrays, out_dtype=out_dtype)


def reference(node, op: str, inputs: list[np.ndarray]) -> np.ndarray:
    if op in ("HorizonMax", "HorizonSum", "Fill"):
        out = node.evaluate(inputs[0].reshape(-1, 16))[0]
        return np.broadcast_to(out, (out.shape[0], 16)).reshape(-1)
    if op == "BroadcastMove":
        return node.evaluate(inputs[0].reshape(-1, 16)[:, :1])[0].reshape(-1)
    if op == "Swish" and len(inputs) == 2:
        return node.evaluate(inputs[0], inputs[1][:1])[0]
    with np.errstate(all="ignore"):
        return node.evaluate(*inputs)[0]


def table_cases():
    for op, attrs in CASES:
        f32_types = (ElementType.f32,) * (2 if op == "Swish" else SPECS[op].inputs)
        if op == "Select":
            f32_types = (ElementType.boolean, ElementType.f32, ElementType.f32)
        if op == "BitwiseXor":
            f32_types = (ElementType.i32,) * 2
        if op in ("LogicalAnd", "LogicalOr", "LogicalXor", "LogicalNot"):
            f32_types = (ElementType.boolean,) * SPECS[op].inputs
        for types in supported_precisions(make_node(op, attrs, f32_types)):
            if op in ("Convert", "ConvertTruncation", "ConvertSaturation") and types[0] in (
                ElementType.i16,
                ElementType.u16,
            ):
                continue  # covered by the same code as i8/u8; test_emit_convert covers the type pairs
            yield pytest.param(op, attrs, types, id=f"{op}-{'-'.join(map(str, types))}-{attrs}")
        if op == "Swish":
            yield pytest.param(op, attrs, (ElementType.f32,), id="Swish-f32-no-beta")


@pytest.mark.parametrize("op,attrs,types", list(table_cases()))
def test_emitter_matches_node_reference(op, attrs, types):
    rng = np.random.default_rng(zlib.crc32(f"{op}{types}".encode()))
    inputs = [values(t, rng) for t in types]
    if op in ("HorizonMax", "HorizonSum", "Fill", "BroadcastMove"):
        inputs = [x[: N - N % 16] for x in inputs]  # whole vectors: they work across the lanes of one
    if op == "Swish" and len(types) == 2:
        inputs[1] = np.full_like(inputs[0], 0.75)
    node = make_node(op, attrs, types)
    want = reference(node, op, inputs)
    out_type = node.outputs[0].element_type
    want = lanes(np.asarray(want), out_type)
    got = run_emitter(expression(node, len(types)), [lanes(x, t) for x, t in zip(inputs, types)], want.dtype)
    if want.dtype.kind == "f":
        ok = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want)) | (got == want)
        if op in APPROXIMATE:
            with np.errstate(invalid="ignore"):
                ok |= np.abs(got - want) <= 3e-5 * np.abs(want) + 1e-6
    else:
        ok = got == want
    assert ok.all(), list(zip(inputs[0][~ok][:6], got[~ok][:6], want[~ok][:6]))


@pytest.mark.parametrize("op,attrs,types", list(table_cases()))
def test_emitter_function_may_write_over_any_input_and_writes_nothing_else(op, attrs, types):
    """The register allocator may give the output the register of any input; the code writes only the
    output and the aux registers it declared."""
    rng = np.random.default_rng(11)
    node = make_node(op, attrs, types)
    emitter = EMITTERS[op](expression(node, len(types)))
    arrays = [lanes(values(t, rng), t) for t in types]
    if op == "Swish" and len(types) == 2:
        arrays[1] = np.full_like(arrays[0], 0.75)
    base = run_eltwise(emitter.fn, *arrays, out_dtype=np.uint32, **emitter.kwargs)
    for alias in (None, *range(len(types))):
        got = run_eltwise(emitter.fn, *arrays, out_dtype=np.uint32, alias=alias, **emitter.kwargs)
        assert np.array_equal(got, base), f"{op}: output in the register of input {alias}"
        written = written_registers(emitter.fn, len(types), alias, **emitter.kwargs)
        assert written <= expected_writable(emitter.fn, len(types), alias), written


def _shape(instr) -> tuple:  # type: ignore[no-untyped-def]
    regs = tuple(instr.op_register(i) for i in range(instr.op_count))
    mem = (instr.memory_base, instr.memory_index, instr.is_broadcast) if instr.memory_base or instr.memory_index else ()
    return (instr.code, instr.op_mask, instr.zeroing_masking, instr.rounding_control, instr.immediate8, regs, mem)


@pytest.mark.parametrize("op,attrs,types", list(table_cases()))
def test_emitted_code_decodes_to_the_instructions_built(op, attrs, types):
    """iced's decoder reads back exactly the instructions (form, mask, rounding, registers, memory) the
    emitter function built."""
    emitter = EMITTERS[op](expression(make_node(op, attrs, types), len(types)))
    a = Assembler()
    emitter.fn(a, ZMM[OUT_REG], *ZMM[: len(types)], aux_for(emitter.fn), **emitter.kwargs)
    code, code_size = a.assemble()
    decoded = [_shape(i) for i in Decoder(64, code[:code_size])]
    built = [_shape(i) for i in a.instructions() if i.code != Code.DECLAREBYTE]
    assert decoded == built


def test_scalar_emitter_broadcasts_its_value():
    for value, et in ((2.5, "f32"), (-7, "i32"), (0, "f32"), (1, "boolean")):
        node = Scalar(value, et)
        got = run_emitter(expression(node, 0), [np.zeros(40, np.float32)], np.float32 if et == "f32" else np.int32)
        assert (got == value).all()


def test_every_emitter_is_an_emitter_and_every_jitter_builds_it():
    table = jitters(Assembler())
    assert sorted(table) == sorted(EMITTERS)
    node = make_node("Exp", {}, (ElementType.f32,))
    emitter = table["Exp"].factory(expression(node, 1))
    assert isinstance(emitter, Emitter) and type(emitter).__name__ == "ExpEmitter"
    assert emitter.aux_vecs == 2 and emitter.aux_masks == 0
    assert table["Add"].supported_precisions(expression(make_node("Add", {}, (ElementType.f32,) * 2), 2)) == [
        (ElementType.f32, ElementType.f32),
        (ElementType.i32, ElementType.i32),
    ]


def test_too_few_aux_registers_is_a_codegen_error():
    node = make_node("Tanh", {}, (ElementType.f32,))
    emitter = EMITTERS["Tanh"](expression(node, 1))
    with pytest.raises(CodegenError, match="Tanh.*needs 5 aux vector"):
        emitter.emit_code(emitter.in_regs, emitter.out_regs, {"vec": [16, 17], "mask": [2]})


def test_unsupported_element_type_names_the_op():
    node = make_node("Power", {}, (ElementType.i32,) * 2)
    assert supported_precisions(node) == [(ElementType.f32, ElementType.f32)]
    with pytest.raises(UnsupportedOpError, match="Power.*i32"):
        EMITTERS["Power"](expression(node, 2))


def test_unassigned_register_is_a_codegen_error():
    node = make_node("Relu", {}, (ElementType.f32,))
    expr = expression(node, 1)
    expr.input_descs = [PortDescriptor()]
    with pytest.raises(CodegenError, match="no register"):
        EMITTERS["Relu"](expr).emit_code(expr.in_regs, expr.out_regs, {"mask": [2]})
