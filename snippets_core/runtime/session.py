"""onnxruntime's ``InferenceSession`` surface over snippets, so that a user switches by changing an import.

    import snippets_core as ort          # instead of: import onnxruntime as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    y, = sess.run(None, {"x": x})

What the session reports about the model (``get_inputs``, ``get_outputs``, ``get_modelmeta``) is read from the
ONNX file itself, after onnx's shape inference, as onnxruntime reports it: symbolic dims are their names, unknown
dims are None, a value with no shape at all has ``[]``. What runs is :func:`snippets_core.compile_model` for the
chosen target. Bad feeds (a wrong input name, dtype or shape, an unknown output name) are typed errors
(:class:`~snippets_core.errors.InputError`); onnxruntime raises its own exceptions for the same cases.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from snippets_core.errors import ConfigError, InputError, TargetNotFoundError

#: onnxruntime's provider name for its CPU kernels: here it means "the best target that runs on this CPU"
CPU_PROVIDER = "CPUExecutionProvider"
#: installed targets that run models in this process, best first; the first available one is the default
_CPU_TARGETS = ("x86_64_avx512",)
#: onnxruntime reports this model version when the file sets none
_UNSET_MODEL_VERSION = 2**63 - 1


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's optimization levels. ``ORT_DISABLE_ALL`` turns fusion off (``snippets_mode=Disable``):
    every node then runs on its reference kernel; the other levels fuse as usual."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's execution modes; a hint there and here (Subgraphs run in parallel over their domain)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


@dataclass
class SessionOptions:
    """onnxruntime's ``SessionOptions`` attributes, with its defaults.

    ``intra_op_num_threads`` (0: all cores) becomes ``num_threads``; ``graph_optimization_level`` =
    ORT_DISABLE_ALL turns fusion off. The attributes that are hints in onnxruntime too (logging, memory arenas
    and patterns, inter-op threads, execution mode and order, deterministic compute) are accepted and have no
    effect. Profiling and saving the optimized model have no equivalent: setting them is a ConfigError, as is
    setting an attribute onnxruntime does not have.
    """

    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_ENABLE_ALL
    execution_mode: ExecutionMode = ExecutionMode.ORT_SEQUENTIAL
    execution_order: int = 0
    log_severity_level: int = 2
    log_verbosity_level: int = 0
    logid: str = ""
    enable_cpu_mem_arena: bool = True
    enable_mem_pattern: bool = True
    enable_mem_reuse: bool = True
    use_deterministic_compute: bool = False
    use_per_session_threads: bool = True
    enable_profiling: bool = False
    profile_file_prefix: str = "onnxruntime_profile_"
    optimized_model_filepath: str = ""
    _free_dimension_overrides: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _frozen: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._frozen = True

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix the symbolic dim ``dim_name`` of the graph inputs to ``dim_value`` (what ``snippets compile --shape``
        does by input): the model is then compiled for that size, and a feed of another size is an InputError.
        A name no input dim has is an InputError when the session is created."""
        self._free_dimension_overrides[dim_name] = dim_value

    def free_dimension_overrides(self) -> dict[str, int]:
        return dict(self._free_dimension_overrides)

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False) and name not in _OPTION_NAMES:
            raise ConfigError(f"SessionOptions has no attribute {name!r}; known: {', '.join(sorted(_OPTION_NAMES))}")
        object.__setattr__(self, name, value)


_OPTION_NAMES = frozenset(f.name for f in fields(SessionOptions) if not f.name.startswith("_"))
#: options that produce files in onnxruntime: no equivalent here, so a value other than the default is an error
_UNSUPPORTED_OPTIONS = ("enable_profiling", "optimized_model_filepath")


