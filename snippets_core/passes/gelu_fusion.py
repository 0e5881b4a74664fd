"""GeluFusion: the Gelu that exporters write out (Erf or Tanh and four eltwise ops around it) as one Gelu op."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output, replace_node
from snippets_core.passes.graph_utils import make, nodes_of_type
from snippets_core.passes.pass_manager import Pass

#: how close a constant must be to the formula's (the exporters write them rounded to f32, some to 4 digits)
_RTOL = 1e-3


#: a bf16 constant is the formula's rounded to 8 significant bits: within one bf16 step
_RTOL_BF16 = 2.0**-8


class _Scalar(float):
    """A constant's value with the tolerance its element type allows."""

    rtol: float = _RTOL


def _scalar(out: Output) -> float | None:
    """The value of a one-element float Constant (f32, f16, bf16), else None."""
    node = out.node
    if node.type_name != "Constant":
        return None
    value = np.asarray(node.value)  # type: ignore[attr-defined]
    bf16 = value.dtype.name == "bfloat16"  # ml_dtypes' kind is 'V', not 'f'
    if value.size != 1 or not (value.dtype.kind == "f" or bf16):
        return None
    scalar = _Scalar(float(value.reshape(-1)[0]))
    scalar.rtol = _RTOL_BF16 if bf16 else _RTOL
    return scalar


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= getattr(value, "rtol", _RTOL) * abs(want)


def _only_consumer(out: Output) -> Node | None:
    targets = out.targets
    return targets[0].node if len(targets) == 1 else None


def _operands(node: Node, type_name: str) -> list[Output] | None:
    """The two inputs of ``node`` when it is a ``type_name``, else None."""
    return [i.source for i in node.inputs] if node.type_name == type_name and len(node.inputs) == 2 else None


def _leaves(out: Output, root: bool = True) -> list[Output]:
    """The factors of a Multiply tree: a Multiply whose output has no other consumer is opened, any other value is a
    factor (``x`` itself, read elsewhere too, stays one)."""
    node = out.node
    if node.type_name == "Multiply" and len(node.inputs) == 2 and (root or len(out.targets) == 1):
        return [f for i in node.inputs for f in _leaves(i.source, root=False)]
    return [out]


def _scaled_by(out: Output, factor: float) -> Output | None:
    """``x`` when ``out`` is ``x * factor`` (a Multiply, either order) or ``x / (1 / factor)``, read only once."""
    node = out.node
    if len(out.targets) != 1:
        return None
    ops = _operands(node, "Multiply")
    if ops is not None:
        for a, b in (ops, ops[::-1]):
            if _near(_scalar(b), factor) and _scalar(a) is None:
                return a
    ops = _operands(node, "Divide")
    if ops is not None and _near(_scalar(ops[1]), 1.0 / factor) and _scalar(ops[0]) is None:
        return ops[0]
    return None


def _plus_one(node: Node) -> Output | None:
    """The output of ``node`` + 1 when ``node``'s only consumer is that Add, else None."""
    add = _only_consumer(node.outputs[0])
    ops = None if add is None else _operands(add, "Add")
    if ops is None or not any(_near(_scalar(o), 1.0) for o in ops):
        return None
    return add.outputs[0]


def _cube_of(out: Output, x: Output) -> bool:
    """``out`` is x**3: Power(x, 3) or x * x * x, read only once."""
    if len(out.targets) != 1:
        return False
    ops = _operands(out.node, "Power")
    if ops is not None:
        return ops[0] is x and _near(_scalar(ops[1]), 3.0)
    leaves = _leaves(out, root=False)
    return len(leaves) == 3 and all(f is x for f in leaves)


def _tanh_argument(out: Output) -> Output | None:
    """``x`` when ``out`` is sqrt(2/pi) (x + 0.044715 x**3), each intermediate read once."""
    s = _scaled_by(out, math.sqrt(2.0 / math.pi))
    ops = None if s is None else _operands(s.node, "Add")
    if ops is None or len(s.targets) != 1:  # type: ignore[union-attr]
        return None
    for x, term in (ops, ops[::-1]):
        cube = _scaled_by(term, 0.044715)
        if cube is not None and _cube_of(cube, x):
            return x
    return None


def _drop_unused(node: Node) -> None:
    """Disconnect ``node`` and, in turn, its producers once nothing reads them (Parameters stay)."""
    if node.type_name == "Parameter" or any(o.targets for o in node.outputs):
        return
    producers = [i.source.node for i in node.inputs]
    node.disconnect()
    for p in producers:
        _drop_unused(p)


@dataclass(frozen=True)
class GeluFusion(Pass):
    """``x * 0.5 * (1 + erf(x / sqrt 2))`` (torch's exact Gelu, the factors in any order and grouping, the division
    also as a product by 1 / sqrt 2) -> ``Gelu(x)``; ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))`` (GPT-2's,
    the cube also as ``x * x * x``) -> ``Gelu(x, approximation_mode='tanh')``. OpenVINO's GeluFusion.

    Runs on the whole model before tokenization: a Gelu is one eltwise op of the kernels (an FC post-op), where the
    written-out form is five to nine (the erf form's division among them), and the Gelu emitters keep the relative
    accuracy of the negative tail where ``1 + erf`` cancels. Every intermediate must have no other consumer; the
    last Multiply's name and output names go to the Gelu."""

    name: ClassVar[str] = "gelu-fusion"

    def run(self, ir: Model) -> bool:
        changed = False
        for node in nodes_of_type(ir, "Erf", "Tanh"):
            if not node.inputs or node.outputs[0].targets == []:
                continue
            if node.type_name == "Erf":
                x, mode = _scaled_by(node.inputs[0].source, 1.0 / math.sqrt(2.0)), "erf"
            else:
                x, mode = _tanh_argument(node.inputs[0].source), "tanh"
            one_plus = None if x is None else _plus_one(node)
            if x is None or one_plus is None:
                continue
            root = self._product_root(one_plus, x)
            if root is None:
                continue
            gelu = make("Gelu", x, approximation_mode=mode, name=root.name)
            inputs = [i.source.node for i in root.inputs]
            replace_node(root, gelu)
            for n in inputs:  # the written-out ops no longer read x (nor anything else)
                _drop_unused(n)
            changed = True
        if changed:
            ir.validate()
        return changed

    @staticmethod
    def _product_root(one_plus: Output, x: Output) -> Node | None:
        """The Multiply whose factors are exactly ``one_plus``, ``x`` and 0.5 (the lowest such, climbing from
        ``one_plus``'s consumer through Multiplies read once)."""
        node = _only_consumer(one_plus)
        while node is not None and node.type_name == "Multiply":
            leaves = _leaves(node.outputs[0])
            consts = [_scalar(f) for f in leaves if _scalar(f) is not None]
            others = [f for f in leaves if _scalar(f) is None]
            if (len(others) == 2 and any(f is one_plus for f in others) and any(f is x for f in others)
                    and _near(math.prod(consts), 0.5)):  # type: ignore[arg-type]
                return node
            node = _only_consumer(node.outputs[0])
        return None


__all__ = ["GeluFusion"]
