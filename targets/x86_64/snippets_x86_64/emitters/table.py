"""The Emitter classes of the jitters table: ``EMITTERS = {"Exp": ExpEmitter, "Add": AddEmitter, ...}``.

Each class is a thin wrapper around the pure emitter functions: it reads the op's attributes and element types
from its Expression once, picks the function for the register form of the data (``f32`` for f32/f16/bf16,
``i32`` for i32/i8/u8/boolean; see ``convert.py``) from the op's :class:`OpSpec`, and states the aux registers
that function needs (``aux_vecs``/``aux_masks``, per instance, since they depend on the form and attributes).
``emit_code(in_regs, out_regs, aux)`` appends the code to the Assembler it was given (or to a new one) and
returns that Assembler; constants travel in its RIP-relative pool.

Registers come as the core's ``Reg(type, idx)`` (``idx`` = zmm number, k number for masks); ``aux`` is a
dict by class name (``"vec"``, ``"mask"``, ``"gpr"``; ``RegType`` keys are accepted too). Aux masks must be
k1..k7: the functions use them as write masks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from snippets_core.codegen.emitter import Emitter
from snippets_core.errors import CodegenError, UnsupportedByTarget
from snippets_core.ir.element_type import ElementType
from snippets_core.ir.ops.snippets import MAX_MAY_DROP_NAN
from snippets_x86_64.asm import ZMM, Assembler, K, VecReg
from snippets_x86_64.emitters import eltwise as E
from snippets_x86_64.emitters import horizon as H
from snippets_x86_64.emitters import math as M
from snippets_x86_64.emitters.base import Aux, needs
from snippets_x86_64.emitters.convert import FLOAT_FORM, INT_FORM, emit_convert, register_form

if TYPE_CHECKING:
    from snippets_core.ir.node import Node
    from snippets_core.lowered.expression import Expression

Fn = Callable[..., None]
Attrs = Callable[["Node"], dict[str, Any]]

F32, I32, BOOL = ElementType.f32, ElementType.i32, ElementType.boolean


def _no_attrs(node: Node) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class OpSpec:
    """How an op maps to emitter functions.

    ``forms`` maps a register form (``"f32"``, ``"i32"``) to a function, or ``choose(node, form)`` picks one
    (e.g. by an attribute); ``attrs(node)`` gives its keyword arguments; ``form_input`` is the input whose
    element type decides the form (Select: the ``then`` input); ``inputs`` the number of register inputs;
    ``precisions`` the input element-type tuples the emitter takes (the jitters' supported precisions).
    """

    forms: Mapping[str, Fn] = field(default_factory=dict)
    attrs: Attrs = _no_attrs
    inputs: int = 1
    form_input: int = 0
    choose: Callable[[Node, str], Fn | None] | None = None
    precisions: Callable[[Node], Sequence[tuple[ElementType, ...]]] | None = None

    def function(self, node: Node, form: str) -> Fn | None:
        return self.choose(node, form) if self.choose is not None else self.forms.get(form)


def _form_precisions(spec: OpSpec, node: Node) -> list[tuple[ElementType, ...]]:
    out = []
    for form, et in (("f32", F32), ("i32", I32)):
        if spec.function(node, form) is not None:
            out.append((et,) * spec.inputs)
    return out


def _x86_reg(reg: Any, what: str) -> int:
    if reg is None:
        raise CodegenError(f"{what} has no register assigned (run the register allocation first)")
    return int(reg.idx) if hasattr(reg, "idx") else int(reg)


def _aux_list(aux: Mapping[Any, Sequence[Any]] | None, name: str) -> list[int]:
    if not aux:
        return []
    for key, regs in aux.items():
        if str(getattr(key, "value", key)) == name:
            return [_x86_reg(r, f"aux {name} register") for r in regs]
    return []


class X86Emitter(Emitter):
    """Base of this target's emitters: registers from the core's ``Reg`` values to DSL registers, aux
    registers as :class:`Aux`; ``emit_code`` appends to ``asm`` (given at construction, or a new Assembler)
    and returns it."""

    def __init__(self, expr: Expression, asm: Assembler | None = None) -> None:
        super().__init__(expr)
        self.asm = asm

    def emit_code(
        self, in_regs: list[Any], out_regs: list[Any], aux: Mapping[Any, Sequence[Any]] | None = None
    ) -> Assembler:
        a = self.asm if self.asm is not None else Assembler()
        vecs = tuple(ZMM[i] for i in _aux_list(aux, "vec"))
        masks = tuple(K[i] for i in _aux_list(aux, "mask"))
        if len(vecs) < self.aux_vecs or len(masks) < self.aux_masks:
            raise CodegenError(
                f"{type(self).__name__} ({self.expr.type_name} '{self.expr.name}') needs {self.aux_vecs} aux vector "
                f"and {self.aux_masks} aux mask registers, got {len(vecs)} and {len(masks)}"
            )
        ins = [ZMM[_x86_reg(r, f"input {i} of '{self.expr.name}'")] for i, r in enumerate(in_regs)]
        outs = [ZMM[_x86_reg(r, f"output {i} of '{self.expr.name}'")] for i, r in enumerate(out_regs)]
        self.emit_impl(a, ins, outs, Aux(vecs, masks))
        return a

    def emit_impl(self, a: Assembler, ins: list[VecReg], outs: list[VecReg], aux: Aux) -> None:
        """Append the code (the registers are already the DSL's)."""
        raise CodegenError(f"{type(self).__name__} emits nothing for {self.expr.type_name}")


class NopEmitter(X86Emitter):
    """Ops that need no code (VectorBuffer: its register is the whole op)."""

    def emit_impl(self, a: Assembler, ins: list[VecReg], outs: list[VecReg], aux: Aux) -> None:
        return None


def _input_type(node: Node, i: int) -> ElementType:
    return node.inputs[i].source.element_type


class EltwiseEmitter(X86Emitter):
    """One op of :data:`SPECS`: the function for the data's register form, with the op's attributes."""

    SPEC: ClassVar[OpSpec] = OpSpec()

    def __init__(self, expr: Expression, asm: Assembler | None = None) -> None:
        super().__init__(expr, asm)
        node = expr.node
        spec = type(self).SPEC
        et = _input_type(node, spec.form_input) if node.inputs else node.outputs[0].element_type
        self.form = register_form(et)
        fn = spec.function(node, self.form)
        if fn is None:
            raise UnsupportedByTarget(
                f"target 'x86_64_avx512': op {node.type_name} (node '{node.name}') has no emitter for element type {et}"
            )
        self.fn = fn
        self.kwargs = spec.attrs(node)
        need = needs(fn)
        self.aux_vecs = need.vecs
        self.aux_masks = need.masks

    def emit_impl(self, a: Assembler, ins: list[VecReg], outs: list[VecReg], aux: Aux) -> None:
        self.fn(a, outs[0], *ins, aux, **self.kwargs)


# --- per-op attributes and choices -------------------------------------------------------------------------


def _attrs(*names: str, rename: Mapping[str, str] | None = None) -> Attrs:
    rename = rename or {}
    return lambda node: {rename.get(n, n): getattr(node, n) for n in names}


def _gelu(node: Node, form: str) -> Fn | None:
    if form != "f32":
        return None
    return M.emit_gelu_tanh if node.approximation_mode == "tanh" else M.emit_gelu_erf  # type: ignore[attr-defined]


def _round(node: Node, form: str) -> Fn | None:
    if form == "i32":
        return E.emit_identity
    return M.emit_round_half_away if node.mode == "half_away_from_zero" else M.emit_round_half_to_even  # type: ignore[attr-defined]


def _swish(node: Node, form: str) -> Fn | None:
    if form != "f32":
        return None
    return M.emit_swish_beta if len(node.inputs) == 2 else M.emit_swish


def _swish_precisions(node: Node) -> list[tuple[ElementType, ...]]:
    return [(F32,) * len(node.inputs)]


def _power_static(node: Node, form: str) -> Fn | None:
    return E.power_static_function(node.power) if form == "f32" else None  # type: ignore[attr-defined]


def _compare(name: str) -> OpSpec:
    f32_pred, i32_pred = E.COMPARISONS[name]

    def choose(node: Node, form: str) -> Fn | None:
        return E.emit_compare_f32 if form == "f32" else E.emit_compare_i32

    return OpSpec(
        inputs=2,
        choose=choose,
        attrs=lambda node: {"predicate": f32_pred if _form_of(node, 0) == "f32" else i32_pred},
        precisions=lambda node: [(F32, F32), (I32, I32)],
    )


def _form_of(node: Node, i: int) -> str:
    return register_form(_input_type(node, i))


def _convert(mode: str) -> OpSpec:
    def attrs(node: Node) -> dict[str, Any]:
        return {"src_type": _input_type(node, 0), "dst_type": node.destination_type, "mode": mode}  # type: ignore[attr-defined]

    return OpSpec(
        forms={"f32": emit_convert, "i32": emit_convert},
        attrs=attrs,
        precisions=lambda node: [(t,) for t in (*FLOAT_FORM, *INT_FORM)],
    )


def _unary(f32: Fn | None = None, i32: Fn | None = None, attrs: Attrs = _no_attrs) -> OpSpec:
    forms = {k: v for k, v in (("f32", f32), ("i32", i32)) if v is not None}
    return OpSpec(forms=forms, attrs=attrs)


def _binary(f32: Fn | None = None, i32: Fn | None = None) -> OpSpec:
    forms = {k: v for k, v in (("f32", f32), ("i32", i32)) if v is not None}
    return OpSpec(forms=forms, inputs=2)


def _scalar_input(node: Node, i: int) -> float | None:
    """The value of input ``i`` when it is a Scalar (a constant baked into the kernel), else None."""
    src = node.inputs[i].source.node
    return float(src.scalar) if src.type_name == "Scalar" else None  # type: ignore[attr-defined]


def _horizon_max(node: Node, form: str) -> Fn | None:
    if form != "f32":
        return None
    return H.emit_horizon_max_any if node.rt_info.get(MAX_MAY_DROP_NAN) else H.emit_horizon_max


def _minmax(general: Fn, const_y: Fn, const_x: Fn, i32: Fn) -> OpSpec:
    """Maximum/Minimum: with a Scalar operand that cannot be NaN (as y, nor zero: numpy returns y on a +-0 tie),
    one ``vmaxps``/``vminps`` in the operand order that propagates the other operand's NaN (the general form
    patches x's NaN lanes: two more ops)."""

    def choose(node: Node, form: str) -> Fn | None:
        if form == "i32":
            return i32
        if form != "f32":
            return None
        x, y = _scalar_input(node, 0), _scalar_input(node, 1)
        if (x is not None and not math.isnan(x)) or node.rt_info.get(MAX_MAY_DROP_NAN):
            return const_x  # a Softmax's running max may drop NaN lanes: one vmaxps
        if y is not None and not math.isnan(y) and y != 0.0:
            return const_y
        return general

    return OpSpec(inputs=2, choose=choose)


def _logical(fn: Fn, inputs: int) -> OpSpec:
    return OpSpec(forms={"i32": fn}, inputs=inputs, precisions=lambda node: [(BOOL,) * inputs])


#: op type name -> how it maps to emitter functions
SPECS: dict[str, OpSpec] = {
    # unary
    "Abs": _unary(E.emit_abs_f32, E.emit_abs_i32),
    "Ceiling": _unary(M.emit_ceil, E.emit_identity),
    "Floor": _unary(M.emit_floor, E.emit_identity),
    "Round": OpSpec(choose=_round),
    "Clamp": _unary(E.emit_clamp_f32, E.emit_clamp_i32, _attrs("min", "max")),
    "Elu": _unary(M.emit_elu, attrs=_attrs("alpha")),
    "Selu": _unary(M.emit_selu, attrs=_attrs("alpha", "lambda_")),
    "Erf": _unary(M.emit_erf),
    "Exp": _unary(M.emit_exp),
    "Log": _unary(M.emit_log),
    "Gelu": OpSpec(choose=_gelu),
    "HSwish": _unary(E.emit_hswish_f32),
    "HSigmoid": _unary(E.emit_hsigmoid_f32),
    "HardSigmoid": _unary(E.emit_hard_sigmoid_f32, attrs=_attrs("alpha", "beta")),
    "Mish": _unary(M.emit_mish),
    "Negative": _unary(E.emit_neg_f32, E.emit_neg_i32),
    "Relu": _unary(E.emit_relu_f32, E.emit_relu_i32),
    "Sigmoid": _unary(M.emit_sigmoid),
    "Sign": _unary(M.emit_sign, E.emit_sign_i32),
    "SoftPlus": _unary(M.emit_softplus),
    "SoftSign": _unary(E.emit_softsign_f32),
    "Sqrt": _unary(E.emit_sqrt_f32),
    "Tanh": _unary(M.emit_tanh),
    "Sin": _unary(M.emit_sin),
    "Cos": _unary(M.emit_cos),
    "Swish": OpSpec(choose=_swish, precisions=_swish_precisions),
    "PowerStatic": OpSpec(choose=_power_static, attrs=_attrs("power")),
    "LogicalNot": _logical(E.emit_logical_not, 1),
    # binary
    "Add": _binary(E.emit_add_f32, E.emit_add_i32),
    "Subtract": _binary(E.emit_sub_f32, E.emit_sub_i32),
    "Multiply": _binary(E.emit_mul_f32, E.emit_mul_i32),
    "Divide": _binary(E.emit_div_f32, E.emit_div_i32),
    "Maximum": _minmax(E.emit_max_f32, E.emit_max_f32_const_y, E.emit_max_f32_const_x, E.emit_max_i32),
    "Minimum": _minmax(E.emit_min_f32, E.emit_min_f32_const_y, E.emit_min_f32_const_x, E.emit_min_i32),
    "Power": _binary(E.emit_power_f32),
    "SquaredDifference": _binary(E.emit_squared_difference_f32, E.emit_squared_difference_i32),
    "FloorMod": _binary(E.emit_floor_mod_f32, E.emit_floor_mod_i32),
    "Mod": _binary(E.emit_mod_f32, E.emit_mod_i32),
    "PRelu": _binary(E.emit_prelu_f32, E.emit_prelu_i32),
    **{name: _compare(name) for name in E.COMPARISONS},
    "LogicalAnd": _logical(E.emit_and_i32, 2),
    "LogicalOr": _logical(E.emit_or_i32, 2),
    "LogicalXor": _logical(E.emit_xor_i32, 2),
    "BitwiseXor": OpSpec(forms={"i32": E.emit_xor_i32}, inputs=2, precisions=lambda node: [(I32, I32), (BOOL, BOOL)]),
    # ternary
    "Select": OpSpec(
        forms={"f32": E.emit_select, "i32": E.emit_select},
        inputs=3,
        form_input=1,
        precisions=lambda node: [(BOOL, F32, F32), (BOOL, I32, I32)],
    ),
    "FusedMulAdd": OpSpec(forms={"f32": E.emit_fused_mul_add_f32, "i32": E.emit_fused_mul_add_i32}, inputs=3),
    # conversions
    "Convert": _convert("convert"),
    "ConvertTruncation": _convert("truncation"),
    "ConvertSaturation": _convert("saturation"),
    # across lanes and register setup
    "HorizonMax": OpSpec(choose=_horizon_max, precisions=lambda node: [(F32,)]),
    "HorizonSum": OpSpec(forms={"f32": H.emit_horizon_sum}, precisions=lambda node: [(F32,)]),
    "Fill": OpSpec(
        forms={"f32": H.emit_fill, "i32": H.emit_fill},
        attrs=_attrs("offset", "fill_value"),
        precisions=lambda node: [(F32,), (I32,)],
    ),
    "BroadcastMove": OpSpec(
        forms={"f32": H.emit_broadcast_move, "i32": H.emit_broadcast_move},
        precisions=lambda node: [(F32,), (I32,)],
    ),
    "Scalar": OpSpec(
        forms={"f32": H.emit_scalar, "i32": H.emit_scalar},
        inputs=0,
        attrs=lambda node: {"bits": H.scalar_bits(node.scalar, register_form(node.outputs[0].element_type))},  # type: ignore[attr-defined]
        precisions=lambda node: [()],
    ),
}


def supported_precisions(node: Node) -> list[tuple[ElementType, ...]]:
    """The input element-type tuples this target's emitter of ``node`` takes, preferred first (for
    PropagatePrecision and the jitters table); empty for ops without a spec."""
    spec = SPECS.get(node.type_name)
    if spec is None:
        return []
    if spec.precisions is not None:
        return list(spec.precisions(node))
    return _form_precisions(spec, node)


def _emitter_class(name: str, spec: OpSpec) -> type[EltwiseEmitter]:
    # one class per op, so the jitters table, error messages and dumps name it (ExpEmitter, AddEmitter, ...)
    cls = type(f"{name}Emitter", (EltwiseEmitter,), {"SPEC": spec, "__doc__": f"The {name} emitter."})
    cls.__module__ = __name__
    cls.__qualname__ = cls.__name__
    return cls


#: op type name -> Emitter class (the x86-64 jitters table, without the memory and control-flow emitters)
EMITTERS: dict[str, type[X86Emitter]] = {name: _emitter_class(name, spec) for name, spec in SPECS.items()}
EMITTERS["VectorBuffer"] = NopEmitter


def jitters(asm: Assembler | None = None) -> dict[str, Any]:
    """The rows of a TargetMachine jitters table for these ops: ``{type_name: Jitter(factory, precisions)}``;
    every factory builds its emitter on ``asm`` (or, if None, on a fresh Assembler per emitter)."""
    from snippets_core.codegen.target_machine import Jitter

    return {
        name: Jitter(
            factory=lambda expr, cls=cls: cls(expr, asm),
            supported_precisions=lambda expr: supported_precisions(expr.node),
        )
        for name, cls in EMITTERS.items()
    }
