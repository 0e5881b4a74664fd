"""TokenizeInt8FCSnippets: a quantized MatMul with an int8 constant weight becomes one int8 FullyConnected Subgraph.

Four shapes of a quantized linear layer are matched (``W`` an int8 ``[K, N]`` constant with zero point 0, its
scale per tensor or per output column ``n``; the activation quantized per tensor)::

    static QDQ      x (f32) -> FakeQuantize (a Q->DQ pair, u8/i8 grid) -> MatMul(., DQ(W)) [-> Add bias]     f32 out
    dynamic         x (f32) -> DynamicQuantizeLinear -> MatMulInteger(q, W, zp, 0) -> Cast f32
                            -> Mul(., Mul(x_scale, w_scale)) [-> Add bias]                                  f32 out
    QLinearMatMul   q (u8/i8), constant scales and zero points                                             u8/i8 out
    MatMulInteger   q (u8/i8), constant zero point, not followed by the dynamic chain                       i32 out

After an f32 output (static QDQ, dynamic) the Subgraph also takes the chain its kernel applies in registers
(``Int8FCSpec.post_ops``): Q->DQ pairs (onnxruntime's static quantizer puts one after the MatMul, then the bias Add,
then another), Adds, Subtracts and Multiplies by constants along N, Relu; each op the sole reader of the one before.

The FakeQuantize's grid comes from ``rt_info[QUANTIZATION_GRID]`` (set by ConvertQDQToFakeQuantize) and the
weight's int8 values from ``rt_info[DEQUANTIZED_FROM]`` on the folded f32 Constant (set by the ONNX reader). A
FakeQuantize or DynamicQuantizeLinear that feeds several MatMuls (Q, K and V) is cloned into each Subgraph: each
int8 FullyConnected quantizes its own input (one pass over x, against K x N multiply-adds per row).

The body keeps the original ops, so any target (the reference) evaluates it as before; the Subgraph is marked
Completed and carries an :class:`Int8FCSpec` (the integer weight, the per-column scales, the bias, the activation's
grid and what is stored) in ``rt_info[INT8_FULLY_CONNECTED]`` for a target with an int8 kernel. Runs only when the
target sets the ``int8_fc`` tokenization knob, first among the Tokenizers (after ConvertQDQToFakeQuantize). A
quantized MatMul left alone keeps why in ``rt_info[INT8_FC_REJECT_REASON_KEY]``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from snippets_core.ir.element_type import ElementType
from snippets_core.ir.model import Model
from snippets_core.ir.node import Node, Output
from snippets_core.ir.ops.quantize import DEQUANTIZED_FROM, QUANT_RANGES, QUANTIZATION_GRID, QuantizedConstant
from snippets_core.ir.pass_manager import Pass
from snippets_core.ir.shape import Shape
from snippets_core.tokenization.config import TokenizationConfig
from snippets_core.tokenization.tokenize_mha_snippets import LiveNodes, _build_subgraph, _live_ids, _targets

#: rt_info key on an int8 FullyConnected Subgraph: its Int8FCSpec
INT8_FULLY_CONNECTED = "SnippetsInt8FullyConnected"
#: rt_info key on the DequantizeLinear between two int8 convolutions that hand each other quantized bytes
INT8_HANDOFF = "SnippetsInt8Handoff"
#: rt_info key on a quantized MatMul / MatMulInteger / QLinearMatMul left out: why
INT8_FC_REJECT_REASON_KEY = "SnippetsInt8FCRejectReason"

#: where the int8 A comes from: quantized in the kernel on a constant grid, on DynamicQuantizeLinear's grid
#: computed per call, or already quantized (the Subgraph input is u8/i8)
QUANTIZE, DYNAMIC, QUANTIZED = "quantize", "dynamic", "quantized"
#: what the Subgraph stores: dequantized f32, requantized u8/i8, or the exact i32 sums
F32, U8, S8, S32 = "f32", "u8", "s8", "s32"
_ACTIVATION_TYPES = {ElementType.u8: False, ElementType.i8: True}
#: ops whose output values are some of their input's: a quantization grid survives them
_MOVES = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "MaxPool")


@dataclass(frozen=True, eq=False)
class Int8FCSpec:
    """What an int8 FullyConnected computes: ``out[m, n] = post(sum_k (q[m, k] - a_zero_point) * weight[k, n])``
    with ``q`` the int8 A (``source`` says how it is made), ``post`` dequantization ``* a_scale * w_scale[n] +
    bias[n]`` (f32), requantization on ``(y_scale, y_zero_point)`` (u8/s8), or nothing (s32). ``a_index`` is the
    Subgraph input holding x (f32) or q."""

    source: str
    a_signed: bool
    a_scale: float
    a_zero_point: int
    weight: np.ndarray
    w_scale: np.ndarray
    bias: np.ndarray | None
    output: str
    y_scale: float = 1.0
    y_zero_point: int = 0
    a_index: int = 0
    #: a 2-D convolution (NCHW x, the weight's rows ordered [kh, kw, c]): run as this GEMM over its windows
    conv: Int8ConvGeometry | None = None
    #: the ops after the dequantization (and the bias), in order, each ``(kind, parameters)`` (an FC takes fq,
    #: mul_c, add_c (per column) and relu; a convolution all):
    #: ``("fq", (scale, lo, hi))`` a Q->DQ pair on a per-tensor grid (``clamp(rint(v / scale), lo, hi) * scale``),
    #: ``("mul_c", m)`` / ``("add_c", m)`` by per-channel f32 vectors, ``("relu", None)``, ``("residual", i)``
    #: the Add of Subgraph input ``i`` (the output's shape), ``("clamp", (lo, hi))``, ``("prelu", slope)`` /
    #: ``("prelu_c", m)``, ``("hswish", None)``, ``("sigmoid", None)``, ``("swish", (beta, gate))``: ``x *
    #: sigmoid(beta x)`` with ``gate`` None or the ``(scale, lo, hi)`` of a Q->DQ pair on the sigmoid,
    #: ``("qresidual", (i, scale, zero_point, signed))`` the Add of Subgraph input ``i`` holding the u8/s8 bytes
    #: another int8 convolution stored (``_hand_off``), dequantized in the kernel as DequantizeLinear does
    post_ops: tuple[tuple[str, Any], ...] = ()
    #: a MaxPool of the requantized output (u8/s8 out only): its window over the convolution's output (``spatial``)
    pool: Int8ConvGeometry | None = None

    @property
    def k(self) -> int:
        return int(self.weight.shape[0])

    @property
    def n(self) -> int:
        return int(self.weight.shape[1])

    def describe(self) -> str:
        a = {QUANTIZE: "f32 x quantized on a constant grid", DYNAMIC: "f32 x quantized on its own range per call",
             QUANTIZED: "quantized x"}[self.source]
        what = f"{self.k}x{self.n}" if self.conv is None else f"Conv {self.conv.describe()} as a {self.k}x{self.n}"
        post = "".join(f", {kind}" for kind, _ in self.post_ops)
        pool = "" if self.pool is None else f", then MaxPool {self.pool.describe()} of the bytes"
        return (f"{what} {'s8' if self.a_signed else 'u8'} x s8 ({a}), {self.output} out"
                f"{', bias' if self.bias is not None else ''}{post}{pool}")

    def residual_index(self) -> int | None:
        """The Subgraph input a residual post-op adds (None: no residual)."""
        return next((int(i) if kind == "residual" else int(i[0]) for kind, i in self.post_ops
                     if kind in ("residual", "qresidual")), None)


@dataclass(frozen=True)
class Int8ConvGeometry:
    """A 2-D convolution of an NCHW input with static channels: kernel, strides, dilations, the pads (begin, and
    end grown so that every window is inside the padded input), the input and output spatial sizes (None when H or
    W is dynamic: :meth:`resolved` gives them per input) and the group count (the weight's GEMM rows are then one
    group's [kh, kw, c])."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads_begin: tuple[int, int]
    pads_end: tuple[int, int]
    spatial: tuple[int, int] | None
    out: tuple[int, int] | None
    group: int = 1
    #: the Convolution's window rule (its pads or auto_pad), which resolves an input's H and W
    window: Any = field(default=None, compare=False, repr=False)

    def resolved(self, spatial: tuple[int, int]) -> Int8ConvGeometry:
        """This convolution on an input of ``spatial`` H, W (itself when they are its static ones)."""
        if spatial == self.spatial:
            return self
        outs, pbs, pes = self.window.resolve(spatial)
        # the end pads grown so that the last window is inside the padded input (a stride that skips the end)
        ends = tuple(max(pe, (o - 1) * st + (k - 1) * d + 1 - sz - pb) for o, st, k, d, sz, pb, pe in
                     zip(outs, self.strides, self.kernel, self.dilations, spatial, pbs, pes))
        return replace(self, pads_begin=tuple(pbs), pads_end=ends, spatial=tuple(spatial),  # type: ignore[arg-type]
                       out=tuple(outs))  # type: ignore[arg-type]

    def describe(self) -> str:
        groups = f" group {self.group}" if self.group > 1 else ""
        sizes = "(H, W per input)" if self.spatial is None or self.out is None else \
            f"{self.spatial[0]}x{self.spatial[1]} -> {self.out[0]}x{self.out[1]}"
        return f"{self.kernel[0]}x{self.kernel[1]} stride {self.strides[0]}x{self.strides[1]} {sizes}{groups}"


class Int8Reject(Exception):
    """Internal: why a quantized MatMul does not become an int8 FullyConnected."""


def _const(out: Output) -> np.ndarray | None:
    node = out.node
    return np.asarray(node.value) if node.type_name == "Constant" else None  # type: ignore[attr-defined]


def _const_or_reject(out: Output, what: str) -> np.ndarray:
    v = _const(out)
    if v is None:
        raise Int8Reject(f"{what} is not a constant")
    return v


def _scalar(out: Output, what: str) -> np.ndarray:
    v = _const(out)
    if v is None or v.size != 1:
        raise Int8Reject(f"{what} is not a constant scalar")
    return v.reshape(())


def _column_scale(scale: np.ndarray, n: int, what: str) -> np.ndarray:
    if scale.size == 1:
        return np.full(n, scale.reshape(()), np.float32)
    if scale.ndim != 1 or scale.size != n:
        raise Int8Reject(f"{what} of shape {list(scale.shape)} is neither per tensor nor per output column ({n})")
    return scale.astype(np.float32)


def _int8_weight(w: np.ndarray, zero_point: np.ndarray, what: str) -> np.ndarray:
    if w.dtype != np.int8 or w.ndim != 2:
        raise Int8Reject(f"{what} is {w.dtype} of rank {w.ndim}; the int8 kernel takes an i8 matrix")
    if np.any(zero_point != 0):
        raise Int8Reject(f"{what} has a nonzero zero point (the kernel compensates A's zero point only)")
    return w


def _dequantized_weight(matmul: Node) -> tuple[np.ndarray, np.ndarray]:
    """(int8 W [K, N], f32 per-column scale) of a MatMul whose weight the reader folded from DequantizeLinear."""
    src = matmul.inputs[1].source.node
    qc: QuantizedConstant | None = src.rt_info.get(DEQUANTIZED_FROM)
    if qc is None:
        raise Int8Reject("its weight is not a dequantized constant")
    w = _int8_weight(qc.data, qc.zero_point, "its weight")
    if qc.block_size:
        raise Int8Reject("its weight is quantized in blocks")
    n_axis = 0 if matmul.transpose_b else 1  # type: ignore[attr-defined]
    if qc.scale.size != 1 and qc.axis % 2 != n_axis:
        raise Int8Reject(f"its weight is quantized along axis {qc.axis}, not along the output columns")
    w = w.T if matmul.transpose_b else w  # type: ignore[attr-defined]
    return np.ascontiguousarray(w), _column_scale(qc.scale, w.shape[1], "the weight scale")


def _sole_consumer(out: Output, live: set[int], type_name: str) -> Node | None:
    ts = _targets(out, live)
    return ts[0].node if len(ts) == 1 and ts[0].node.type_name == type_name else None


def _bias(last: Node, live: set[int], n: int) -> tuple[Node, np.ndarray] | None:
    """The Add of a constant [N] (or [1, .., N]) bias that alone reads ``last``'s output, and the bias."""
    add = _sole_consumer(last.outputs[0], live, "Add")
    if add is None:
        return None
    other = [i.source for i in add.inputs if i.source.node is not last]
    if len(other) != 1:
        return None
    b = _const(other[0])
    rank = last.outputs[0].shape.rank if last.outputs[0].shape.rank_is_static else 0
    if b is None or b.size != n or b.shape[-1:] != (n,) or b.ndim > rank or b.dtype != np.float32:
        return None
    return add, b.reshape(n).astype(np.float32)


def _conv_bias(last: Node, live: set[int], m: int) -> tuple[Node, np.ndarray] | None:
    """The Add of a constant per-channel bias ([M, 1, 1] or [1, M, 1, 1]) that alone reads ``last``'s NCHW output."""
    add = _sole_consumer(last.outputs[0], live, "Add")
    if add is None:
        return None
    other = [i.source for i in add.inputs if i.source.node is not last]
    b = _const(other[0]) if len(other) == 1 else None
    if b is None or b.dtype != np.float32 or b.shape not in ((m, 1, 1), (1, m, 1, 1)):
        return None
    return add, b.reshape(m).astype(np.float32)


def _fq_group(fq: Node, live: set[int]) -> tuple[list[Node], Any] | None:
    """(the nodes, the grid) of a FakeQuantize made from a per-tensor u8/i8 Q->DQ pair: the FakeQuantize alone,
    or with the Maximum/Minimum that follow it on a grid extended for an odd zero point (the grid is on the last)."""
    group = [fq]
    while group[-1].rt_info.get(QUANTIZATION_GRID) is None and len(group) < 3:
        nxt = _sole_consumer(group[-1].outputs[0], live, ("Maximum", "Minimum")[len(group) - 1])
        if nxt is None:
            return None
        group.append(nxt)
    grid = group[-1].rt_info.get(QUANTIZATION_GRID)
    return (group, grid) if grid is not None and grid.qtype in _ACTIVATION_TYPES else None


def _channel_constant(node: Node, prev: Node, m: int) -> np.ndarray | None:
    """The per-channel f32 vector [M] of a binary op of ``prev``'s NCHW output by a constant (scalar, [M, 1, 1] or
    [1, M, 1, 1]), the constant second for a Subtract."""
    other = [(j, i.source) for j, i in enumerate(node.inputs) if i.source.node is not prev]
    if len(other) != 1 or (node.type_name == "Subtract" and other[0][0] != 1):
        return None
    c = _const(other[0][1])
    if c is None or c.dtype != np.float32 or not (c.size == 1 or c.shape in ((m, 1, 1), (1, m, 1, 1))):
        return None
    return np.broadcast_to(c.reshape(-1), (m,)).astype(np.float32)


#: the binary ops by a per-channel constant the int8 convolution applies (Subtract as an add of the negation)
_CHANNEL_OPS = {"Multiply": "mul_c", "Add": "add_c", "Subtract": "add_c"}


def _fq_params(grid: Any) -> tuple[float, float, float]:
    """(scale, lo, hi) of a per-tensor grid: ``clamp(rint(v / scale), lo, hi) * scale`` is its Q->DQ pair."""
    qmin, qmax = QUANT_RANGES[grid.qtype]
    return float(grid.scale), float(qmin - grid.zero_point), float(qmax - grid.zero_point)


def _swish_gate(last: Node, live: set[int]) -> tuple[list[Node], Any] | None:
    """``last * Sigmoid(last)``, the gate maybe through a Q->DQ pair (a QDQ model's swish): (the nodes, Sigmoid
    first and the Multiply last; the gate's (scale, lo, hi) or None), when those are ``last``'s only readers."""
    ts = _targets(last.outputs[0], live)
    sig = next((t.node for t in ts if t.node.type_name == "Sigmoid"), None)
    mul = next((t.node for t in ts if t.node.type_name == "Multiply"), None)
    if len(ts) != 2 or sig is None or mul is None:
        return None
    nodes, gate, grid = [sig], sig, None
    fq = _sole_consumer(sig.outputs[0], live, "FakeQuantize")
    if fq is not None:
        found = _fq_group(fq, live)
        if found is None:
            return None
        nodes += found[0]
        gate, grid = found[0][-1], _fq_params(found[1])
    if _sole_consumer(gate.outputs[0], live, "Multiply") is not mul or \
            {i.source.node.id for i in mul.inputs} != {last.id, gate.id}:
        return None
    return [*nodes, mul], grid


def _conv_post_ops(last: Node, live: set[int], out_shape: Shape,
                   stop: Node | None = None) -> tuple[list[Node], list[tuple[str, Any]]]:
    """The chain after an int8 convolution (and its bias) that its kernel applies in registers, each op the sole
    consumer of the one before: FakeQuantizes on per-tensor grids, per-channel multiplies/adds by constants (a
    BatchNormalization), one residual Add of a tensor of the output's shape, and the f32 convolution's
    activations (Relu, Clamp, PRelu, HSwish, Sigmoid, Swish and ``x * Sigmoid(x)``, its gate maybe through a
    Q->DQ pair). Returns (nodes, post_ops) with the residual as its Output (``_fuse`` turns it into the Subgraph
    input index). ``out_shape``: the convolution's output (static channels); ``stop``: a node the chain ends
    before."""
    m = int(out_shape[1])  # type: ignore[arg-type]
    nodes: list[Node] = []
    ops: list[tuple[str, Any]] = []
    while True:
        swish = _swish_gate(last, live)
        if swish is not None:
            nodes += swish[0]
            ops.append(("swish", (1.0, swish[1])))
            last = swish[0][-1]
            continue
        ts = _targets(last.outputs[0], live)
        if len(ts) != 1 or ts[0].node is stop:
            break
        nxt = ts[0].node
        t = nxt.type_name
        if t == "FakeQuantize":
            found = _fq_group(nxt, live)
            if found is None:
                break
            group, grid = found
            nodes += group
            ops.append(("fq", _fq_params(grid)))
            last = group[-1]
            continue
        if t == "Relu":
            ops.append(("relu", None))
        elif t == "Clamp":
            ops.append(("clamp", (float(nxt.min), float(nxt.max))))  # type: ignore[attr-defined]
        elif t in ("HSwish", "Sigmoid"):
            ops.append((t.lower(), None))
        elif t == "Swish":
            beta = _const(nxt.inputs[1].source) if len(nxt.inputs) == 2 else np.ones(1, np.float32)
            if beta is None or beta.size != 1:
                break
            ops.append(("swish", (float(beta.reshape(())), None)))
        elif t == "PRelu" and nxt.inputs[0].source.node is last and (v := _channel_constant(nxt, last, m)) is not None:
            ops.append(("prelu", float(v[0])) if np.all(v == v[0]) else ("prelu_c", v))
        elif t in _CHANNEL_OPS and (v := _channel_constant(nxt, last, m)) is not None:
            ops.append((_CHANNEL_OPS[t], -v if t == "Subtract" else v))
        elif t == "Add" and not any(k == "residual" for k, _ in ops):
            other = [i.source for i in nxt.inputs if i.source.node is not last]
            if len(other) != 1 or other[0].node.type_name == "Constant" or other[0].element_type is not \
                    ElementType.f32 or not other[0].shape.rank_is_static or other[0].shape.sym_dims != \
                    out_shape.sym_dims:  # (a dim unknown on both sides: the kernel checks it per call)
                break
            ops.append(("residual", other[0]))
        else:
            break
        nodes.append(nxt)
        last = nxt
    return nodes, ops


def _column_constant(node: Node, prev: Node, n: int) -> np.ndarray | None:
    """The f32 vector [N] of a binary op of ``prev``'s [.., N] output by a constant that varies along N only (a
    scalar, [N], [1, N], ...), the constant second for a Subtract."""
    other = [(j, i.source) for j, i in enumerate(node.inputs) if i.source.node is not prev]
    if len(other) != 1 or (node.type_name == "Subtract" and other[0][0] != 1):
        return None
    c = _const(other[0][1])
    rank = prev.outputs[0].shape.rank if prev.outputs[0].shape.rank_is_static else 0
    if c is None or c.dtype != np.float32 or c.ndim > rank or not (c.size == 1 or c.shape[-1:] == (n,) == (c.size,)):
        return None
    return np.broadcast_to(c.reshape(-1), (n,)).astype(np.float32)


def _fc_post_ops(last: Node, live: set[int], n: int) -> tuple[list[Node], list[tuple[str, Any]]]:
    """The chain after an f32-output int8 FullyConnected (and its bias) that its kernel applies in registers, each op
    the sole consumer of the one before: FakeQuantizes on per-tensor grids (static QDQ puts a Q->DQ pair after the
    MatMul, then the bias Add, then another pair), Adds, Subtracts and Multiplies by constants along N, Relu."""
    nodes: list[Node] = []
    ops: list[tuple[str, Any]] = []
    while len(ts := _targets(last.outputs[0], live)) == 1:
        nxt = ts[0].node
        t = nxt.type_name
        found = _fq_group(nxt, live) if t == "FakeQuantize" else None
        if found is not None:
            step, op = found[0], ("fq", _fq_params(found[1]))
        elif t == "Relu":
            step, op = [nxt], ("relu", None)
        elif t in _CHANNEL_OPS and (v := _column_constant(nxt, last, n)) is not None:
            step, op = [nxt], (_CHANNEL_OPS[t], -v if t == "Subtract" else v)
        else:
            break
        nodes += step
        ops.append(op)
        last = step[-1]
    return nodes, ops


def _pool_window(pool: Node, g: Int8ConvGeometry) -> Int8ConvGeometry | None:
    """The window of a MaxPool over the static output of the convolution ``g`` (2-D, no dilation, no indices
    output; the end pads grown so that every window is inside the padded input), or None."""
    if len(pool.outputs) != 1 or len(pool.kernel) != 2 or g.out is None:  # type: ignore[attr-defined]
        return None
    geo = pool._geometry(pool.kernel)  # type: ignore[attr-defined]
    if tuple(geo.dilations) != (1, 1):
        return None
    outs, pbs, pes = geo.resolve(g.out)
    if not all(isinstance(v, int) and v > 0 for v in outs) or min(*pbs, *pes) < 0:
        return None
    ends = tuple(max(pe, (o - 1) * st + k - sz - pb) for o, st, k, sz, pb, pe in
                 zip(outs, geo.strides, pool.kernel, g.out, pbs, pes))  # type: ignore[attr-defined]
    return Int8ConvGeometry(tuple(pool.kernel), tuple(geo.strides), (1, 1), tuple(pbs), ends,  # type: ignore
                            tuple(g.out), tuple(outs))  # type: ignore[arg-type]


#: the ops of a convolution's chain (``_conv_post_ops``) that lead back to it through their non-constant input
_CHAIN_OPS = ("FakeQuantize", "Maximum", "Minimum", "Multiply", "Add", "Subtract", "Relu", "Clamp", "PRelu")


def _chain_conv(node: Node, live: set[int], shared: bool = False) -> Node | None:
    """The live Convolution whose chain ends at ``node`` (walking up a handful of chain ops, each the sole reader of
    the one before; ``shared``: ``node``'s own output may have other readers), or None."""
    for step in range(16):  # a chain is a handful of ops: BatchNormalization's two, Q->DQ pairs, an activation
        if node.type_name == "Convolution":
            return node if node.id in live else None
        if node.type_name not in _CHAIN_OPS or ((step or not shared) and len(_targets(node.outputs[0], live)) != 1):
            return None
        sources = [i.source.node for i in node.inputs if i.source.node.type_name != "Constant"]
        if len(sources) != 1:
            return None
        node = sources[0]
    return None


def _activation(x: Output, k: int, float_input: bool = False) -> None:
    if float_input and x.element_type is not ElementType.f32:
        raise Int8Reject(f"its input is {x.element_type}; the int8 kernel quantizes f32")
    shape = x.shape
    if not shape.rank_is_static or shape.rank < 2 or shape[-1] != k:
        raise Int8Reject(f"its input has shape {shape}; the int8 FullyConnected takes [.., M, {k}]")


def _integer_operands(node: Node, b_index: int, b_zp_index: int) -> tuple[Output, np.ndarray]:
    """(A, the int8 constant B [K, N]) of a MatMulInteger / QLinearMatMul whose B and B zero point are inputs
    ``b_index`` and ``b_zp_index``."""
    b = _const(node.inputs[b_index].source)
    if b is None:
        raise Int8Reject("its B is not a constant")
    w = _int8_weight(b, _const_or_reject(node.inputs[b_zp_index].source, "its B zero point"), "its B")
    a = node.inputs[0].source
    _activation(a, w.shape[0])
    return a, w


def _quantized_input(node: Node) -> tuple[list[Node], Output, Any]:
    """(the quantizing head to clone, the f32 x it reads, the grid) of ``node``'s input 0: a per-tensor u8/i8
    Q->DQ pair made FakeQuantize, or values already on such a grid moved by Reshape/Transpose."""
    g = node.inputs[0].source.node
    moved = g
    while moved.type_name in _MOVES:
        moved = moved.inputs[0].source.node
    grid = moved.rt_info.get(QUANTIZATION_GRID)
    if grid is None or grid.qtype not in _ACTIVATION_TYPES:
        raise Int8Reject(f"its input comes from {g.type_name} '{g.name}', not a per-tensor u8/i8 Q->DQ pair")
    if g.rt_info.get(INT8_HANDOFF):  # the bytes an int8 convolution stored (TokenizeInt8FCSnippets._hand_off)
        return [g], g.inputs[0].source, grid
    if moved is not g or g.type_name == "Subgraph":
        # values already on the grid (an int8 convolution whose last post-op is this grid's FakeQuantize), or
        # moved (ConvertQDQToFakeQuantize dropped the repeated pair): quantizing
        # them again gives back their integers, so the body is the op alone
        return [], node.inputs[0].source, grid
    head = [g]
    while head[0].type_name != "FakeQuantize":  # the Maximum/Minimum of an odd zero point's extended grid
        head.insert(0, head[0].inputs[0].source.node)
    return head, head[0].inputs[0].source, grid


def _conv_geometry(conv: Node, w: np.ndarray, x: Output, types: tuple[ElementType, ...],
                   config: TokenizationConfig | None = None) -> tuple[Int8ConvGeometry, np.ndarray]:
    """The geometry of a 2-D convolution of the NCHW ``x`` (of one of ``types``; static channels, the batch, H and
    W may be dynamic) and its int8 weight ``w`` [M, C/group, KH, KW] as the GEMM's [KH*KW*C/group, M] (rows ordered
    kh, kw, c). Groups are taken when each has a multiple of 4 input channels (whole VNNI groups: the kernel reads
    the input's own channel layout); a depthwise convolution stays f32 (one input channel per group: 3 of every 4
    multiply-adds wasted)."""
    shape = x.shape
    if not shape.rank_is_static or shape.rank != 4 or shape[1] is None or x.element_type not in types:
        raise Int8Reject(f"its input is {x.element_type} {shape}; the int8 convolution takes NCHW "
                         f"{'/'.join(t.value for t in types)} with static channels")
    group = int(conv.group)  # type: ignore[attr-defined]
    if w.ndim != 4 or (group != 1 and w.shape[1] % 4):
        raise Int8Reject(f"it is a {w.ndim - 2}-D convolution of group {group} with {w.shape[1]} input channels "
                         "per group; the int8 kernel takes 2-D, group 1 or groups of 4k channels")
    m, c, kh, kw = w.shape
    geo = conv._geometry((kh, kw))  # type: ignore[attr-defined]
    unresolved = Int8ConvGeometry((kh, kw), tuple(geo.strides), tuple(geo.dilations), (0, 0), (0, 0), None, None,
                                  group, geo)  # type: ignore[arg-type]
    h, w_ = shape[2], shape[3]
    g = unresolved if h is None or w_ is None else unresolved.resolved((int(h), int(w_)))
    # a dynamic dim counts as 1 (a dynamic image: the sizes it is made for are not known, the int8 kernel is kept)
    outs = g.out or (1, 1)
    macs = (shape[0] or 1) * outs[0] * outs[1] * kh * kw * c * m
    # ``config``: a static QDQ Conv, which otherwise runs as the target's f32 convolution (the integer forms would
    # run on their int64 references: they always go)
    if config is not None and (c < config.int8_conv_min_channels or macs < config.int8_conv_min_macs):
        raise Int8Reject(f"it has {c} input channels and {macs} multiply-adds; the target takes int8 convolutions "
                         f"from {config.int8_conv_min_channels} channels and {config.int8_conv_min_macs} on")
    return g, np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(kh * kw * c, m))


