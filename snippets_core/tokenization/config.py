"""The Tokenizer's knobs (``SnippetsTokenization::Config`` of the reference) and the snippets mode."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from snippets_core.errors import ConfigError
from snippets_core.ir.node import Node

#: A tokenization veto: returns the reason why ``node`` must stay out of Subgraphs, or None to allow it.
TokenizationCallback = Callable[[Node], "str | None"]


class TokenizationConfigError(ConfigError):
    """A tokenization config key or value is not valid."""


class SnippetsMode(Enum):
    """How much of the model snippets may take (the CPU plugin's ``SnippetsMode``).

    ``Enable``: tokenize, asking the callback (plugin and target hooks) about each node.
    ``IgnoreCallback``: tokenize everything the Tokenizer's own rules accept; the callback is not asked.
    ``Disable``: tokenize nothing.
    """

    Enable = "Enable"
    IgnoreCallback = "IgnoreCallback"
    Disable = "Disable"

    @staticmethod
    def parse(value: SnippetsMode | str) -> SnippetsMode:
        if isinstance(value, SnippetsMode):
            return value
        if isinstance(value, str):
            key = value.replace("_", "").replace("-", "").lower()  # "IgnoreCallback", "ignore_callback", ...
            for m in SnippetsMode:
                if m.value.lower() == key:
                    return m
        raise TokenizationConfigError(
            f"snippets_mode must be one of {', '.join(m.value for m in SnippetsMode)}, got {value!r}")


@dataclass(frozen=True)
class TokenizationConfig:
    """Options of the tokenizers (eltwise ``TokenizeSnippets`` and, later, ``TokenizeMHASnippets``).

    ``data_ptr_gpr_count`` is the number of general-purpose registers a kernel can give to data pointers
    (11 on x86-64: 16 GPRs - 2 work amounts - 1 runtime-params pointer - 2 stack registers); a Subgraph
    whose parameters, results, hidden constants and estimated buffers exceed it is not grown further.
    ``callback`` is the veto hook the runtime wires to the plugins and the target.
    """

    #: threads available to one inference (MHA tokenization checks the parallel work against it)
    concurrency: int = 1
    data_ptr_gpr_count: int = 11
    split_m_dimension: bool = True
    #: SplitDimensionM also splits a FullyConnected Subgraph's M (Reshapes around it); a target whose FC executor
    #: splits the rows itself (x86-64: the same split inside the kernel, no Reshape steps between kernels) turns
    #: this off
    fc_split_m_dimension: bool = True
    #: GeluFusion before tokenization: the Gelu exporters write out (Erf or Tanh and four to eight eltwise ops) as one
    #: Gelu op, for a target whose kernels compute Gelu in one emitter
    gelu_fusion: bool = False
    #: ConvertFCToBF16 before tokenization: f32 MatMuls with constant weights become bf16 FullyConnected Subgraphs
    #: where the target's FC callback takes them (set from ``target_options.inference_precision: bf16``)
    fc_bf16: bool = False
    mha_token_enable_transpose_on_output: bool = True
    is_dynamic_mha_token_enabled: bool = True
    mha_supported_transpose_ranks: tuple[int, ...] = (3, 4)
    #: the target repacks a transposed MatMul B inside the Subgraph (BrgemmCopyB), so
    #: ExtractUnsupportedTransposes keeps such Transposes in
    mha_transposed_b_in_subgraph: bool = False
    #: a Softmax over an inner axis becomes a Transpose pair around a last-axis Softmax before tokenization
    #: (MoveSoftmaxAxisLast); for targets that keep those Transposes outside their kernels (numpy views)
    softmax_axis_to_last: bool = False
    #: the target runs a Convolution and its post-op chain as one primitive (TokenizeConvSnippets takes them)
    conv_primitives: bool = False
    #: the target runs a quantized MatMul (static QDQ, dynamic, QLinearMatMul, MatMulInteger with an int8 constant
    #: weight) as one int8 kernel (TokenizeInt8FCSnippets takes them)
    int8_fc: bool = False
    #: with ``int8_fc``, a MatMul of two quantized activations (the attention's Q x K^T and P x V) becomes an int8
    #: batched-MatMul Subgraph (TokenizeInt8MatMulSnippets). Off by default: at seq 128 the two int8 MatMuls with
    #: the softmax between them as its own pass are slower than the fused f32 MHA kernel (docs/int8.md)
    int8_matmul: bool = False
    #: with ``int8_fc``, an MHA whose Q, K and V are quantized runs its two MatMuls on int8 Brgemms inside the MHA
    #: Subgraph (MarkInt8MHA records the grids; the target decides). On: faster than the f32 MHA (docs/int8.md)
    int8_mha: bool = True
    #: the target runs a Transpose that no other tokenizer took as its own kernel (TokenizeTransposeSnippets wraps
    #: each into a single-op Subgraph after the other passes; the eltwise kernels do not transpose)
    transpose_primitives: bool = False
    #: a static QDQ convolution becomes an int8 one only with this many multiply-adds and input channels at least
    #: (below, the target's f32 convolution of the dequantized values is faster)
    int8_conv_min_macs: int = 0
    int8_conv_min_channels: int = 1
    snippets_mode: SnippetsMode = SnippetsMode.Enable
    callback: TokenizationCallback | None = None

    def __post_init__(self) -> None:
        for name in ("concurrency", "data_ptr_gpr_count", "int8_conv_min_channels"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise TokenizationConfigError(f"tokenization config '{name}' must be a positive integer, got {v!r}")
        v = self.int8_conv_min_macs
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TokenizationConfigError(f"tokenization config 'int8_conv_min_macs' must be an integer >= 0, got {v!r}")
        for name in ("split_m_dimension", "fc_split_m_dimension", "gelu_fusion", "fc_bf16",
                     "mha_token_enable_transpose_on_output", "is_dynamic_mha_token_enabled",
                     "mha_transposed_b_in_subgraph", "conv_primitives", "int8_fc", "int8_matmul", "int8_mha",
                     "transpose_primitives"):
            v = getattr(self, name)
            if not isinstance(v, bool):
                raise TokenizationConfigError(f"tokenization config '{name}' must be a bool, got {v!r}")
        ranks = self.mha_supported_transpose_ranks
        try:
            ranks_t = tuple(sorted({int(r) for r in ranks}))
        except (TypeError, ValueError):
            raise TokenizationConfigError(
                f"tokenization config 'mha_supported_transpose_ranks' must be a list of ranks, got {ranks!r}") from None
        if any(r < 1 for r in ranks_t):
            raise TokenizationConfigError(f"tokenization config 'mha_supported_transpose_ranks' has a rank < 1: {ranks!r}")
        object.__setattr__(self, "mha_supported_transpose_ranks", ranks_t)
        object.__setattr__(self, "snippets_mode", SnippetsMode.parse(self.snippets_mode))
        if self.callback is not None and not callable(self.callback):
            raise TokenizationConfigError(f"tokenization config 'callback' must be callable, got {self.callback!r}")

    @staticmethod
    def from_dict(d: TokenizationConfig | Mapping[str, Any] | None) -> TokenizationConfig:
        """Build a config from a plain mapping; an unknown key is a :class:`TokenizationConfigError`."""
        if isinstance(d, TokenizationConfig):
            return d
        d = dict(d or {})
        known = [f.name for f in fields(TokenizationConfig)]
        for k in d:
            if k not in known:
                raise TokenizationConfigError(f"unknown tokenization config key {k!r}; known keys: {', '.join(known)}")
        return TokenizationConfig(**d)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def enabled(self) -> bool:
        return self.snippets_mode is not SnippetsMode.Disable

    def veto(self, node: Node) -> str | None:
        """The callback's reason to keep ``node`` out of Subgraphs, or None. Not asked in IgnoreCallback mode."""
        if self.callback is None or self.snippets_mode is SnippetsMode.IgnoreCallback:
            return None
        reason = self.callback(node)
        if reason is not None and not isinstance(reason, str):
            raise TokenizationConfigError(
                f"the tokenization callback returned {type(reason).__name__} for node '{node.name}'; "
                "it must return a reason string or None")
        return reason


def ask_callback(callback: TokenizationCallback | None, config: TokenizationConfig, node: Node, who: str) -> str | None:
    """A pattern tokenizer's veto: ``callback``'s reason to leave the pattern at ``node`` out, or None (also when
    there is no callback or ``config`` is in IgnoreCallback mode). ``who`` names the tokenizer in the error."""
    if callback is None or config.snippets_mode is SnippetsMode.IgnoreCallback:
        return None
    reason = callback(node)
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"the {who} tokenization callback returned {type(reason).__name__} for '{node.name}'")
    return reason
