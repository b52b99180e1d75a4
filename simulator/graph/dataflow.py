"""The dataflow graph of a workload, and its split into kernels.

Nodes are ops and tensors (a bipartite networkx DiGraph: tensor → op → tensor).
Kernels run one after another in a topological order of the ops. Without a
fusion pass every op is its own kernel, with its own HBM round trip and
launch overhead.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..config.workload import Op, Workload


@dataclass(frozen=True)
class Kernel:
    name: str
    ops: tuple[Op, ...]

    @property
    def fused(self) -> bool:
        return len(self.ops) > 1


def build_graph(workload: Workload) -> nx.DiGraph:
    graph = nx.DiGraph()
    for tensor in workload.tensors.values():
        graph.add_node(("tensor", tensor.name), tensor=tensor)
    for op in workload.ops:
        graph.add_node(("op", op.name), op=op)
        for name in op.inputs:
            graph.add_edge(("tensor", name), ("op", op.name))
        graph.add_edge(("op", op.name), ("tensor", op.output))
    return graph


def kernels(workload: Workload) -> list[Kernel]:
    """One kernel per op, in a deterministic topological order (file order breaks ties)."""
    graph = build_graph(workload)
    position = {op.name: i for i, op in enumerate(workload.ops)}
    order = nx.lexicographical_topological_sort(
        graph, key=lambda node: (0, position[node[1]]) if node[0] == "op" else (1, 0, node[1]))
    return [Kernel(node[1], (graph.nodes[node]["op"],)) for node in order if node[0] == "op"]
