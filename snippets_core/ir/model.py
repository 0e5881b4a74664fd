"""The Model: a graph of nodes between Parameters and Results."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from snippets_core.errors import SnippetsError, ValidationError
from snippets_core.ir.node import Node, Output, as_output, replace_node, topological_sort


class Model:
    """A graph with ordered Parameters (inputs) and Results (outputs).

    ``results`` may be Result nodes, or outputs/nodes that get wrapped in new Results. When
    ``parameters`` is omitted, the Parameters reachable from the results are used in topological
    order.
    """

    def __init__(
        self,
        results: Sequence[Node | Output],
        parameters: Sequence[Node] | None = None,
        name: str = "model",
    ) -> None:
        from snippets_core.ir.ops.io import Parameter, Result

        self.name = name
        self.results: list[Result] = []
        for r in results:
            if isinstance(r, Result):
                self.results.append(r)
            elif isinstance(as_output(r).node, Result):  # a Result's own output: that Result, not a new one
                self.results.append(as_output(r).node)  # type: ignore[arg-type]
            else:
                out = as_output(r)
                res_name = next(iter(sorted(out.names)), None) or f"{out.node.name}_out{out.index}"
                self.results.append(Result(out, name=res_name))
        if parameters is None:
            parameters = [n for n in topological_sort(self.results) if isinstance(n, Parameter)]
        self.parameters: list[Parameter] = list(parameters)  # type: ignore[arg-type]
        for p in self.parameters:
            if not isinstance(p, Parameter):
                raise SnippetsError(f"model parameter {p.name} is a {p.type_name}, not a Parameter")

    # --- queries --------------------------------------------------------------------------------
    def get_ordered_ops(self) -> list[Node]:
        """All nodes, producers before consumers; Parameters first in their declared order."""
        return topological_sort(self.results, first=self.parameters)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.get_ordered_ops())

    @property
    def input_names(self) -> list[str]:
        return [p.name for p in self.parameters]

    @property
    def output_names(self) -> list[str]:
        return [r.name for r in self.results]

    def get_parameter(self, name: str) -> Node:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    def count(self, type_name: str) -> int:
        return sum(1 for n in self.get_ordered_ops() if n.type_name == type_name)

    # --- editing ----------------------------------------------------------------------------------
    def replace_node(self, old: Node, new: Node | Sequence[Output]) -> None:
        """Route consumers of ``old`` to ``new`` (a node with as many outputs, or a list of outputs)."""
        replace_node(old, new)

    def replace_output(self, old: Output, new: Output) -> None:
        old.replace(new)

    def insert_node_after(self, output: Output, make: type[Node] | callable) -> Node:  # type: ignore[valid-type]
        """Insert a one-input node on ``output``: consumers of ``output`` now read the new node."""
        consumers = output.targets
        new = make(output)
        for c in consumers:
            c.replace_source(new.outputs[0])
        return new

    def remove_node(self, node: Node) -> None:
        """Remove a pass-through node: consumers of its output 0 read its input 0 instead."""
        if not node.inputs:
            raise SnippetsError(f"cannot bypass node {node.name}: it has no inputs")
        src = node.inputs[0].source
        for o in node.outputs:
            o.replace(src)
        node.disconnect()

    def add_parameters(self, params: Sequence[Node]) -> None:
        self.parameters.extend(params)  # type: ignore[arg-type]

    def add_results(self, results: Sequence[Node]) -> None:
        self.results.extend(results)  # type: ignore[arg-type]

    def remove_parameter(self, p: Node) -> None:
        if any(o.targets for o in p.outputs):
            raise SnippetsError(f"parameter {p.name} still has consumers")
        self.parameters.remove(p)  # type: ignore[arg-type]

    def validate(self) -> None:
        """Re-infer every node in order; also checks that all Parameters are declared."""
        from snippets_core.ir.ops.io import Parameter

        declared = {p.id for p in self.parameters}
        for n in self.get_ordered_ops():
            if isinstance(n, Parameter) and n.id not in declared:
                raise ValidationError(f"model '{self.name}': parameter {n.name} is used but not declared")
            n.revalidate()

    def clone(self) -> Model:
        """A deep copy: new nodes with the same names, attributes and rt_info."""
        mapping: dict[int, Node] = {}
        for n in self.get_ordered_ops():
            new_inputs = [mapping[i.source.node.id].outputs[i.source.index] for i in n.inputs]
            new = n.clone_with_new_inputs(new_inputs)
            for o_old, o_new in zip(n.outputs, new.outputs):
                o_new.names = set(o_old.names)
            mapping[n.id] = new
        return Model(
            [mapping[r.id] for r in self.results],
            [mapping[p.id] for p in self.parameters],
            name=self.name,
        )

    def __repr__(self) -> str:
        return f"Model({self.name}: {len(self.parameters)} inputs, {len(self.results)} outputs)"

    def to_text(self) -> str:
        """A readable dump: one line per node in topological order."""
        lines = [f"model {self.name}"]
        for n in self.get_ordered_ops():
            ins = ", ".join(f"{i.source.node.name}:{i.source.index}" for i in n.inputs)
            outs = ", ".join(f"{o.element_type}{o.shape}" for o in n.outputs)
            attrs = ", ".join(f"{k}={_fmt(v)}" for k, v in n.attrs().items() if k != "value")
            lines.append(f"  {n.name} = {n.type_name}({ins}){' {' + attrs + '}' if attrs else ''} -> {outs}")
        return "\n".join(lines)


def _fmt(v: object) -> str:
    if isinstance(v, Model):
        return f"<body {len(v.get_ordered_ops())} ops>"
    if isinstance(v, float):
        return repr(v)
    return str(v)
