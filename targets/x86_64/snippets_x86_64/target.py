"""The x86_64_avx512 target: machine facts, availability, and its hooks (tokenization veto, SkippedByPlugin).

Found by the core through the entry point ``x86_64_avx512`` in the group ``snippets.targets``; the core
instantiates :class:`X86_64Target` and registers the instance as a pluggy plugin, so its ``@hookimpl``
methods apply when compiling for this target.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, ClassVar

import pluggy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from snippets_core.codegen.subgraph_codegen import GeneratedSubgraph
    from snippets_core.config import CompileConfig
    from snippets_core.ir.model import Model
    from snippets_core.ir.node import Node
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_x86_64.runtime import KernelExecutor

# the same marker as snippets_core.plugins.hookimpl (pluggy markers are plain values keyed by project name)
hookimpl = pluggy.HookimplMarker("snippets")


#: multiply-adds and input channels from which a quantized convolution runs as an int8 one: every one, since the
#: JIT int8 conv (conv_int8.py) beats the f32 primitive from the smallest measured (kernels alone, 1 thread: 3x3
#: 3->32 on 64x64 22 us vs 30, 32->32 on 32x32 29 us vs 74)
INT8_CONV_MIN_MACS = 0
INT8_CONV_MIN_CHANNELS = 1
#: rt_info keys of the Subgraphs TokenizeConvSnippets makes: each runs as a kernel of its own, on NHWC
PRIMITIVE_KINDS = ("SnippetsConvolution", "SnippetsPooling", "SnippetsConcat", "SnippetsChannelShuffle")


class X86_64Target:
    """x86-64 with AVX-512: kernels are JIT-compiled into this process and called through ctypes."""

    name: ClassVar[str] = "x86_64_avx512"
    description: ClassVar[str] = "x86-64 AVX-512 (F/BW/DQ/VL): kernels JIT-compiled into this process"

    #: f32 lanes in a zmm register
    lanes_f32: ClassVar[int] = 16
    vector_bytes: ClassVar[int] = 64
    vector_registers: ClassVar[int] = 32
    mask_registers: ClassVar[int] = 8
    #: 16 general-purpose registers minus rsp
    gpr_pool: ClassVar[int] = 15
    #: data pointers a kernel can keep in registers: 16 - 2 work amounts - 1 runtime params - 2 stack
    data_ptr_gpr_count: ClassVar[int] = 11
    #: loops shorter than this are not worth a kernel of their own (min_kernel_work_amount)
    min_kernel_work_amount: ClassVar[int] = 256
    #: the target_options this target reads (any other name is a ConfigError listing these; docs/x86_64_math.md)
    target_options: ClassVar[frozenset[str]] = frozenset({
        "cache_dir", "native_steps", "parallel_min_bytes", "parallel_min_ns", "thread_pool",  # the runtime
        "inference_precision", "bf16_intermediate",  # bf16
        "brgemm_m_block", "brgemm_n_block", "brgemm_k_block",  # Brgemm (MHA)
        "fc_m_block", "fc_split_n", "fc_runtime_m",  # FullyConnected
    })

    def __init__(self, mark_fused_post_ops: bool | None = None) -> None:
        #: SnippetsMarkSkipped keeps the post-op chains of Convolution and of MatMul with constant weights
        #: out of Subgraphs, as the CPU plugin does because oneDNN fuses them into the convolution/GEMM.
        #: Here those ops run on reference kernels that fuse nothing, so by default the chains are left to
        #: the Tokenizer; a build whose convolution/GEMM kernels fuse post-ops turns this on
        #: (``X86_64Target(mark_fused_post_ops=True)`` or SNIPPETS_X86_MARK_FUSED_POST_OPS=1).
        if mark_fused_post_ops is None:
            mark_fused_post_ops = os.environ.get("SNIPPETS_X86_MARK_FUSED_POST_OPS", "") not in ("", "0")
        self.mark_fused_post_ops = mark_fused_post_ops

    def tokenization_defaults(self) -> dict[str, object]:
        """Tokenizer knobs of this machine: the data-pointer register budget, and MHA transposes of rank 4
        only (3D ones regressed in the CPU plugin), and a transposed MatMul B stays in the Subgraph (BrgemmCopyB
        repacks it); a Softmax over an inner axis runs in a kernel between two Transposes, and every Transpose
        left outside the kernels becomes a JIT transpose Subgraph of its own (``transpose_primitives``); a
        FullyConnected's M is split by its executor, not by Reshapes around it (``fc_split_m_dimension``)."""
        return {"data_ptr_gpr_count": self.data_ptr_gpr_count, "mha_supported_transpose_ranks": (4,),
                "mha_transposed_b_in_subgraph": True, "softmax_axis_to_last": True,
                "conv_primitives": True, "int8_fc": self._has_vnni(), "transpose_primitives": True,
                # an FC's rows are split between the threads inside its kernel (fc_executor.row_split_subgraph)
                "fc_split_m_dimension": False,
                # a written-out Gelu becomes the Gelu op (emitters/math.py computes either form in one emitter)
                "gelu_fusion": True,
                # below these a quantized conv stays the f32 primitive (0, 1: none; the knobs stay for users)
                "int8_conv_min_macs": INT8_CONV_MIN_MACS, "int8_conv_min_channels": INT8_CONV_MIN_CHANNELS}

    @staticmethod
    def _has_vnni() -> bool:
        """Quantized MatMuls become int8 FullyConnected Subgraphs where the VNNI Brgemm can run them."""
        from snippets_x86_64.cpu import cpu_features

        return "avx512_vnni" in cpu_features()

    def available(self) -> str | None:
        """None when AVX-512 (F, BW, DQ, VL) is usable on this CPU and OS, else the reason it is not."""
        from snippets_x86_64.cpu import UnsupportedCpuError, require_avx512

        try:
            require_avx512()
        except UnsupportedCpuError as exc:
            return str(exc)
        return None

    def preferred_layout(self, node: Node) -> str | None:
        """The layout AssignLayouts gives ``node``'s rank-4 tensors: NHWC for the conv, pooling, channel-concat and
        channel-shuffle primitives (their kernels read and write channels innermost, so they hand each other memory
        with no reorder), plain (None) for everything else."""
        if any(node.rt_info.get(k) for k in PRIMITIVE_KINDS):
            return "NHWC"
        spec = node.rt_info.get("SnippetsInt8FullyConnected")
        if spec is not None and spec.conv is not None:  # the JIT int8 convolution reads and writes NHWC too
            return "NHWC"
        return None

    def preferred_input_layout(self, node: Node, index: int) -> str | None:
        """Plain for the data input of a conv primitive (f32 or int8) with few input channels (an RGB stem): its
        kernel reads a planar padded copy of an NCHW input (the int8 one quantizes the planes into its pixels), so
        an NHWC reorder before it would be a pass over the image for nothing (AssignLayouts takes it only where
        the input is plain already); None for every other input."""
        spec = node.rt_info.get("SnippetsInt8FullyConnected")
        if spec is not None and spec.conv is not None and index not in (spec.a_index, spec.residual_index()):
            return "plain"  # an int8 convolution reads only x in NHWC (its weight inputs feed the body's reference)
        if spec is not None and spec.conv is not None and index == spec.a_index:
            from snippets_x86_64.int8_conv_executor import reads_planes

            return "plain" if reads_planes(spec) else None  # a stem quantizes NCHW planes: no reorder before it
        if index == 0 and node.rt_info.get("SnippetsConvolution"):
            from snippets_x86_64.conv_subgraph import reads_planar

            if reads_planar(node):  # type: ignore[arg-type]
                return "plain"
        return None

    def compile_subgraph(self, sg: Subgraph, config: CompileConfig, host: Any) -> KernelExecutor | None:
        """Compile ``sg`` into a kernel run over its parallel domain on ``config.num_threads`` threads; None
        (with ``sg.rt_info["SnippetsFallbackReason"]``) when the target declares it does not generate something in
        it (UnsupportedByTarget), so it runs on its reference; any other error is raised.
        The executor is ``run(inputs, outs=None) -> outputs``; see :mod:`snippets_x86_64.runtime`."""
        from snippets_x86_64.native_steps import native_steps_option

        native_steps_option(config)  # a bad value is an error at compile time, not on the call that reads it
        primitive = any(sg.rt_info.get(k) for k in PRIMITIVE_KINDS)
        if sg.rt_info.get("SnippetsTranspose"):  # a standalone Transpose (TokenizeTransposeSnippets)
            from snippets_x86_64.cache import cache_dir_from, function_cache_dir
            from snippets_x86_64.transpose import compile_transpose_subgraph

            with function_cache_dir(cache_dir_from(dict(config.target_options))):
                return compile_transpose_subgraph(sg, config)
        if primitive or sg.rt_info.get("SnippetsReorder"):
            # a conv or pooling primitive (TokenizeConvSnippets) or a layout change (AssignLayouts): a kernel of its
            # own, not the LinearIR pipeline, built once per geometry (FUNCTION_CACHE, on disk under cache_dir)
            from snippets_x86_64.cache import cache_dir_from, function_cache_dir

            with function_cache_dir(cache_dir_from(dict(config.target_options))):
                if primitive:
                    from snippets_x86_64.conv_subgraph import compile_conv_subgraph

                    return compile_conv_subgraph(sg, config)
                from snippets_x86_64.reorder import compile_reorder_subgraph

                return compile_reorder_subgraph(sg, config)
        from snippets_x86_64.runtime import compile_subgraph

        return compile_subgraph(sg, config, host)

    def native_steps(self, steps: Sequence[tuple[Any, tuple[int, ...], tuple[int, ...]]], escaping: set[int],
                     config: CompileConfig) -> list[Any]:
        """The runs of a compiled model's consecutive static steps that run as one native call list, without Python
        between the kernels (:mod:`snippets_x86_64.native_steps`); none with ``target_options.native_steps`` false."""
        from snippets_x86_64.native_steps import native_steps, native_steps_option

        return native_steps(steps, escaping) if native_steps_option(config) else []

    def generate_subgraph(self, sg: Subgraph, config: CompileConfig, host: Any) -> GeneratedSubgraph:
        """``sg`` through ``generate_subgraph`` with this target's machine, passes and precisions (the Kernel and
        the final LinearIR, for ``snippets inspect --lir/--asm``); debug capabilities from ``config``/environment."""
        from snippets_x86_64.debug_caps import generate_subgraph

        return generate_subgraph(sg, config, host)[0]

    @hookimpl
    def snippets_tokenization_callback(self, node: Node, target_name: str, tokenizer: str) -> str | None:
        if target_name != self.name:
            return None
        from snippets_x86_64.tokenization_callback import tokenization_callback

        return tokenization_callback(node, tokenizer)

    @hookimpl
    def snippets_positioned_passes(self, target_name: str, config: dict[str, Any]) -> list[Any]:
        """Brgemm knobs of ``target_options``: bf16 inference precision, block sizes (see ``snippets_x86_64.brgemm``)."""
        if target_name != self.name:
            return []
        from snippets_x86_64.brgemm import brgemm_positioned_passes
        from snippets_x86_64.passes.elide_bf16_round_trips import elide_bf16_positioned_passes

        options = dict((config or {}).get("target_options", {}) or {})
        return [*brgemm_positioned_passes(options), *elide_bf16_positioned_passes(options)]

    @hookimpl
    def snippets_mark_skipped(self, model: Model, target_name: str) -> None:
        if target_name != self.name or not self.mark_fused_post_ops:
            return
        from snippets_x86_64.passes.snippets_mark_skipped import SnippetsMarkSkipped

        SnippetsMarkSkipped().run(model)

    def __repr__(self) -> str:
        return f"<target {self.name}>"