def session_config(sess_options: Any, config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The compile_model config for ``sess_options`` (ours or onnxruntime's: any object with its attributes),
    merged under ``config`` (explicit config entries win)."""
    out: dict[str, Any] = {}
    if sess_options is not None:
        defaults = SessionOptions()
        for name in _UNSUPPORTED_OPTIONS:
            value = getattr(sess_options, name, getattr(defaults, name))
            if value != getattr(defaults, name):
                raise ConfigError(f"SessionOptions.{name}={value!r} is not supported: snippets writes no profile "
                                  "or optimized model (`snippets run --perf` and `snippets inspect` show both)")
        threads = getattr(sess_options, "intra_op_num_threads", 0)
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
            raise ConfigError(f"SessionOptions.intra_op_num_threads must be a non-negative integer, got {threads!r}")
        if threads:
            out["num_threads"] = threads
        level = getattr(sess_options, "graph_optimization_level", GraphOptimizationLevel.ORT_ENABLE_ALL)
        # onnxruntime's own enum (pybind) and ours both carry the member name
        if getattr(level, "name", level) in ("ORT_DISABLE_ALL", 0):
            out["snippets_mode"] = "Disable"
    out.update(config or {})
    return out


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it: ``shape`` holds ints, dim names (str) and None for
    unknown dims; ``type`` is a string such as ``'tensor(float)'``."""

    name: str
    shape: list[int | str | None]
    type: str


@dataclass(frozen=True)
class ModelMetadata:
    """The model's metadata as onnxruntime's ``get_modelmeta()`` gives it."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]


def _type_string(tp: Any) -> str:
    """onnxruntime's name of a TypeProto: ``tensor(float)``, ``seq(tensor(int64))``, ``map(string,tensor(float))``."""
    from onnx import TensorProto

    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({TensorProto.DataType.Name(tp.tensor_type.elem_type).lower()})"
    if kind == "sequence_type":
        return f"seq({_type_string(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({_type_string(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key},{_type_string(tp.map_type.value_type)})"
    return "unknown"


def _shape(tp: Any) -> list[int | str | None]:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return []
    dims: list[int | str | None] = []
    for d in tp.tensor_type.shape.dim:
        kind = d.WhichOneof("value")
        # onnxruntime: a dim_value as an int, a named dim as its name, a dim with neither as None
        dims.append(d.dim_value if kind == "dim_value" else (d.dim_param or None) if kind == "dim_param" else None)
    return dims


def _node_args(value_infos: Sequence[Any], skip: frozenset[str] = frozenset()) -> list[NodeArg]:
    return [NodeArg(v.name, _shape(v.type), _type_string(v.type)) for v in value_infos if v.name not in skip]


def _inferred(proto: Any) -> Any:
    """``proto`` after onnx's shape inference (which fills graph outputs' shapes as onnxruntime's does); the
    declared proto when inference cannot run (the model still loads: inference is only for the report)."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001 - a report falls back to the declared shapes, the model still runs
        return proto


def available_targets() -> list[str]:
    """Every target name a session takes as a provider: installed targets, then the built-in ones."""
    from snippets_core.plugins.targets import target_names

    return target_names()


def default_target() -> str:
    """The first installed in-process target that runs on this CPU (x86_64_avx512), else ``reference``."""
    from snippets_core.errors import SnippetsError
    from snippets_core.plugins.targets import list_targets, load_target

    installed = {t.name for t in list_targets()}
    for name in _CPU_TARGETS:
        if name not in installed:
            continue
        try:
            if load_target(name).available() is None:
                return name
        except SnippetsError:
            continue  # a broken target is not the default; naming it explicitly shows its error
    return "reference"


def _provider_name(item: Any) -> str:
    name = item[0] if isinstance(item, tuple) and item else item
    if not isinstance(name, str):
        raise ConfigError(f"a provider is a name or a (name, options) tuple, got {item!r}")
    return name


def choose_target(target: str | None, providers: Sequence[Any] | None) -> str:
    """The target a session runs on. ``providers`` is onnxruntime's list, best first: a target name picks that
    target, ``CPUExecutionProvider`` the default one; another onnxruntime provider (CUDA, ...) is skipped with
    the warning onnxruntime gives when it lacks one; any other name is an error. ``target`` and ``providers``
    must not disagree."""
    if providers is not None and (isinstance(providers, str) or not isinstance(providers, Sequence)):
        raise ConfigError(f"providers must be a list of provider names, got {providers!r}")
    known = available_targets()
    chosen: str | None = None
    for item in providers or ():
        name = _provider_name(item)
        if name in known:
            chosen = name
        elif name == CPU_PROVIDER:
            chosen = target or default_target()
        elif name.endswith("ExecutionProvider"):
            warnings.warn(f"provider {name!r} is not available in snippets; available: {', '.join(known)}, "
                          f"{CPU_PROVIDER}", UserWarning, stacklevel=3)
            continue
        else:
            raise TargetNotFoundError(f"unknown provider {name!r}; snippets takes target names "
                                      f"({', '.join(known)}) or {CPU_PROVIDER!r}")
        break
    if chosen is None:
        return target or default_target()
    if target is not None and chosen != target:
        raise ConfigError(f"target={target!r} and providers={list(providers or ())!r} disagree; give one of them")
    return chosen


class InferenceSession:
    """A compiled model behind onnxruntime's ``InferenceSession`` interface.

    ``path_or_bytes`` is an ONNX path, its bytes or a ModelProto. The target comes from ``target`` or
    ``providers`` (see :func:`choose_target`); by default the best target for this CPU. ``sess_options`` is
    a :class:`SessionOptions` (or onnxruntime's), ``config`` a compile_model config (it wins over options).
    ``describe()`` says where each node runs.
    """

    def __init__(self, path_or_bytes: Any, sess_options: Any = None, providers: Sequence[Any] | None = None,
                 provider_options: Sequence[Mapping[str, Any]] | None = None, *, target: str | None = None,
                 config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        if kwargs:
            raise ConfigError(f"InferenceSession got unknown keyword argument(s) {', '.join(sorted(kwargs))}; "
                              "it takes sess_options, providers, provider_options, target, config")
        if any(opts for opts in provider_options or ()):
            raise ConfigError(f"provider_options {list(provider_options or ())!r}: snippets targets take no provider "
                              "options; give target options as config={'target_options': {...}}")
        from snippets_core.frontends.input_shapes import fix_onnx_inputs, fold_shape_subgraphs
        from snippets_core.frontends.onnx import load_model_proto, read_onnx
        from snippets_core.runtime.compiled_model import compile_model

        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._target = choose_target(target, providers)
        # onnxruntime's SessionOptions keeps its overrides write-only: only ours can be read back
        overrides = getattr(sess_options, "free_dimension_overrides", dict)()
        if overrides:
            proto = fix_onnx_inputs(path_or_bytes, dims=overrides)
            model = read_onnx(proto)
            fold_shape_subgraphs(model)
        else:
            model = read_onnx(path_or_bytes)
            proto, _ = load_model_proto(path_or_bytes)
        inferred = _inferred(proto)
        initializers = frozenset(t.name for t in proto.graph.initializer)
        self._inputs = _node_args(proto.graph.input, skip=initializers)
        self._outputs = _node_args(inferred.graph.output)
        self._meta = ModelMetadata(
            producer_name=proto.producer_name, graph_name=proto.graph.name, domain=proto.domain,
            description=proto.doc_string, graph_description=proto.graph.doc_string,
            version=proto.model_version if proto.HasField("model_version") else _UNSET_MODEL_VERSION,
            custom_metadata_map={p.key: p.value for p in proto.metadata_props},
        )
        self._compiled = compile_model(model, target=self._target, config=session_config(sess_options, config))

    # --- onnxruntime's surface ------------------------------------------------------------------------------
    def get_inputs(self) -> list[NodeArg]:
        """The graph inputs a feed must give (initializers excluded), in graph order."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The graph outputs in graph order, their shapes as shape inference completes them."""
        return list(self._outputs)

    def get_modelmeta(self) -> ModelMetadata:
        return self._meta

    def get_providers(self) -> list[str]:
        """The target this session runs on (a one-element list, as onnxruntime lists its providers)."""
        return [self._target]

    def get_session_options(self) -> Any:
        return self._sess_options

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None) -> list[np.ndarray]:
        """Run the model on ``input_feed`` (arrays by input name) and return the outputs named in
        ``output_names`` (None or empty: all, in graph order) as a list in that order. ``run_options``
        (onnxruntime's RunOptions: a log tag and level) is accepted and has no effect."""
        names = list(output_names) if output_names else [o.name for o in self._outputs]
        known = self._compiled.output_names
        unknown = [n for n in names if n not in known]
        if unknown:
            raise InputError(f"invalid output name {unknown[0]!r}; the model's outputs are: {', '.join(known)}")
        outputs = self._compiled(input_feed)
        return [outputs[n] for n in names]

    # --- snippets' own ------------------------------------------------------------------------------------
    @property
    def compiled_model(self) -> Any:
        """The CompiledModel behind the session (``placement()``, ``last_run_stats``)."""
        return self._compiled

    def describe(self) -> str:
        """Where each node runs (the target's kernels or a reference kernel, with the reason)."""
        return str(self._compiled.describe())


def get_available_providers() -> list[str]:
    """onnxruntime's ``get_available_providers``: the target names a session takes, best first."""
    return available_targets()
