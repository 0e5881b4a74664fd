"""``onnx.backend.base.Backend`` over snippets: read_onnx, then compile and run.

``SnippetsBackend.prepare(model, device="CPU", target=...)`` returns a :class:`SnippetsBackendRep` whose
``run(inputs)`` feeds the model's non-initializer graph inputs (a list in graph order, or a dict by name)
and returns the outputs in graph order. The target is the ``target`` keyword, else the environment
variable ``SNIPPETS_BACKEND_TARGET``, else ``"reference"``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from snippets_core.errors import InputError
from snippets_core.frontends.onnx import read_onnx
from snippets_core.ir.model import Model

TARGET_ENV = "SNIPPETS_BACKEND_TARGET"
DEFAULT_TARGET = "reference"


def default_target() -> str:
    return os.environ.get(TARGET_ENV) or DEFAULT_TARGET


def compile_for(model: Model, target: str, config: Mapping[str, Any] | None = None) -> Any:
    """A callable ``inputs_by_name -> outputs_by_name`` for ``model`` on ``target``."""
    from snippets_core.runtime.compiled_model import compile_model

    return compile_model(model, target=target, config=config)


class SnippetsBackendRep(BackendRep):
    """A prepared model: runs the compiled model on positional or named inputs."""

    def __init__(self, model: Model, target: str, config: Mapping[str, Any] | None = None) -> None:
        self.model = model
        self.target = target
        self.compiled = compile_for(model, target, config)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        names = self.model.input_names
        if isinstance(inputs, Mapping):
            feeds = {k: np.asarray(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            values: Sequence[Any] = list(inputs)
            if len(values) != len(names):
                raise InputError(f"model '{self.model.name}' takes {len(names)} inputs ({', '.join(names)}), "
                                 f"got {len(values)}")
            feeds = {n: np.asarray(v) for n, v in zip(names, values)}
        outs = self.compiled(feeds)
        order = self.model.output_names
        return namedtupledict("Outputs", order)(*[outs[n] for n in order])


class SnippetsBackend(Backend):
    """The ONNX backend API over snippets (CPU only)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> SnippetsBackendRep:
        """Read ``model`` (read_onnx runs onnx.checker and turns its complaints into ModelFormatError, so the
        base class's unwrapped check is not called) and compile it for the target."""
        if not cls.supports_device(device):
            raise InputError(f"device '{device}' is not supported; snippets runs on CPU")
        target = kwargs.get("target") or default_target()
        return SnippetsBackendRep(read_onnx(model, check=kwargs.get("check", True)), target, kwargs.get("config"))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """Run one node: wrap it in a one-node model whose inputs take the given arrays' types and shapes."""
        super().run_node(node, inputs, device=device, outputs_info=outputs_info)
        arrays = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
        names = [n for n in node.input if n]
        if len(arrays) != len(names):
            raise InputError(f"node '{node.name or node.op_type}' has {len(names)} inputs, got {len(arrays)} arrays")
        graph_inputs = [onnx.helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype),
                                                           np.asarray(a).shape) for n, a in zip(names, arrays)]
        graph_outputs = [onnx.helper.make_empty_tensor_value_info(n) for n in node.output if n]
        graph = onnx.helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, graph_outputs)
        opset = kwargs.pop("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        # The node was checked above; the wrapper graph's outputs have no types, which the model checker
        # would reject, so it is not run again.
        return cls.prepare(model, device, check=False, **kwargs).run(arrays)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU


prepare = SnippetsBackend.prepare
run_model = SnippetsBackend.run_model
run_node = SnippetsBackend.run_node
supports_device = SnippetsBackend.supports_device
