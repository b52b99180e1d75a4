"""The dataflow graph of a validated workload (config/resolve.py checked and ordered it): a
bipartite networkx DiGraph, tensor → op → tensor, that the fusion pass walks."""

from __future__ import annotations

import networkx as nx

from ..config.workload import Op, Tensor, Workload


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
