"""The model-level pipeline that compile_model runs before code generation: plugin markup, then
tokenization (MHA first, then eltwise), then the per-Subgraph common optimizations."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from snippets_core.config import CompileConfig
from snippets_core.ir.model import Model
from snippets_core.runtime.targets import ResolvedTarget


def run_tokenization(model: Model, target: ResolvedTarget, config: CompileConfig) -> None:
    """Mark nodes the target fuses elsewhere, then replace fusable regions by Subgraph nodes."""
    from snippets_core.passes.convert_fc_to_bf16 import ConvertFCToBF16
    from snippets_core.passes.convert_q_dq_to_fake_quantize import ConvertQDQToFakeQuantize
    from snippets_core.passes.extract_reshapes_from_mha import ExtractReshapesFromMHA
    from snippets_core.passes.gelu_fusion import GeluFusion
    from snippets_core.passes.group_norm_to_rows import GroupNormToRows
    from snippets_core.passes.move_reduction_axes_last import MoveReductionAxesLast
    from snippets_core.passes.move_softmax_axis_last import MoveSoftmaxAxisLast
    from snippets_core.passes.widen_bf16_convolution import WidenBF16Convolution
    from snippets_core.tokenization import TokenizationConfig, TokenizeFCSnippets, TokenizeMHASnippets, TokenizeSnippets
    from snippets_core.tokenization.config import SnippetsMode
    from snippets_core.tokenization.tokenize_int8_fc_snippets import TokenizeInt8FCSnippets
    from snippets_core.tokenization.mark_int8_mha import MarkInt8MHA
    from snippets_core.tokenization.tokenize_int8_matmul_snippets import TokenizeInt8MatMulSnippets

    disabled = set(config.disabled_passes)
    if ConvertQDQToFakeQuantize.name not in disabled:  # Q->DQ pairs fuse as FakeQuantize (OpenVINO's frontend)
        ConvertQDQToFakeQuantize().run(model)
    host = target.host
    knobs = {**target.tokenization_defaults(), **dict(config.tokenization)}
    knobs.setdefault("concurrency", config.num_threads)
    # OpenVINO's INFERENCE_PRECISION_HINT: the targets' common option name for "compute in bf16 where it pays"
    knobs.setdefault("fc_bf16", str(config.target_options.get("inference_precision", "f32")).lower() == "bf16")
    tcfg = TokenizationConfig.from_dict(knobs)
    tcfg = replace(tcfg, callback=lambda node: host.tokenization_callback(node, target.name))
    if tcfg.enabled and tcfg.fc_bf16 and ConvertFCToBF16.name not in disabled:
        ConvertFCToBF16(accept=lambda node: host.tokenization_callback(node, target.name, "fc") is None).run(model)
    if tcfg.enabled and tcfg.conv_primitives and WidenBF16Convolution.name not in disabled:
        # the conv primitive computes f32: a bf16 conv runs on it between Converts (before the target marks nodes)
        WidenBF16Convolution().run(model)
    host.mark_skipped(model, target.name)
    if tcfg.enabled:
        if ExtractReshapesFromMHA.name not in disabled:
            ExtractReshapesFromMHA().run(model)
        # the kernels reduce along the innermost dim only
        rewrites = [GroupNormToRows(), MoveReductionAxesLast()]
        if tcfg.gelu_fusion:  # a written-out Gelu as the one op the target's kernels compute it with
            rewrites.insert(0, GeluFusion())
        # the Transposes stay outside only while the target's callback is asked to keep them there
        if tcfg.softmax_axis_to_last and tcfg.snippets_mode is SnippetsMode.Enable:
            rewrites.insert(0, MoveSoftmaxAxisLast())
        for rewrite in rewrites:
            if rewrite.name not in disabled:
                rewrite.run(model)
        if tcfg.int8_fc and TokenizeInt8FCSnippets.name not in disabled:
            # first: the quantized MatMuls with int8 weights (their f32 form would be an FC or an MHA operand)
            TokenizeInt8FCSnippets(tcfg).run(model)
        if tcfg.int8_fc and tcfg.int8_matmul and TokenizeInt8MatMulSnippets.name not in disabled:
            # then the MatMuls of two quantized activations (the attention's), before the MHA tokenizer takes them
            TokenizeInt8MatMulSnippets(tcfg).run(model)
        if TokenizeMHASnippets.name not in disabled:
            # asked once per match, about MatMul0; the hooks learn it is the MHA tokenizer asking
            TokenizeMHASnippets(tcfg, callback=lambda node: host.tokenization_callback(node, target.name, "mha")
                                ).run(model)
            if tcfg.int8_fc and tcfg.int8_mha and MarkInt8MHA.name not in disabled:
                # while the FakeQuantizes feeding the MHA are still visible (the eltwise Tokenizer takes them next)
                MarkInt8MHA(tcfg).run(model)
        if TokenizeFCSnippets.name not in disabled:
            # after MHA (whose MatMuls an FC must not take), before eltwise (which would take the post-ops)
            TokenizeFCSnippets(tcfg, callback=lambda node: host.tokenization_callback(node, target.name, "fc")
                               ).run(model)
    if tcfg.enabled and tcfg.conv_primitives:
        from snippets_core.tokenization.tokenize_conv_snippets import TokenizeConvSnippets

        if TokenizeConvSnippets.name not in disabled:
            # before eltwise, which would take the post-ops the conv primitive applies in registers
            TokenizeConvSnippets(tcfg, callback=lambda node: host.tokenization_callback(node, target.name, "conv")
                                 ).run(model)
    TokenizeSnippets(tcfg).run(model)
    run_mha_common_optimizations(model, tcfg, disabled)
    run_common_optimizations(model, disabled)
    if tcfg.enabled and tcfg.transpose_primitives:
        from snippets_core.tokenization.tokenize_transpose_snippets import TokenizeTransposeSnippets

        if TokenizeTransposeSnippets.name not in disabled:
            # after the Subgraph optimizations (ExtractUnsupportedTransposes leaves Transposes outside), before
            # AssignLayouts, which sees the transpose Subgraphs as plain-layout consumers
            TokenizeTransposeSnippets(tcfg, callback=lambda node: host.tokenization_callback(
                node, target.name, "transpose")).run(model)
    if target.assigns_layouts:
        from snippets_core.passes.assign_layouts import AssignLayouts

        if AssignLayouts.name not in disabled:
            # last: it sees the final Subgraphs, and the reorders it inserts are Subgraphs no pass above must touch
            AssignLayouts(target.preferred_layout, target.preferred_input_layout).run(model)


def run_common_optimizations(model: Model, disabled_passes: Iterable[str] = ()) -> bool:
    """CommonOptimizations on every Subgraph: quantized bodies get FakeQuantize decomposed and their
    non-scalar constants moved out as inputs. A pass named in ``disabled_passes`` is skipped.

    TransformConvertToConvertTruncation is off here: in OpenVINO a graph Convert already wraps like
    ConvertTruncation, but our Convert has defined saturating float->int semantics (and every target
    emits it directly), so renaming it would make a fused Convert disagree with the same op run outside
    a Subgraph on out-of-range values."""
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.passes.data_flow_pipeline import common_optimizations_pipeline, is_quantized
    from snippets_core.tokenization.tokenize_conv_snippets import is_primitive
    from snippets_core.tokenization.tokenize_int8_fc_snippets import is_int8_fc
    from snippets_core.tokenization.tokenize_int8_matmul_snippets import is_int8_matmul

    disabled = set(disabled_passes)
    if "common-optimizations" in disabled:
        return False
    changed = False
    for sg in [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]:
        if is_primitive(sg) or is_int8_fc(sg) or is_int8_matmul(sg):  # a conv/pool/int8 primitive: its Constants stay in (packed once)
            continue
        pipeline = common_optimizations_pipeline(is_quantized(sg.body))
        # Validate checks what the lowering supports; a body it rejects (e.g. a Reshape pair kept by a
        # disabled pass) must still run on its reference, so the check is left to each target's compile,
        # where a failure means a fallback (x86) or a typed error naming the op.
        pipeline.disabled |= disabled | {"validate", "transform-convert-to-convert-truncation"}
        changed |= pipeline.run(sg)
    return changed


def run_mha_common_optimizations(model: Model, tcfg, disabled_passes: Iterable[str] = ()) -> bool:  # type: ignore[no-untyped-def]
    """The MHA part of CommonOptimizations on every Subgraph with domain-sensitive ops: body passes
    ExplicitTransposeMatMulInputs, SoftmaxReshapeElimination; Subgraph passes ExtractUnsupportedTransposes,
    SplitDimensionM (when ``tcfg.split_m_dimension``; on a FullyConnected also ``tcfg.fc_split_m_dimension``).
    A pass named in ``disabled_passes`` is skipped."""
    from snippets_core.ir.ops.subgraph import Subgraph
    from snippets_core.passes.explicit_transpose_matmul_inputs import ExplicitTransposeMatMulInputs
    from snippets_core.passes.extract_unsupported_transposes import (
        ExtractUnsupportedTransposes,
        is_brgemm_fusable_or_copy_b_transpose,
        is_brgemm_fusable_transpose,
    )
    from snippets_core.passes.graph_utils import has_domain_sensitive_ops
    from snippets_core.passes.pass_manager import PassPipeline
    from snippets_core.passes.softmax_reshape_elimination import SoftmaxReshapeElimination
    from snippets_core.passes.split_dimension_m import SplitDimensionM
    from snippets_core.tokenization import FULLY_CONNECTED
    from snippets_core.tokenization.tokenize_int8_fc_snippets import is_int8_fc
    from snippets_core.tokenization.tokenize_int8_matmul_snippets import is_int8_matmul

    if not tcfg.enabled:
        return False
    kept = is_brgemm_fusable_or_copy_b_transpose if tcfg.mha_transposed_b_in_subgraph else is_brgemm_fusable_transpose
    passes = [ExplicitTransposeMatMulInputs(), SoftmaxReshapeElimination(), ExtractUnsupportedTransposes(kept)]
    if tcfg.split_m_dimension:
        passes.append(SplitDimensionM(tcfg.concurrency))
    pipeline = PassPipeline("mha-common-optimizations", passes, disabled=set(disabled_passes))
    changed = False
    # a FullyConnected keeps its transpose_b (the weight is repacked once, at compile time, by the target) and
    # has no Transposes to extract: only SplitDimensionM applies
    fc_passes = [p for p in passes if isinstance(p, SplitDimensionM)]
    fc_pipeline = PassPipeline("fc-common-optimizations", fc_passes, disabled=set(disabled_passes))
    for sg in [n for n in model.get_ordered_ops() if isinstance(n, Subgraph)]:
        if is_int8_fc(sg) or is_int8_matmul(sg):  # one int8 kernel: nothing to split or extract
            continue
        if sg.rt_info.get(FULLY_CONNECTED):
            if tcfg.fc_split_m_dimension:
                changed |= fc_pipeline.run(sg)
        elif has_domain_sensitive_ops(sg.body):
            changed |= pipeline.run(sg)
    return changed
