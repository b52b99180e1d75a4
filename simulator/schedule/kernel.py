"""A kernel: the ops one launch runs (a matmul and its epilogue chain, fused attention, or
a lone vector op), and a plan of them, as the fusion pass forms them and every later stage
(tiling, lowering, the tuner) reads them."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.workload import Op
from ..ops import OPS


@dataclass(frozen=True)
class Kernel:
    name: str
    ops: tuple[Op, ...]  # in execution order
    gemms: tuple[Op, ...]  # the matmuls (none for a vector kernel)
    epilogue: tuple[Op, ...]  # vector ops run on chip after the GEMMs (or alone)

    @property
    def fused(self) -> bool:
        return len(self.ops) > 1

    @property
    def unit(self) -> str:
        return "cube" if self.gemms else "vector"

    @property
    def output(self) -> str:
        """The one tensor the kernel writes to HBM: the end of its chain."""
        return self.ops[-1].output

    @property
    def tiling_op(self) -> str:
        """The op whose tiling entry applies to the kernel."""
        return self.ops[0].name

    @property
    def attention(self) -> bool:
        """QK^T, softmax and PV as one kernel (rule 6): the second GEMM reads the
        probabilities the kernel's softmax made."""
        return len(self.gemms) == 2 and self.gemms[1].inputs[0] in {
            op.output for op in self.epilogue
        }

    @property
    def rowwise(self) -> bool:
        return any(OPS[op.op].rowwise for op in self.epilogue)


@dataclass(frozen=True)
class Plan:
    kernels: tuple[Kernel, ...]
    reasons: dict[str, str]  # op heading its own kernel -> why it is not fused
