"""A conv-primitive Subgraph (TokenizeConvSnippets) into a :class:`ConvExecutor`.

The body is ``Parameter x -> Convolution(W Constant) -> post-op chain [-> Add(residual Parameter)]``. The leading
per-channel ops (bias Add, BatchNormalization's Multiply/Add, any Subtract/Divide by a per-channel Constant) are
folded into the packed weight and bias in float64; after the first activation or the residual, a per-channel
op becomes an ``add_c``/``mul_c`` post-op with its own packed vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
import functools
import weakref
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from snippets_core.config import CompileConfig
from snippets_core.errors import InputError, SnippetsError
from snippets_core.ir.layout import INPUT_LAYOUTS, PLAIN
from snippets_core.ir.ops.subgraph import Subgraph, release_constants
from snippets_x86_64.aligned import empty_aligned
from snippets_x86_64.cache import ShapeCache
from snippets_x86_64.conv import ConvGeometry, PostOp, global_epilogue, merge_borders, planar_fits, \
    pool_epilogue, with_dims
from snippets_x86_64.conv_executor import ConvExecutor, keep_shape, new_shape_fields, shared_shape, signature
from snippets_x86_64.global_pool import MODES as GLOBAL_MODES
from snippets_x86_64.global_pool import GlobalPool
from snippets_x86_64.pool import build_pool_executor, pool_geometry

FALLBACK_REASON_KEY = "SnippetsFallbackReason"
#: the body ops a conv primitive is built around (ConvolutionBackpropData: ONNX ConvTranspose)
CONV_OPS = ("Convolution", "ConvolutionBackpropData")
#: input sizes per spatial axis whose output size and pad a dynamic primitive keeps (``ConvPlan._axis``)
AXIS_SIZES = 1024
#: ``ConvPlan._axis``' packing of (output size, leading pad) into one int: pads are below it
AXIS_PACK = 1 << 20
#: a window's (kernel, strides, dilations, pads, auto_pad, ceil_mode) -> its per-axis caches (``ConvPlan._axes``)
_AXES: dict[tuple, tuple[dict[int, int], dict[int, int]]] = {}


class ConvUnsupported(Exception):
    """Internal: why this conv Subgraph runs on its reference."""


def _const(out: Any) -> np.ndarray:
    return np.asarray(out.node.value, dtype=np.float64)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ConvPlan:
    """What a conv Subgraph computes, independent of the input's N, H, W: the weight, the folded per-channel
    scale and shift, the post-ops after them, and the Subgraph input index of the residual (None without one)."""

    conv: Any
    w: np.ndarray
    scale: np.ndarray | None
    shift: np.ndarray
    post_ops: tuple[PostOp, ...]
    channel_data: tuple[np.ndarray, ...]
    residual: int | None
    #: ops applied to the input (NHWC, per-channel vectors along the last axis) as it is copied in
    pre_ops: tuple[tuple[str, np.ndarray | None], ...] = ()
    #: the input arrives in the plain (NCHW) layout (AssignLayouts disabled, or it left it plain)
    plain_input: bool = False
    #: a MaxPool/AvgPool that ends the chain (TokenizeConvSnippets takes one that follows the post-ops)
    pool: Any = None
    #: "mean"/"max": a global pool (ReduceMean/ReduceMax over H and W) ends the chain; its output is [N, M, 1, 1]
    global_pool: str | None = None

    def geometry(self, x_shape: tuple[int, ...]) -> ConvGeometry:
        """The convolution resolved against an input of ``x_shape`` [N, C, H, W]."""
        n, c, h, wd = x_shape
        if c != self.w.shape[1] * self.conv.group:
            raise InputError(f"convolution '{self.conv.name}' takes {self.w.shape[1] * self.conv.group} "
                                     f"input channels, the input has shape {list(x_shape)}")
        geo_w, base = self._window
        (ho, wo), (pt, pl), _ = geo_w.resolve((h, wd))
        return with_dims(base, n=n, h=h, w=wd, pt=pt, pl=pl, ho=ho, wo=wo)

    @functools.cached_property
    def _window(self) -> tuple[Any, ConvGeometry]:
        """The convolution's window (kernel, strides, dilations, pads) and its geometry with no input dims yet: a new
        shape resolves the window and fills in the dims (``geometry``)."""
        m, _, kh, kw = self.w.shape
        geo_w = self.conv._geometry(self.w.shape[2:])
        return geo_w, ConvGeometry(0, self.w.shape[1] * self.conv.group, 0, 0, m, self.conv.group, kh, kw,
                                   *geo_w.strides, *geo_w.dilations, 0, 0, 0, 0)  # type: ignore[arg-type]

    def executor(self, x_shape: tuple[int, ...], num_threads: int, dynamic: bool = False,
                 borders: tuple | None = None, alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None,
                 out_pitch: int = 0, in_pitch: int = 0, pool_borders: tuple | None = None,
                 ) -> ConvExecutor | ConvThenPool:
        """The kernel for an input of ``x_shape`` [N, C, H, W] (``dynamic``: the one for every N, H, W; ``borders``:
        a depthwise walk's border code for every size, ``conv.merge_borders``; ``out_pitch``, ``in_pitch``: see
        ConvExecutor, ``out_pitch`` that of the pooled output with a pool). With a pool, one kernel with the pool as
        its epilogue when it covers it (``pool_epilogue``, ``global_epilogue``; on a dynamic shape a pool whose
        windows are disjoint and whole at every size, ``dynamic_pool_reason``: the pooled rows come from the work
        table, the global pool's slots and finish from the table and the finish's args), else the conv and the pool
        kernel in turn (``pool_borders``: a dynamic pool walk's border code for every size)."""
        geo = self.geometry(x_shape)
        if self.pool is None and self.global_pool is None:
            return ConvExecutor(geo, self.w, self.scale, self.shift, self.post_ops, self.channel_data,
                                num_threads=num_threads, alloc=alloc, pre_ops=self.pre_ops,
                                plain_input=self.plain_input, dynamic=dynamic, borders=borders,
                                out_pitch=out_pitch, in_pitch=in_pitch)
        # a global pool's [N, M] output is never a Concat's slice (its row sums and finish kernel are unpitched)
        assert not (out_pitch and self.global_pool is not None), "a global pool epilogue writes no Concat slice"
        out = (geo.n, geo.m, geo.ho, geo.wo)
        if self.pool is not None:
            pgeo, pads = pool_geometry(self.pool, out)
            epi, why = pool_epilogue(geo, pgeo, pads, self.post_ops)
            if dynamic and not why:
                why = dynamic_pool_reason(self.pool)
            fused = replace(geo, pool=None if why else epi)
        else:
            with_global, why = global_epilogue(geo, self.global_pool)
            fused = with_global or geo
        ex = ConvExecutor(fused, self.w, self.scale, self.shift, self.post_ops, self.channel_data,
                          num_threads=num_threads, alloc=alloc, pre_ops=self.pre_ops, plain_input=self.plain_input,
                          dynamic=dynamic, borders=borders, out_pitch=0 if why else out_pitch, in_pitch=in_pitch)
        if not why:
            return ex
        if self.pool is not None:
            return ConvThenPool(ex, build_pool_executor(self.pool, out, num_threads, alloc=alloc, out_pitch=out_pitch,
                                                        dynamic=dynamic, borders=pool_borders), why)
        return ConvThenPool(ex, GlobalPool(out, self.global_pool, num_threads=num_threads, alloc=alloc), why)

    def dynamic_executor(self, stand_in: tuple[int, ...], num_threads: int, dims: Sequence[int | None],
                         alloc: Callable[[tuple[int, ...]], np.ndarray] | None = None, out_pitch: int = 0,
                         in_pitch: int = 0) -> ConvExecutor | ConvThenPool:
        """The executor of every N, H, W (``for_shape`` makes the others from it), made at ``stand_in``; ``dims``:
        the input's dims, None where dynamic (the border code of a depthwise or pool walk is sampled along those);
        ``out_pitch``, ``in_pitch`` as ``executor``'s (a Concat's channels: static whatever N, H, W)."""
        borders = sampled_borders(dims, self.geometry, stand_in)
        pool_borders = None
        if self.pool is not None:  # a pool kernel after the conv (not its epilogue): its walk's border code
            g = self.geometry(stand_in)
            pool_borders = sampled_borders(dims, lambda shape: pool_geometry(self.pool, shape)[0],
                                           (g.n, g.m, g.ho, g.wo))
        return self.executor(stand_in, num_threads, dynamic=True, borders=borders, alloc=alloc,
                             pool_borders=pool_borders, out_pitch=out_pitch, in_pitch=in_pitch)

    def for_shape(self, first: ConvExecutor | ConvThenPool, x_shape: tuple[int, ...]) -> ConvExecutor | ConvThenPool:
        """The executor for ``x_shape`` from ``first``, the one made for another shape (``executor(dynamic=True)``):
        its kernels and packed weights, this shape's tables; its pool fused or not as in ``first``. The geometry and
        tables are found by the primitive's signature (``_signature``) when another primitive of it met the shape."""
        if not isinstance(first, ConvThenPool):
            sig = first.__dict__.get("shape_sig")
            if sig is None:
                sig = first.shape_sig = self._signature(first)
            made = shared_shape(sig, x_shape)
            if made is not None:
                return first.with_fields(made.geo, made)
            geo = self.shape_geometry(first, x_shape)
            # (``_SHAPES`` is the one cache of this signature's shapes: no second lookup by the geometry's hash)
            ex = first.with_fields(geo, new_shape_fields(first, geo))
            keep_shape(sig, x_shape, ex)
            return ex
        if isinstance(first, ConvThenPool):
            geo = self.shape_geometry(first.conv, x_shape)  # (its pool is not the conv's epilogue)
            conv = first.conv.with_fields(geo, None)
            out = (geo.n, geo.m, geo.ho, geo.wo)
            if self.pool is not None:
                pool = build_pool_executor(self.pool, out, first.conv.num_threads, prepared=first.pool)
            else:
                pool = GlobalPool(out, self.global_pool, num_threads=first.conv.num_threads, prepared=first.pool)
            return ConvThenPool(conv, pool, first.reason)
        return first.for_shape(self._epilogue_geometry(first, self.geometry(x_shape)))

    def shape_geometry(self, first: ConvExecutor, x_shape: tuple[int, ...]) -> ConvGeometry:
        """The geometry ``first.for_shape`` makes for ``x_shape`` (the window resolved, ``first``'s epilogue, output
        pitch and planar choice), as a few integer operations: what depends on the shape is N, H, W, the pads and the
        output rows and columns (and a pool epilogue's pooled ones), each axis's from its size alone (``_axis``:
        cached per size, so a new image whose H or W another image had resolves nothing); the rest is ``first``'s.
        ``test_dynamic_cnn_shapes`` checks it against the slow path over many random shapes."""
        n, c, h, w = x_shape
        g = first.geo
        if c != g.c:
            return self.geometry(x_shape)  # (the typed error naming the channels)
        ho, pt = self._axis(0, h)
        wo, pl = self._axis(1, w)
        pk = g.pool
        if pk is None:
            return with_dims(g, n=n, h=h, w=w, pt=pt, pl=pl, ho=ho, wo=wo)
        # disjoint whole windows, no padding (``dynamic_pool_reason``)
        return with_dims(g, n=n, h=h, w=w, pt=pt, pl=pl, ho=ho, wo=wo,
                         pool=replace(pk, ho=max(0, (ho - pk.kh) // pk.sh + 1), wo=max(0, (wo - pk.kw) // pk.sw + 1)))

    @functools.cached_property
    def _axes(self) -> tuple[dict[int, int], dict[int, int]]:
        """Per spatial axis: input size -> output size and leading pad in one int (``_axis``), the window's
        arithmetic; shared by the primitives of one window (``_AXES``: a new image size resolves each axis once for
        a model's 1x1 convolutions, not once per primitive)."""
        w = self._window[0]
        spec = (w.kernel, w.strides, w.dilations, w.pads_begin, w.pads_end, w.auto_pad, w.ceil_mode)
        axes = _AXES.get(spec)
        if axes is None:
            axes = _AXES.setdefault(spec, ({}, {}))
        return axes

    def _axis(self, i: int, size: int) -> tuple[int, int]:
        """(output size, leading pad) of spatial axis ``i`` at input ``size``: the window's ``axis`` (as
        ``geometry``'s ``resolve``), kept per size (a few hundred sizes at most: a bound keeps a stream of sizes from
        growing it) as ``out * AXIS_PACK + pad``: an int, not a tuple for the collector to count per new size."""
        cache = self._axes[i]
        got = cache.get(size)
        if got is None:
            out, pad, _ = self._window[0].axis(i, size)
            if len(cache) >= AXIS_SIZES:
                cache.clear()
            assert 0 <= pad < AXIS_PACK, pad
            got = cache[size] = int(out) * AXIS_PACK + pad  # type: ignore[operator]
        return divmod(got, AXIS_PACK)

    @staticmethod
    def _epilogue_geometry(first: ConvExecutor, geo: ConvGeometry) -> ConvGeometry:
        """``geo`` with ``first``'s pool or global pool epilogue."""
        if first.geo.pool is not None:  # disjoint whole windows, no padding (``dynamic_pool_reason``)
            pk = first.geo.pool
            return with_dims(geo, pool=replace(pk, ho=max(0, (geo.ho - pk.kh) // pk.sh + 1),
                                               wo=max(0, (geo.wo - pk.kw) // pk.sw + 1)))
        if first.geo.global_pool is not None:
            return with_dims(geo, global_pool=first.geo.global_pool)
        return geo

    def _signature(self, first: ConvExecutor) -> int:
        """What, besides the input shape, ``first``'s geometry and ``ShapeFields`` for a shape depend on: the window
        (pads included), the geometry without its dims, the epilogue, the input's layout and the output's pitch, the
        threads, the walk's border code and the packed weight's size and blocks."""
        geo_w, base = self._window
        g = first.geo
        spec = ((geo_w.kernel, geo_w.strides, geo_w.dilations, geo_w.pads_begin, geo_w.pads_end, geo_w.auto_pad,
                 geo_w.ceil_mode), base, None if g.pool is None else replace(g.pool, ho=0, wo=0), g.global_pool,
                g.planar, g.out_pitch, first.num_threads, first.dynamic, first.borders if g.depthwise else None,
                first.packed.nbytes, tuple(first.offsets))
        return signature(spec)


def dynamic_pool_reason(pool: Any) -> str:
    """Why the pool ``pool`` after a conv with a dynamic H or W is not its kernel's epilogue at every size ("" when
    it is): its windows must be disjoint and whole whatever the size (strides at least the window, no padding, no
    ``ceil_mode``), and at most 3 rows tall (the kernel reads a window's conv rows as one table pitch times 0, 1, 2:
    an index register's scales)."""
    geo_w = pool._geometry(pool.kernel)
    kh, kw = pool.kernel
    if pool.ceil_mode:
        return "ceil_mode on a dynamic size: a partial window at some sizes"
    if pool.auto_pad in ("same_upper", "same_lower") or (pool.auto_pad != "valid"
                                                         and any((*geo_w.pads_begin, *geo_w.pads_end))):
        return (f"padded windows ({pool.auto_pad}, pads {(*geo_w.pads_begin, *geo_w.pads_end)}): the epilogue pools "
                f"whole windows")
    if any(s < k for s, k in zip(geo_w.strides, pool.kernel)):
        return (f"overlapping windows ({kh}x{kw} stride {geo_w.strides[0]}x{geo_w.strides[1]}) on a dynamic size: the "
                f"epilogue pools disjoint windows")
    if kh > 3:
        return f"a window of {kh} rows on a dynamic size: the epilogue addresses at most 3 conv rows by the table pitch"
    return ""


class ConvThenPool:
    """A conv primitive whose pool the kernel's epilogue does not cover: the conv kernel, then the pool kernel on
    its output, in one step (``reason`` says why they are two kernels; describe() shows it)."""

    def __init__(self, conv: ConvExecutor, pool: Any, reason: str) -> None:
        self.conv, self.pool, self.reason = conv, pool, reason
        self.geo = conv.geo

    @property
    def reorders(self) -> int:
        """Layout changes at the two kernels' edges so far (0 when producers and consumers agree on NHWC)."""
        return self.conv.reorders + self.pool.reorders

    def run(self, x: np.ndarray, residual: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """``out``: a Concat's NHWC slice the pool writes (its executor made with that pitch)."""
        y = self.conv.run(x, residual)
        return self.pool.run(y) if out is None else self.pool.run(y, None, out)

    def describe(self) -> str:
        pool = self.pool.describe() if isinstance(self.pool, GlobalPool) else describe_geometry(self.pool.geo)
        return f"{describe_geometry(self.conv.geo)}, then {pool} (not fused: {self.reason})"


def plan_conv(sg: Subgraph) -> ConvPlan:
    """Read the conv Subgraph's body: fold the leading per-channel ops, translate the rest into post-ops."""
    ops = [n for n in sg.body.get_ordered_ops() if n.type_name not in ("Parameter", "Constant", "Result")]
    params = list(sg.body.parameters)
    k = next((i for i, n in enumerate(ops) if n.type_name in CONV_OPS), None)
    if k is None:
        raise ConvUnsupported("the body has no Convolution")
    conv, chain = ops[k], ops[k + 1:]
    pre = _pre_ops(ops[:k], params[0], conv)
    # the weight as stored (f32): pack_weights folds in float64 one panel at a time, and the packing cache hashes it
    w = np.asarray(conv.inputs[1].source.node.value)
    # a ConvTranspose's weight is [C, M/group, KH, KW]
    m = w.shape[1] * conv.group if conv.type_name == "ConvolutionBackpropData" else w.shape[0]
    scale, shift = np.ones(m), np.zeros(m)
    folding = True
    post_ops: list[PostOp] = []
    channel_data: list[np.ndarray] = []
    residual: int | None = None
    silu_of: Any = None
    pool: Any = None
    global_pool: str | None = None
    current = conv.outputs[0]
    for op in chain:
        t = op.type_name
        other = [i.source for i in op.inputs if i.source is not current]
        if t in ("Add", "Subtract", "Multiply", "Divide") and other and other[0].node.type_name == "Constant":
            v = np.broadcast_to(_const(other[0]).reshape(-1), (m,)) if _const(other[0]).size == 1 \
                else _const(other[0]).reshape(m)
            if t == "Subtract":
                t, v = "Add", -v
            elif t == "Divide":
                t, v = "Multiply", 1.0 / v
            if folding:
                if t == "Add":
                    shift = shift + v
                else:
                    scale, shift = scale * v, shift * v
            else:
                post_ops.append(PostOp("add_c" if t == "Add" else "mul_c", index=len(channel_data)))
                channel_data.append(v)
        elif t == "Add":
            residual = params.index(other[0].node)  # type: ignore[arg-type]
            post_ops.append(PostOp("residual"))
            folding = False
        elif t == "Relu":
            post_ops.append(PostOp("relu"))
            folding = False
        elif t == "Clamp":
            post_ops.append(PostOp("clamp", lo=float(op.min), hi=float(op.max)))  # type: ignore[attr-defined]
            folding = False
        elif t == "PRelu":
            slope = _const(op.inputs[1].source)
            if slope.size == 1:
                post_ops.append(PostOp("prelu", alpha=float(slope.reshape(-1)[0])))
            else:
                post_ops.append(PostOp("prelu_c", index=len(channel_data)))
                channel_data.append(slope.reshape(m))
            folding = False
        elif t == "HSwish":
            post_ops.append(PostOp("hswish"))
            folding = False
        elif t == "Sigmoid" and silu_of is None and _is_silu_gate(op, chain):
            silu_of = op  # x * Sigmoid(x): the Multiply that follows applies it as one swish
            continue
        elif t == "Sigmoid":
            post_ops.append(PostOp("sigmoid"))
            folding = False
        elif t == "Multiply" and silu_of is not None and any(i.source is silu_of.outputs[0] for i in op.inputs):
            post_ops.append(PostOp("swish", alpha=1.0))
            silu_of = None
            folding = False
        elif t == "Swish":
            beta = 1.0 if len(op.inputs) == 1 else float(_const(op.inputs[1].source).reshape(-1)[0])
            post_ops.append(PostOp("swish", alpha=beta))
            folding = False
        elif t in ("MaxPool", "AvgPool") and op is chain[-1]:
            pool = op
        elif t in ("Reshape", *GLOBAL_MODES):  # a global pool ends the chain (global_pool_chain's ops)
            reductions = [o.type_name for o in chain[chain.index(op):] if o.type_name in GLOBAL_MODES]
            if len(reductions) != 1:
                raise ConvUnsupported(f"{t} '{op.name}' is not part of a global pool ending the chain")
            global_pool = GLOBAL_MODES[reductions[0]]
            break
        else:
            raise ConvUnsupported(f"post-op {t} '{op.name}' has no conv-kernel form")
        current = op.outputs[0]
    identity = bool(np.all(scale == 1.0))
    plain = tuple(sg.rt_info.get(INPUT_LAYOUTS, ()))[:1] in ((), (PLAIN.name,))
    return ConvPlan(conv, w, None if identity else scale, shift, tuple(post_ops), tuple(channel_data), residual,
                    pre, plain, pool, global_pool)


def _pre_ops(ops: list[Any], x: Any, conv: Any) -> tuple[tuple[str, np.ndarray | None], ...]:
    """The ops between the input and the Convolution as (numpy ufunc name, per-channel vector or None)."""
    out: list[tuple[str, np.ndarray | None]] = []
    current = x.outputs[0]
    c = conv.inputs[0].shape[1]
    for op in ops:
        if op.type_name == "Relu":
            out.append(("maximum", None))
        else:
            const = next(i.source for i in op.inputs if i.source is not current)
            v = np.broadcast_to(_const(const).reshape(-1), (c,)).astype(np.float32)
            out.append(({"Add": "add", "Subtract": "subtract", "Multiply": "multiply", "Divide": "divide"}
                        [op.type_name], v))
        current = op.outputs[0]
    if conv.inputs[0].source is not current:
        raise ConvUnsupported("the Convolution does not read the end of its input chain")
    return tuple(out)


def _is_silu_gate(sigmoid: Any, chain: list[Any]) -> bool:
    """``sigmoid`` is the gate of ``x * Sigmoid(x)``: the next op multiplies its input by it."""
    k = chain.index(sigmoid)
    if k + 1 >= len(chain) or chain[k + 1].type_name != "Multiply":
        return False
    srcs = {id(i.source.node) for i in chain[k + 1].inputs}
    return srcs == {id(sigmoid), id(sigmoid.inputs[0].source.node)}


def reads_planar(sg: Subgraph) -> bool:
    """The conv Subgraph ``sg`` reads its data input best in the plain layout: a stem with few input channels,
    whose kernel walks planar NCHW rows (``planar_fits``), so an NHWC reorder before it would be a wasted pass."""
    conv = next((op for op in sg.body_ops if op.type_name == "Convolution"), None)
    x = None if conv is None else conv.inputs[0].shape
    if x is None or not conv.inputs[1].shape.is_static or not x.rank_is_static or x.rank != 4 \
            or x[1] is None:  # the channels must be static, N, H, W need not
        return False
    c = x[1]
    _, _, kh, kw = conv.inputs[1].shape.to_tuple()
    return planar_fits(c, conv.group, kh, kw)


def compile_conv_subgraph(sg: Subgraph, config: CompileConfig) -> Any:
    """``run(inputs) -> [y]`` for a conv-primitive Subgraph, or None (the reason in ``sg.rt_info``)."""
    if sg.rt_info.get("SnippetsConcat"):
        from snippets_x86_64.conv_concat import ChannelConcat, slots_for

        # its producers, compiled before it, have bound their slices (a dynamic N, H, W too: the pitch is the
        # channels); a dynamic shape copies the others with numpy (the JIT row copy is made per shape)
        static = sg.outputs[0].shape.is_static
        cat = ChannelConcat(slots_for(sg), config.num_threads if static else 1)
        sg.rt_info["SnippetsConvKernel"] = cat.describe()

        def run_concat(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
            return [cat.run(inputs)]

        run_concat.executor = cat  # type: ignore[attr-defined]
        return run_concat
    if sg.rt_info.get("SnippetsChannelShuffle"):
        return _compile_channel_shuffle(sg, config)
    if sg.rt_info.get("SnippetsPooling"):
        from snippets_x86_64.pool import POOL_MODES

        # a pool alone, or a global pool's reduction between the Reshapes of MoveReductionAxesLast
        pool = next(op for op in sg.body_ops if op.type_name != "Reshape")
        if not sg.body.parameters[0].outputs[0].shape.is_static:
            return DynamicPool(sg, pool, config.num_threads)
        into = _concat_slice(sg) if pool.type_name in ("MaxPool", "AvgPool") else None
        pex = build_pool_executor(pool, sg.body.parameters[0].outputs[0].shape.to_tuple(), config.num_threads,
                                  sg.outputs[0].shape.to_tuple(), out_pitch=into.pitch if into else 0)
        sg.rt_info["SnippetsConvKernel"] = describe_geometry(pex.geo) if isinstance(pex, ConvExecutor) \
            else pex.describe()

        def run_pool(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
            return [pex.run(inputs[0])]

        if into is not None:
            sg.rt_info["SnippetsConvKernel"] += into.describe()
            run_pool = into.bind(pex)

        run_pool.executor = pex  # type: ignore[attr-defined]
        return run_pool
    try:
        plan = plan_conv(sg)
    except ConvUnsupported as e:
        sg.rt_info[FALLBACK_REASON_KEY] = str(e)
        return None
    x_port = sg.body.parameters[0].outputs[0].shape
    threads = config.num_threads
    if plan.conv.type_name == "ConvolutionBackpropData":
        return _compile_conv_transpose(sg, plan, threads)
    if x_port.is_static:
        from snippets_x86_64.conv_concat import output_pitch

        # no slice for a residual (the kernel would read it with the slice's pitch) nor a global pool ([N, M])
        into = _concat_slice(sg) if plan.residual is None and plan.global_pool is None else None
        # an input that is a channel slice of a Concat's output (DenseNet's chain): the input copy reads its pitch
        ex = plan.executor(x_port.to_tuple(), threads, out_pitch=into.pitch if into else 0,
                           in_pitch=output_pitch(sg.inputs[0].source))
        kernel = ex.describe() if isinstance(ex, ConvThenPool) else describe_geometry(ex.geo)
        sg.rt_info["SnippetsConvKernel"] = kernel + (into.describe() if into else "")
        # the kernel reads only its packed copy: the weights are held once (a static shape never runs the body)
        release_constants(sg, "packed into the conv kernel's weights")
        residual = plan.residual
        out_shape = sg.outputs[0].shape.to_tuple()
        decided: list[bool] = []

        def run(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
            if not decided:  # on the first call: every consumer is compiled by then
                decided.append(True)
                if may_defer(sg, ex):
                    ex.defer = True
            y = ex.run(inputs[0], None if residual is None else inputs[residual])
            # a global pool's [N, M, 1, 1] as the body's Reshape has it ([N, M]): the same memory
            return [y if y.shape == out_shape else y.reshape(out_shape)]

        if into is not None:
            run = into.bind(ex)
        else:
            WAITING_READERS.add(sg)
            # what native_steps needs to run the step without this closure: the residual's input, the output's shape
            run.residual, run.out_shape = residual, out_shape  # type: ignore[attr-defined]

        run.executor = ex  # type: ignore[attr-defined]
        if plan.pool is not None or plan.global_pool is not None:  # describe() shows whether the pool became the kernel's epilogue, and if not why
            run.describe = lambda: sg.rt_info["SnippetsConvKernel"]  # type: ignore[attr-defined]
        return run
    return DynamicConv(sg, plan, threads)


#: static conv primitives whose step reads its inputs only after waiting for a deferred call (``ConvExecutor.run``:
#: its kernels go through the native pool, its numpy copies wait first)
WAITING_READERS: weakref.WeakSet[Subgraph] = weakref.WeakSet()


def may_defer(sg: Subgraph, ex: ConvExecutor) -> bool:
    """Whether ``ex``'s calls may return before their workers finish (``NativePool.run_deferred``): it splits over
    threads and every consumer of its output is a static conv primitive (a model output, a pool, an eltwise kernel
    or a numpy reference could read the output before it is written)."""
    consumers = sg.consumers()
    return isinstance(ex, ConvExecutor) and len(ex.chunks) > 1 and len(sg.outputs) == 1 and bool(consumers) and all(
        c in WAITING_READERS for c in consumers)


def _compile_conv_transpose(sg: Subgraph, plan: ConvPlan, threads: int) -> Any:
    """``run(inputs) -> [y]`` for a ConvTranspose primitive, or None (the reason in ``sg.rt_info``)."""
    from snippets_x86_64.conv_transpose import compile_conv_transpose

    ex, what = compile_conv_transpose(sg, plan, threads)
    if ex is None:
        sg.rt_info[FALLBACK_REASON_KEY] = what
        return None
    sg.rt_info["SnippetsConvKernel"] = what
    release_constants(sg, "packed into the ConvTranspose kernel's weights")
    if isinstance(ex, ShapeCache):  # dynamic N, H, W: one executor per shape from the first one's weights, kernels
        return ex
    residual = plan.residual

    def run(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [ex.run(inputs[0], None if residual is None else inputs[residual])]

    run.executor = ex  # type: ignore[attr-defined]
    return run


def _concat_slice(sg: Subgraph) -> Any:
    """A :class:`ConcatSlice` when the primitive ``sg`` can write its output into a channel Concat's, else None."""
    from snippets_x86_64.conv_concat import ConcatSlice, concat_slice

    found = concat_slice(sg)
    return None if found is None else ConcatSlice(*found)


def _compile_channel_shuffle(sg: Subgraph, config: CompileConfig) -> Any:
    """``run(inputs) -> [y]`` for a channel shuffle (TokenizeConvSnippets): a JIT permutation within each NHWC
    pixel."""
    from snippets_core.tokenization.tokenize_conv_snippets import CHANNEL_PERMUTATION, channel_permutation
    from snippets_x86_64.channel_shuffle import ChannelPermute, DynamicPermute

    perm = sg.rt_info.get(CHANNEL_PERMUTATION) or channel_permutation(list(sg.body_ops))
    if perm is None:
        raise ConvUnsupported(f"{sg.name}: its body is not a channel permutation")
    x = sg.body.parameters[0].outputs[0].shape
    if not x.is_static:  # one kernel for every N, H, W (it walks pixels)
        sg.rt_info["SnippetsConvKernel"] = f"channel permute of {len(perm)} channels (dynamic N, H, W)"
        permute = DynamicPermute(perm, stand_in_shape(sg, (1, 1), None), config.num_threads)
        permute.follow(sg)
        return permute
    ex = ChannelPermute(perm, x.to_tuple(), config.num_threads)
    sg.rt_info["SnippetsConvKernel"] = ex.describe()

    def run_shuffle(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [ex.run(inputs[0])]

    run_shuffle.executor = ex  # type: ignore[attr-defined]
    return run_shuffle


class DynamicConv(ShapeCache):
    """A conv primitive with a dynamic N, H or W: one shape-agnostic kernel (``kernel_key``: a dense convolution's
    row geometry comes from its work table; a depthwise walk's interior too, its kernel keyed on its border taps,
    the same for most sizes) and weights packed once; a new input shape makes only its work table, copy header and
    padded buffer (numpy, cached per shape). The weights are held once, packed: the body's constants are released
    as a static conv's are. An empty batch runs the kernel on no rows; a residual whose run-time shape broadcasts to
    the output's (a dynamic dim of 1) is expanded first (the kernel reads the residual with the output's layout)."""

    kind = "one conv kernel for every N, H, W (a depthwise walk: the border code of every size)"

    def __init__(self, sg: Subgraph, plan: ConvPlan, num_threads: int) -> None:
        from snippets_x86_64.conv_concat import output_pitch

        dims = sg.body.parameters[0].outputs[0].shape.dims or (None,) * 4
        stand_in = stand_in_shape(sg, plan.w.shape[2:], plan.conv._geometry(plan.w.shape[2:]))
        # a channel slice of a Concat's output (as a static conv: no residual, no global pool), and an input that
        # is one (DenseNet's chain: the input copy reads the pitch)
        self.into = into = _concat_slice(sg) if plan.residual is None and plan.global_pool is None else None
        out_pitch, in_pitch = into.pitch if into else 0, output_pitch(sg.inputs[0].source)
        super().__init__(lambda shape, first: plan.dynamic_executor(shape, num_threads, dims, out_pitch=out_pitch,
                                                                    in_pitch=in_pitch)
                         if first is None else plan.for_shape(first, shape))
        self.sg, self.plan, self.num_threads = sg, plan, num_threads
        self.flat = sg.outputs[0].shape.rank_is_static and sg.outputs[0].shape.rank == 2
        # the kernels are made now, as a static shape's are, on a small stand-in shape (the weights packed with them)
        self._first = self.make(stand_in, None)
        #: the pool after the conv: its kernel's epilogue, or its own kernel and why (describe() says which)
        self.epilogue = _describe_epilogue(self._first)
        sg.rt_info["SnippetsConvKernel"] = f"conv on runtime row geometry: one kernel for every N, H, W{self.epilogue}"
        if into is not None:
            into.claim()
            self.epilogue += into.describe()
            sg.rt_info["SnippetsConvKernel"] += into.describe()
        self.follow(sg)
        release_constants(sg, "packed into the conv kernel's weights")
        # the plan keeps the weight's shape only (a zero-stride placeholder): the packed copy is the one held
        w = plan.w
        self.plan = plan = dataclasses.replace(plan, w=np.broadcast_to(np.zeros((), w.dtype), w.shape))

    def describe(self) -> str:
        return super().describe() + self.epilogue

    def output_shape(self, shape: tuple[int, ...], ex: Any) -> tuple[int, ...] | None:
        if self.into is not None:  # a slice of a Concat's output: what reads it reads the Concat's
            return None
        y = (ex.pool if isinstance(ex, ConvThenPool) else ex).result_shape
        return y[:2] if self.flat else y

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        if x.shape[0] == 0 and self.plan.global_pool is not None:  # an empty batch: no pixel for a global pool
            m = self.plan.w.shape[0]
            return [empty_aligned((0, m) if self.flat else (0, m, 1, 1))]
        ex = self.executor(x.shape)
        res = None if self.plan.residual is None else inputs[self.plan.residual]
        g = ex.geo
        out = (g.n, g.m, g.ho, g.wo)
        if res is not None and res.shape != out:
            try:
                res = np.broadcast_to(res, out)  # the NHWC copy in ``run`` makes it whole (counted in reorders)
            except ValueError:
                raise InputError(f"convolution '{self.plan.conv.name}': its residual of shape {list(res.shape)} "
                                 f"does not broadcast to its output's {list(out)}") from None
        if self.into is not None:
            return [ex.run(x, None, self.into.out(_out_dims(ex)))]
        y = ex.run(x, res)
        # a global pool's [N, M, 1, 1] as the body's Reshape may have it ([N, M]): the same memory
        return [y.reshape(y.shape[:2]) if self.flat else y]


def _out_dims(ex: ConvExecutor | ConvThenPool) -> tuple[int, int, int]:
    """The N, H, W of what ``ex`` stores (the pooled map with a pool)."""
    g = ex.pool.geo if isinstance(ex, ConvThenPool) else ex.geo
    return g.n, g.out_h, g.out_w


def _describe_epilogue(ex: ConvExecutor | ConvThenPool) -> str:
    """What a dynamic conv primitive does with the pool after it: "" (none), its kernel's epilogue, or the pool's
    kernel after it and why."""
    if isinstance(ex, ConvThenPool):
        return f"; then the pool's kernel (not fused: {ex.reason})"
    g = ex.geo
    if g.pool is not None:
        return f"; {g.pool.mode}pool {g.pool.kh}x{g.pool.kw} epilogue on the pooled rows"
    if g.global_pool is not None:
        return f"; global {g.global_pool} pool epilogue (row slots and finish on runtime geometry)"
    return ""


class DynamicPool(ShapeCache):
    """A pooling primitive with a dynamic N, H or W: a MaxPool/AvgPool walks on runtime geometry like a depthwise
    convolution (one kernel with the border code of every size, never one per N); a global pool's kernel reads the
    pixel count from its table, an LRN's walks pixels: one kernel for every shape."""

    kind = "one pooling kernel for every N, H, W (a window walk: the border code of every size)"

    def __init__(self, sg: Subgraph, pool: Any, num_threads: int) -> None:
        from snippets_x86_64.pool import POOL_MODES, build_pool_executor, pool_geometry

        flat = sg.outputs[0].shape.rank_is_static and sg.outputs[0].shape.rank == 2  # a global pool into [N, C]

        window = tuple(getattr(pool, "kernel", (1, 1)))
        windowed = pool.type_name in POOL_MODES and len(window) == 2
        stand_in = stand_in_shape(sg, window, pool._geometry(window) if windowed else None)
        dims = sg.body.parameters[0].outputs[0].shape.dims or (None,) * 4
        borders = sampled_borders(dims, lambda shape: pool_geometry(pool, shape)[0], stand_in) if windowed else None
        #: a MaxPool/AvgPool writing its channels into a Concat's output (the pitch: the Concat's channels)
        self.into = into = _concat_slice(sg) if windowed else None

        def make(shape: tuple[int, ...], first: Any) -> Any:
            out = (shape[0], shape[1]) if flat else None
            return build_pool_executor(pool, shape, num_threads, out, dynamic=True, prepared=first, borders=borders,
                                       out_pitch=into.pitch if into else 0)

        super().__init__(make)
        self.sg = sg
        sg.rt_info["SnippetsConvKernel"] = f"{pool.type_name} on runtime geometry (dynamic N, H, W)"
        self._first = self.make(stand_in, None)  # the kernels made now
        if into is not None:
            into.claim()
            sg.rt_info["SnippetsConvKernel"] += into.describe()
        self.follow(sg)

    def output_shape(self, shape: tuple[int, ...], ex: Any) -> tuple[int, ...] | None:
        return None if self.into is not None else ex.result_shape

    def __call__(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if inputs[0].size == 0:  # an empty batch or image: nothing for a kernel to do, the reference says what it is
            from snippets_core.ir.evaluate import evaluate_node

            return list(evaluate_node(self.sg, list(inputs)))
        ex = self.executor(inputs[0].shape)
        if self.into is not None:
            return [ex.run(inputs[0], None, self.into.out(_out_dims(ex)))]
        return [ex.run(inputs[0])]


def stand_in_shape(sg: Subgraph, window: Sequence[int], geo: Any) -> tuple[int, ...]:
    """An input shape to make a dynamic primitive's kernels with at compile time: the static dims as they are, N = 1,
    H and W wide enough for interior windows (16 past the window's extent and its pads)."""
    shape = sg.body.parameters[0].outputs[0].shape
    extents = [(k - 1) * (geo.dilations[i] if geo is not None else 1) + 1 for i, k in enumerate(window)]
    dims = [1, shape[1]] + [4 * e + 16 for e in extents]
    return tuple(d if d is not None else dims[i] for i, d in enumerate(shape.dims))  # type: ignore[union-attr]


def sampled_borders(dims: Sequence[int | None], geometry: Callable[[tuple[int, ...]], ConvGeometry],
                    stand_in: tuple[int, ...]) -> tuple | None:
    """The border code (``merge_borders``) of a depthwise or pooling walk for every size: its geometry at the
    stand-in shape and at every size ``border_sizes`` gives each dynamic H, W (``dims[axis]`` None). None for a
    dense convolution (no border code)."""
    geo = geometry(stand_in)
    if not geo.depthwise:
        return None
    geos = [geo]
    for axis, extent, stride in ((2, (geo.kh - 1) * geo.dh + 1, geo.sh), (3, (geo.kw - 1) * geo.dw + 1, geo.sw)):
        if dims[axis] is None:
            for size in border_sizes(extent, stride):
                try:
                    g = geometry(tuple(size if i == axis else d for i, d in enumerate(stand_in)))
                except SnippetsError:  # a size the window does not fit even padded: no output, no code
                    continue
                if g.ho > 0 and g.wo > 0:
                    geos.append(g)
    return merge_borders(geos)


def border_sizes(extent: int, stride: int) -> range:
    """Every size of one axis whose border taps (``dw_borders``) some other size may not repeat: 1 to
    ``extent + 2 * stride``. Why that covers all: the first output past the leading pads starts inside within
    ``stride - 1`` pixels, so every size from ``extent + stride - 1`` on has an interior output; from there on, a size
    ``stride`` larger adds one interior output and leaves the leading and trailing taps (relative to the image's
    edges) as they were, so the sizes past that repeat one of the ``stride`` before. The smaller sizes are the tiny
    maps whose leading and trailing borders meet (a whole row or column of its own pattern)."""
    return range(1, extent + 2 * stride + 1)


def describe_geometry(g: ConvGeometry) -> str:
    """One line for describe()/inspect: the shape the kernel is specialized for."""
    kind = "conv" if g.mode == "conv" else g.mode + "pool"
    pool = "" if g.pool is None else \
        f" + {g.pool.mode}pool {g.pool.kh}x{g.pool.kw} epilogue ->{g.pool.ho}x{g.pool.wo}"
    if g.global_pool is not None:
        pool = f" + global {g.global_pool} pool epilogue ->1x1"
    return (f"{kind} {g.kh}x{g.kw} s{g.sh}x{g.sw} d{g.dh}x{g.dw} g{g.group} {g.c}->{g.m} "
            f"{g.h}x{g.w}->{g.ho}x{g.wo}{pool} N{g.n} (NHWC, {g.flops / 1e9:.3f} GFLOP)")