@dataclass(frozen=True)
class TokenizeInt8FCSnippets(Pass):
    """Wrap each quantized linear layer into a Completed int8 FullyConnected Subgraph (see the module docstring)."""

    name: ClassVar[str] = "tokenize-int8-fc-snippets"
    config: TokenizationConfig = field(default_factory=TokenizationConfig)

    def run(self, model: Model) -> bool:
        if not self.config.enabled or not self.config.int8_fc:
            return False
        changed = False
        live = LiveNodes(model)
        for node in model.get_ordered_ops():
            if node.type_name == "Convolution" and node.id in live.ids():
                # the convolution whose output this one adds (a ResNet's shortcut) first: it then sees the Add
                # among its readers and stores bytes for it (``_hand_off``), whichever comes first in the order
                found = self._residual_source(node, live.ids())
                if found is not None:  # its chain stops before the Add, which this convolution's takes
                    changed |= self._tokenize(model, found[0], live, stop=found[1])
            changed |= self._tokenize(model, node, live)
        return changed

    def _tokenize(self, model: Model, node: Node, live: LiveNodes, stop: Node | None = None) -> bool:
        """Fuse ``node`` (when it is a live quantized MatMul or convolution that matches) with its chain (a
        convolution's up to ``stop``, excluded)."""
        match = {"MatMul": self._static, "MatMulInteger": self._integer, "QLinearMatMul": self._qlinear,
                 "Convolution": functools.partial(self._conv, stop=stop), "QLinearConv": self._qlinear_conv,
                 "ConvInteger": self._integer_conv}.get(node.type_name)
        if match is None or node.id not in live.ids():
            return False
        try:
            head, chain, spec, x = match(node, live.ids())
        except Int8Reject as e:
            if node.type_name not in ("MatMul", "Convolution") or \
                    DEQUANTIZED_FROM in node.inputs[1].source.node.rt_info:
                node.rt_info[INT8_FC_REJECT_REASON_KEY] = str(e)
            return False
        node.rt_info.pop(INT8_FC_REJECT_REASON_KEY, None)
        self._fuse(model, head, chain, spec, x)
        live.changed()
        return True

    def _residual_source(self, conv: Node, live: set[int]) -> tuple[Node, Node] | None:
        """(the live Convolution whose chain makes the tensor ``conv``'s chain adds as its residual, that Add), if
        any."""
        try:
            _, chain, spec, _ = self._conv(conv, live, handoff=False)
        except Int8Reject:
            return None
        residual = next((v for k, v in spec.post_ops if k == "residual"), None)
        source = None if residual is None else _chain_conv(residual.node, live, shared=True)
        if source is None:
            return None
        return source, next(n for n in chain if n.type_name == "Add" and any(i.source == residual for i in n.inputs))

    @staticmethod
    def _fuse(model: Model, head: list[Node], chain: list[Node], spec: Int8FCSpec, x: Output) -> None:
        """Clone the (maybe shared) quantizing ``head`` for this layer, then make ``head + chain`` a Subgraph."""
        mapping: dict[tuple[int, int], Output] = {}
        clones = []
        for node in head:
            ins = [mapping.get((i.source.node.id, i.source.index), i.source) for i in node.inputs]
            clone = node.clone_with_new_inputs(ins)
            mapping.update({(node.id, o.index): c for o, c in zip(node.outputs, clone.outputs)})
            clones.append(clone)
        # a residual read from the quantizing head's own output stays read from outside (the kernel adds an f32
        # tensor; the head's clone lives in the Subgraph only as the quantizer)
        residuals = [v for k, v in spec.post_ops if k == "residual"]
        # a residual that is the DequantizeLinear of bytes another int8 convolution stored (``_hand_off``): the
        # DequantizeLinear is cloned in (or is the head's clone: x itself added), the Subgraph reads the bytes and
        # its kernel dequantizes them (qresidual)
        quantized: dict[int, Node] = {}
        for v in residuals:
            if v.node.rt_info.get(INT8_HANDOFF):
                same = mapping.get((v.node.id, v.index))
                quantized[id(v.node)] = same.node if same is not None else \
                    v.node.clone_with_new_inputs([i.source for i in v.node.inputs])
        for node in chain:
            for inp in node.inputs:
                if any(inp.source == r for r in residuals):
                    if id(inp.source.node) in quantized:
                        inp.replace_source(quantized[id(inp.source.node)].outputs[0])
                    continue
                new = mapping.get((inp.source.node.id, inp.source.index))
                if new is not None:
                    inp.replace_source(new)
        extra = [n for n in quantized.values() if not any(n is c for c in clones)]
        sg = _build_subgraph([*clones, *extra, *chain], 0, _live_ids(model))
        a_index = next(j for j, i in enumerate(sg.inputs) if i.source == x)

        def index(v: Output) -> int:
            return next(j for j, i in enumerate(sg.inputs) if i.source == v)

        post: list[tuple[str, Any]] = []
        for k, v in spec.post_ops:
            if k == "residual" and id(v.node) in quantized:
                grid = v.node.rt_info[QUANTIZATION_GRID]
                k, v = "qresidual", (index(v.node.inputs[0].source), float(grid.scale), int(grid.zero_point),
                                     _ACTIVATION_TYPES[grid.qtype])
            elif k == "residual":
                v = index(v)
            post.append((k, v))
        sg.rt_info[INT8_FULLY_CONNECTED] = replace(spec, a_index=a_index, post_ops=tuple(post))

    def _static(self, matmul: Node, live: set[int]) -> tuple[list[Node], list[Node], Int8FCSpec, Output]:
        if matmul.transpose_a:  # type: ignore[attr-defined]
            raise Int8Reject("it has transpose_a")
        w, w_scale = _dequantized_weight(matmul)
        head, x, grid = _quantized_input(matmul)
        _activation(x, w.shape[0], float_input=True)
        chain, bias = [matmul], None
        found = _bias(matmul, live, w.shape[1])
        if found is not None:
            chain.append(found[0])
            bias = found[1]
        post_nodes, post_ops = _fc_post_ops(chain[-1], live, w.shape[1])
        spec = Int8FCSpec(QUANTIZE, _ACTIVATION_TYPES[grid.qtype], grid.scale, grid.zero_point, w, w_scale, bias, F32,
                          post_ops=tuple(post_ops))
        return head, [*chain, *post_nodes], spec, x

    def _conv(self, conv: Node, live: set[int], handoff: bool = True, stop: Node | None = None,
              ) -> tuple[list[Node], list[Node], Int8FCSpec, Output]:
        """A static QDQ 2-D Convolution (group 1) with an int8 weight quantized per output channel. ``handoff``:
        when its chain ends on a grid that only int8 convolutions read, it stores the quantized bytes for them
        (:meth:`_hand_off`; False: only check that it matches, the graph is left as it is). ``stop``: a node its
        chain ends before (the residual Add another convolution's chain takes)."""
        src = conv.inputs[1].source.node
        qc: QuantizedConstant | None = src.rt_info.get(DEQUANTIZED_FROM)
        if qc is None:
            raise Int8Reject("its weight is not a dequantized constant")
        w = qc.data
        _int8_weight(w.reshape(w.shape[0], -1), qc.zero_point, "its weight")
        if qc.block_size or (qc.scale.size != 1 and qc.axis != 0):
            raise Int8Reject(f"its weight is quantized along axis {qc.axis}, not per output channel")
        head, x, grid = _quantized_input(conv)
        g, weight = _conv_geometry(conv, w, x, (ElementType.f32, *_ACTIVATION_TYPES), self.config)
        m = w.shape[0]
        chain, bias = [conv], None
        found = _conv_bias(conv, live, m)
        if found is not None:
            chain.append(found[0])
            bias = found[1]
        post_nodes, post_ops = _conv_post_ops(chain[-1], live, conv.outputs[0].shape, stop)
        chain += post_nodes
        source = QUANTIZED if x.element_type in _ACTIVATION_TYPES else QUANTIZE  # bytes from an int8 conv
        spec = Int8FCSpec(source, _ACTIVATION_TYPES[grid.qtype], grid.scale, grid.zero_point, weight,
                          _column_scale(qc.scale.reshape(-1) if qc.scale.size > 1 else qc.scale, m, "the weight scale"),
                          bias, F32, conv=g, post_ops=tuple(post_ops))
        if handoff and post_ops and post_ops[-1][0] == "fq":
            found = self._hand_off(chain[-1], live, g)
            if found is not None:
                out_grid = chain[-1].rt_info[QUANTIZATION_GRID]
                chain += found[:2] if found[1] is not None else found[:1]
                spec = replace(spec, output=S8 if _ACTIVATION_TYPES[out_grid.qtype] else U8, y_scale=out_grid.scale,
                               y_zero_point=out_grid.zero_point, post_ops=tuple(post_ops[:-1]), pool=found[2])
        return head, chain, spec, x

    def _hand_off(self, last: Node, live: set[int], g: Int8ConvGeometry,
                  ) -> tuple[Node, Node | None, Int8ConvGeometry | None] | None:
        """Keep the activations quantized between two int8 convolutions: when every reader of ``last`` (the
        FakeQuantize ending a convolution's chain, on a per-tensor grid) is an int8 convolution's data input, put
        ``QuantizeLinear -> DequantizeLinear`` on that grid between them (the identity on values already on it) and
        return the QuantizeLinear: the convolution's Subgraph then ends with it and stores u8/i8 (its kernel
        requantizes in registers), the readers start with the DequantizeLinear and read the bytes
        (``_quantized_input``), with no f32 tensor and no quantizing pass between them. A reader may also be the
        residual Add of an int8 convolution's chain (``_residual_add``: it adds the bytes, ``qresidual``), or a
        2-D MaxPool (static sizes, no dilation, no indices) whose readers are such: the MaxPool then pools the
        bytes (max commutes with the monotonic quantization) in this convolution's Subgraph (``Int8FCSpec.pool``).
        Returns (the QuantizeLinear, the MaxPool on its bytes or None, its window or None)."""
        from snippets_core.ir.ops.io import Constant
        from snippets_core.ir.ops.quantize import DequantizeLinear, QuantizeLinear

        grid = last.rt_info.get(QUANTIZATION_GRID)
        readers = _targets(last.outputs[0], live)
        pool, window, source = None, None, last
        if len(readers) == 1 and readers[0].node.type_name == "MaxPool":
            pool = readers[0].node
            window = _pool_window(pool, g)
            if window is None:
                return None
            readers, source = _targets(pool.outputs[0], live), pool
        if grid is None or not readers:
            return None
        for t in readers:
            if t.node.type_name == "Convolution" and t.index == 0:
                try:
                    self._conv(t.node, live, handoff=False)
                except Int8Reject:
                    return None
            elif not self._residual_add(t.node, source, live):
                return None
        scale = Constant(np.float32(grid.scale), name=f"{last.name}/handoff_scale")
        zero_point = Constant(np.asarray(grid.zero_point, grid.qtype.numpy), name=f"{last.name}/handoff_zero_point")
        q = QuantizeLinear(last.outputs[0], scale, zero_point, output_type=grid.qtype, name=f"{last.name}/quantized")
        pooled = None if pool is None else pool.clone_with_new_inputs([q.outputs[0]])
        dq = DequantizeLinear((q if pooled is None else pooled).outputs[0], scale, zero_point,
                              output_type=ElementType.f32, name=f"{source.name}/dequantized")
        dq.rt_info[QUANTIZATION_GRID] = grid
        dq.rt_info[INT8_HANDOFF] = True
        for t in readers:
            t.replace_source(dq.outputs[0])
        return q, pooled, window

    def _residual_add(self, add: Node, last: Node, live: set[int]) -> bool:
        """``add`` is the residual Add of another int8 convolution's chain that reads ``last``'s output as the
        tensor it adds (maybe its own x too): that convolution can add the bytes ``last``'s stores, dequantized in
        its kernel (``qresidual``). Its chain is found walking up the Add's other operand, each op the sole reader
        of the one before, to the Convolution."""
        if add.type_name != "Add" or len(add.inputs) != 2:
            return False
        other = [i.source for i in add.inputs if i.source.node is not last]
        node = _chain_conv(other[0].node, live) if len(other) == 1 else None
        if node is None:
            return False
        try:
            _, chain, spec, _ = self._conv(node, live, handoff=False)
        except Int8Reject:
            return False
        return add in chain and any(k == "residual" and v == last.outputs[0] for k, v in spec.post_ops)

    def _qlinear_conv(self, qlc: Node, live: set[int]) -> tuple[list[Node], list[Node], Int8FCSpec, Output]:
        """QLinearConv (2-D, group 1) with a constant int8 weight: requantized u8/i8 out, its i32 bias a post-op."""
        w = _const_or_reject(qlc.inputs[3].source, "its weight")
        _int8_weight(w.reshape(w.shape[0], -1) if w.ndim else w, _const_or_reject(qlc.inputs[5].source,
                     "its weight zero point"), "its weight")
        x = qlc.inputs[0].source
        g, weight = _conv_geometry(qlc, w, x, tuple(_ACTIVATION_TYPES))
        out_type = qlc.outputs[0].element_type
        if out_type not in _ACTIVATION_TYPES:
            raise Int8Reject(f"it outputs {out_type}")
        m = w.shape[0]
        a_scale = float(_scalar(qlc.inputs[1].source, "x_scale"))
        w_scale = _column_scale(_const_or_reject(qlc.inputs[4].source, "w_scale").reshape(-1), m, "w_scale")
        bias = None
        if len(qlc.inputs) > 8:
            b = _const_or_reject(qlc.inputs[8].source, "its bias")
            if b.size != m:
                raise Int8Reject(f"its bias has {b.size} values for {m} channels")
            # the i32 bias is added to the accumulator: in the dequantized domain it is b * x_scale * w_scale
            bias = (b.reshape(m).astype(np.float64) * a_scale * w_scale.astype(np.float64)).astype(np.float32)
        spec = Int8FCSpec(QUANTIZED, _ACTIVATION_TYPES[x.element_type], a_scale,
                          int(_scalar(qlc.inputs[2].source, "x_zero_point")), weight, w_scale, bias,
                          S8 if _ACTIVATION_TYPES[out_type] else U8, float(_scalar(qlc.inputs[6].source, "y_scale")),
                          int(_scalar(qlc.inputs[7].source, "y_zero_point")), conv=g)
        return [], [qlc], spec, x

    def _integer_conv(self, ci: Node, live: set[int]) -> tuple[list[Node], list[Node], Int8FCSpec, Output]:
        """``DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul(x_scale * w_scale) [-> Add bias]`` (2-D, group 1),
        as onnxruntime's dynamic quantizer writes a Conv."""
        w = _const_or_reject(ci.inputs[1].source, "its weight")
        _int8_weight(w.reshape(w.shape[0], -1) if w.ndim else w, _const_or_reject(ci.inputs[3].source,
                     "its weight zero point"), "its weight")
        dql = ci.inputs[0].source.node
        if dql.type_name != "DynamicQuantizeLinear" or ci.inputs[2].source != dql.outputs[2]:
            raise Int8Reject("its input is not DynamicQuantizeLinear's")
        x = dql.inputs[0].source
        g, weight = _conv_geometry(ci, w, x, (ElementType.f32,))
        chain = self._dynamic_chain(ci, dql, live, w.shape[0], _conv_bias)
        if chain is None:
            raise Int8Reject("it is not followed by Cast and the Mul by x_scale * w_scale")
        head, tail, w_scale, bias = chain
        post_nodes, post_ops = _conv_post_ops(tail[-1], live, ci.outputs[0].shape)
        return head, [ci, *tail, *post_nodes], Int8FCSpec(DYNAMIC, False, 1.0, 0, weight, w_scale, bias, F32, conv=g,
                                                          post_ops=tuple(post_ops)), x

    def _integer(self, mmi: Node, live: set[int]) -> tuple[list[Node], list[Node], Int8FCSpec, Output]:
        a, w = _integer_operands(mmi, 1, 3)
        dql = a.node
        if dql.type_name == "DynamicQuantizeLinear" and mmi.inputs[2].source == dql.outputs[2]:
            chain = self._dynamic_chain(mmi, dql, live, w.shape[1])
            if chain is not None:
                head, tail, w_scale, bias = chain
                x = dql.inputs[0].source
                _activation(x, w.shape[0], float_input=True)
                post_nodes, post_ops = _fc_post_ops(tail[-1], live, w.shape[1])
                spec = Int8FCSpec(DYNAMIC, False, 1.0, 0, w, w_scale, bias, F32, post_ops=tuple(post_ops))
                return head, [mmi, *tail, *post_nodes], spec, x
        if a.element_type not in _ACTIVATION_TYPES:
            raise Int8Reject(f"its A is {a.element_type}")
        zp = int(_scalar(mmi.inputs[2].source, "its A zero point"))
        spec = Int8FCSpec(QUANTIZED, _ACTIVATION_TYPES[a.element_type], 1.0, zp, w, np.ones(w.shape[1], np.float32),
                          None, S32)
        return [], [mmi], spec, a

    @staticmethod
    def _dynamic_chain(mmi: Node, dql: Node, live: set[int], n: int,
                       bias_of: Any = None) -> tuple[list[Node], list[Node], np.ndarray, np.ndarray | None] | None:
        """``Cast f32 -> Mul(., Mul(x_scale, w_scale)) [-> Add bias]`` after the MatMulInteger, as onnxruntime's
        dynamic quantizer writes it: (head [DQL, scale Mul], the chain after the MatMulInteger, w_scale, bias)."""
        cast = _sole_consumer(mmi.outputs[0], live, "Convert")
        if cast is None or cast.destination_type is not ElementType.f32:  # type: ignore[attr-defined]
            return None
        mul = _sole_consumer(cast.outputs[0], live, "Multiply")
        if mul is None:
            return None
        s = [i.source.node for i in mul.inputs if i.source.node is not cast]
        if len(s) != 1 or s[0].type_name != "Multiply":
            return None
        srcs = [i.source for i in s[0].inputs]
        if dql.outputs[1] not in srcs:
            return None
        w_scale = _const(srcs[1] if srcs[0] == dql.outputs[1] else srcs[0])
        if w_scale is None:
            return None
        try:
            w_scale = _column_scale(w_scale.reshape(-1) if w_scale.size > 1 else w_scale, n, "the weight scale")
        except Int8Reject:
            return None
        tail, bias = [cast, mul], None
        found = (bias_of or _bias)(mul, live, n)
        if found is not None:
            tail.append(found[0])
            bias = found[1]
        return [dql, s[0]], tail, w_scale, bias

    def _qlinear(self, qlm: Node, live: set[int]) -> tuple[list[Node], list[Node], Int8FCSpec, Output]:
        a, w = _integer_operands(qlm, 3, 5)
        if a.element_type not in _ACTIVATION_TYPES or qlm.outputs[0].element_type not in _ACTIVATION_TYPES:
            raise Int8Reject(f"it takes {a.element_type} to {qlm.outputs[0].element_type}")
        b_scale = _const(qlm.inputs[4].source)
        if b_scale is None:
            raise Int8Reject("its B scale is not a constant")
        out = S8 if _ACTIVATION_TYPES[qlm.outputs[0].element_type] else U8
        spec = Int8FCSpec(QUANTIZED, _ACTIVATION_TYPES[a.element_type], float(_scalar(qlm.inputs[1].source, "a_scale")),
                          int(_scalar(qlm.inputs[2].source, "a_zero_point")), w,
                          _column_scale(b_scale.reshape(-1) if b_scale.size > 1 else b_scale, w.shape[1], "b_scale"),
                          None, out, float(_scalar(qlm.inputs[6].source, "y_scale")),
                          int(_scalar(qlm.inputs[7].source, "y_zero_point")))
        return [], [qlm], spec, a


def is_int8_fc(node: Node) -> bool:
    """A Subgraph this Tokenizer made (a target with an int8 kernel runs it as one)."""
    return INT8_FULLY_CONNECTED in node.rt_info


__all__ = ["DYNAMIC", "F32", "INT8_FC_REJECT_REASON_KEY", "INT8_FULLY_CONNECTED", "QUANTIZE", "QUANTIZED", "S32", "S8",
           "U8", "Int8FCSpec", "TokenizeInt8FCSnippets", "is_int8_fc"]
