"""The dataflow graph of a workload: ops and tensors, validated and ordered.

`resolve` runs at load time: it checks that every input has exactly one
source (declared, or produced by one op), that the ops form no cycle, and
infers each produced tensor's shape and dtype through the ops registry, so
every mistake is reported with the op, the tensor and the field. The ops come
back in a topological order (file order breaks ties).

`DataflowGraph` is the validated graph (a bipartite networkx DiGraph:
tensor → op → tensor) that the fusion pass walks.
"""

from __future__ import annotations

import networkx as nx

from ..config.workload import Op, Tensor, Workload
from ..errors import Problems
from .ops import OPS, operands_of


def resolve(declared: dict[str, Tensor], broken: set[str], ops: list[Op],
            problems: Problems) -> tuple[dict[str, Tensor], tuple[Op, ...]]:
    """Check sources and cycles, infer produced tensors; returns (all tensors, ordered ops).

    Tensors in `broken` were declared but are invalid (already reported): ops that use them,
    and everything downstream, are skipped so that one mistake is reported once.
    """
    producer: dict[str, Op] = {}
    for op in ops:
        if op.output in declared or op.output in broken:
            problems.add(f"{op.path}.output", f"tensor '{op.output}' is declared under tensors "
                         f"(an input); an op's output must be a new tensor")
        elif op.output in producer:
            first = producer[op.output]
            problems.add(f"{op.path}.output", f"tensor '{op.output}' is already produced by op "
                         f"'{first.name}' ({first.path}); a tensor has one producer")
        else:
            producer[op.output] = op
    for op in ops:
        for name in op.inputs:
            if name not in declared and name not in broken and name not in producer:
                problems.add(f"{op.path}.inputs", f"tensor '{name}' is neither declared under "
                             "tensors nor produced by any op")

    deps = nx.DiGraph()
    deps.add_nodes_from(op.name for op in ops)
    for op in ops:
        for name in op.inputs:
            if name in producer:
                deps.add_edge(producer[name].name, op.name)
    by_name = {op.name: op for op in ops}
    cyclic: set[str] = set()
    for component in nx.strongly_connected_components(deps):
        if len(component) > 1 or any(deps.has_edge(n, n) for n in component):
            cycle = [edge[0] for edge in nx.find_cycle(deps.subgraph(component))]
            via = [by_name[name].output for name in cycle]
            first = by_name[min(component, key=[o.name for o in ops].index)]
            problems.add(first.path, f"ops {' → '.join(cycle + cycle[:1])} form a cycle "
                         f"(through tensors {', '.join(via)}); a dataflow graph must be acyclic")
            cyclic |= component

    position = {op.name: i for i, op in enumerate(ops)}
    order = [by_name[n] for n in nx.lexicographical_topological_sort(
        deps.subgraph(set(by_name) - cyclic), key=position.get)]
    tensors = dict(declared)
    unusable = set(broken) | {by_name[n].output for n in cyclic}
    for op in order:
        if any(name in unusable or name not in tensors for name in op.inputs):
            unusable.add(op.output)
            continue
        spec = OPS[op.op]
        operands = operands_of(op, tensors)
        try:
            shape, out_dtype = spec.output(operands, op.attrs)
        except ValueError as exc:
            problems.add(f"{op.path}.inputs", f"{op.op} {', '.join(op.inputs)}: {exc}")
            unusable.add(op.output)
            continue
        tensors[op.output] = Tensor(op.output, shape, out_dtype, "intermediate", op.path)
    return tensors, tuple(order)


class DataflowGraph:
    """Who produces and who consumes each tensor of a validated workload."""

    def __init__(self, workload: Workload):
        self.workload = workload
        self.graph = nx.DiGraph()
        for tensor in workload.tensors.values():
            self.graph.add_node(("tensor", tensor.name), tensor=tensor)
        for op in workload.ops:
            self.graph.add_node(("op", op.name), op=op)
            for name in op.inputs:
                self.graph.add_edge(("tensor", name), ("op", op.name))
            self.graph.add_edge(("op", op.name), ("tensor", op.output))
        self.position = {op.name: i for i, op in enumerate(workload.ops)}

    @property
    def ops(self) -> tuple[Op, ...]:
        return self.workload.ops

    def tensor(self, name: str) -> Tensor:
        return self.workload.tensors[name]

    def producer(self, tensor: str) -> Op | None:
        preds = list(self.graph.predecessors(("tensor", tensor)))
        return self.graph.nodes[preds[0]]["op"] if preds else None

    def consumers(self, tensor: str) -> list[Op]:
        ops = [self.graph.nodes[n]["op"] for n in self.graph.successors(("tensor", tensor))]
        return sorted(ops, key=lambda op: self.position[op.name])
