"""The fusion pass: which ops run together as one kernel, and why the others do not.

The rules, stated once:
1. A matmul heads a kernel. Two matmuls that share their A operand and whose
   results meet only in `act(g) * u` (act: silu, gelu or relu) run as one
   dual-GEMM kernel with that product as its epilogue.
2. A kernel absorbs the chain of vector ops that follows its result, as long
   as each intermediate is read by exactly one op (otherwise it must reach
   HBM), the next op is not a matmul (the Cube reads its operands from L1,
   not UB), and the op's other inputs already exist when the kernel starts.
3. A row-wise op (softmax, layernorm, rmsnorm) needs whole rows on one core:
   after a matmul, that means the tiling's split.n is 1 (a core owns full
   rows) and a block of rows fits UB; after a dual GEMM it is not supported.
4. A vector op that no kernel absorbed heads its own vector kernel.
5. A reshape or a slice is a view: no kernel; its input goes to HBM and is read back
   reshaped, or sliced in place (`schedule.strided: copy` copies a slice first).
6. Attention: a batch_matmul whose scores only a softmax reads, whose probabilities only
   a second batch_matmul reads as its A operand, runs with them as one fused attention
   kernel (schedule/attention.py): the scores never leave the chip. The chip must bring the
   probabilities back to the Cube on chip (through the registers, or a UB->L1 path).
With `fusion: none` every op is its own kernel. Explicit groups are checked
against the same rules, and a group that breaks one is refused with the rule.
"""

from __future__ import annotations

from dataclasses import replace

from ..config.workload import Op, Workload
from ..errors import ConfigError
from ..graph.dataflow import DataflowGraph
from ..ops import OPS
from .attention_plan import attention_blocks, attention_shape, route_refusal
from .epilogue import epilogue_refusal
from .kernel import Kernel, Plan
from .tiling import TilingError

DUAL_ACTIVATIONS = ("silu", "gelu", "relu")
VIEW_READ = {"reshape": "under its new shape", "slice": "sliced in place"}


def plan_kernels(workload: Workload) -> Plan:
    graph = DataflowGraph(workload)
    fusion = workload.fusion
    if fusion == "none":
        reasons = {
            op.name: "schedule.fusion is none: every op runs as its own kernel"
            for op in graph.ops
            if OPS[op.op].unit == "vector"
        }
        return Plan(tuple(_kernel([op]) for op in graph.ops if OPS[op.op].unit != "view"), reasons)
    pass_ = _FusionPass(graph)
    plan = pass_.run_groups(fusion) if isinstance(fusion, tuple) else pass_.run()
    _refuse_unused_tilings(workload, plan)
    return plan


def _refuse_unused_tilings(workload: Workload, plan: Plan) -> None:
    """A tiling entry of an op that joined another op's kernel would be silently ignored:
    the kernel takes its first op's tiling. Refuse it, unless it says the same."""
    for kernel in plan.kernels:
        head = kernel.tiling_op
        if kernel.attention and head in workload.tiling:
            raise ConfigError(
                workload.source,
                [
                    f"{workload.tiling[head].path}: {head} heads the fused attention kernel "
                    f"{kernel.name}, whose blocks are derived from the buffers (schedule/"
                    "attention.py); remove this tiling, or keep the ops apart with fusion: none"
                ],
            )
        for op in kernel.ops[1:]:
            spec = workload.tiling.get(op.name)
            if spec is not None and replace(spec, path="") != replace(
                workload.tiling_for(head), path=""
            ):
                raise ConfigError(
                    workload.source,
                    [
                        f"{spec.path}: {op.name} runs in the kernel {kernel.name}, whose tiling is "
                        f"that of {head}; give it as schedule.tiling.{head} (or the same values "
                        f"for both), or fuse less"
                    ],
                )


def _kernel(ops: list[Op]) -> Kernel:
    gemms = tuple(op for op in ops if OPS[op.op].unit == "cube")
    epilogue = tuple(op for op in ops if OPS[op.op].unit == "vector")
    return Kernel("+".join(op.name for op in ops), tuple(ops), gemms, epilogue)


class _FusionPass:
    def __init__(self, graph: DataflowGraph):
        self.graph = graph
        self.workload = graph.workload
        self.assigned: set[str] = set()
        self.reasons: dict[str, str] = {}
        self.attention_refusals: dict[str, str] = {}  # second matmul -> why rule 6 failed

    def run(self, group_of: dict[str, set[str]] | None = None) -> Plan:
        """Grow kernels in execution order; `group_of` limits each head to its own group."""
        kernels = []
        for op in self.graph.ops:
            if op.name in self.assigned or OPS[op.op].unit == "view":
                continue
            allowed = None if group_of is None else group_of.get(op.name, set())
            kernels.append(self._grow(op, allowed))
        heads = {k.ops[0].name for k in kernels} | {
            op.name for op in self.graph.ops if OPS[op.op].unit == "view"
        }
        reasons = {
            name: self.attention_refusals.get(name, why)
            for name, why in self.reasons.items()
            if name in heads
        }
        for kernel in kernels:
            head = kernel.ops[0]
            if not kernel.gemms and head.name not in reasons:
                reasons[head.name] = (
                    "its inputs come from HBM ("
                    + ", ".join(head.inputs)
                    + "): no kernel before it leaves them on chip"
                )
        ordered = dict(sorted(reasons.items(), key=lambda item: self.graph.position[item[0]]))
        return Plan(tuple(kernels), ordered)

    def run_groups(self, groups: tuple[tuple[str, ...], ...]) -> Plan:
        """Fuse exactly the groups given; refuse a group the rules do not allow."""
        group_of = {name: set(group) for group in groups for name in group}
        plan = self.run(group_of=group_of)
        for group in groups:
            kernel = next((k for k in plan.kernels if group[0] in {o.name for o in k.ops}), None)
            got = sorted(
                (o.name for o in kernel.ops) if kernel else [], key=lambda n: self.graph.position[n]
            )
            want = sorted(group, key=lambda n: self.graph.position[n])
            if got != want:
                missing = [n for n in want if n not in got]
                why = (self.reasons.get(missing[0]) if missing else None) or (
                    f"{want[0]} is not first in execution order"
                    if got[:1] != want[:1]
                    else "the ops do not form one chain"
                )
                raise ConfigError(
                    self.workload.source,
                    [
                        f"schedule.fusion: group [{', '.join(group)}] cannot run as one kernel: "
                        f"'{(missing or want)[0]}' cannot join: {why}"
                    ],
                )
        return plan

    def _grow(self, head: Op, allowed: set[str] | None) -> Kernel:
        ops = [head]
        self.assigned.add(head.name)
        tail = head.output
        if head.op == "batch_matmul":
            attention = self._attention(head, allowed)
            if attention:
                self.assigned.update(op.name for op in attention)
                return _kernel([head, *attention])
        if OPS[head.op].unit == "cube":
            dual = self._dual(head, allowed)
            if dual:
                ops += dual
                self.assigned.update(op.name for op in dual)
                tail = dual[-1].output
        while True:
            nxt = self._next(tail, ops, allowed)
            if nxt is None:
                break
            ops.append(nxt)
            self.assigned.add(nxt.name)
            tail = nxt.output
        return _kernel(ops)

    def _dual(self, first: Op, allowed: set[str] | None) -> list[Op] | None:
        """[second matmul, act, mul] when `first` and another matmul meet in act(g) * u."""
        graph = self.graph
        for second in graph.consumers(first.inputs[0]):
            if (
                second is first
                or second.op != first.op
                or second.name in self.assigned
                or second.inputs[0] != first.inputs[0]  # shared A, not B
                or not self._available(second.inputs[1])
                or (allowed is not None and second.name not in allowed)
                or second.attrs.get("transpose_a") != first.attrs.get("transpose_a")
                or graph.tensor(second.output).shape != graph.tensor(first.output).shape
            ):
                continue
            for g, u in ((first.output, second.output), (second.output, first.output)):
                act_users, u_users = graph.consumers(g), graph.consumers(u)
                if len(act_users) != 1 or len(u_users) != 1:
                    continue
                act = act_users[0]
                if act.op not in DUAL_ACTIVATIONS:
                    continue
                mul_users = graph.consumers(act.output)
                if (
                    len(mul_users) == 1
                    and mul_users[0] is u_users[0]
                    and mul_users[0].op == "mul"
                    and set(mul_users[0].inputs) == {act.output, u}
                    and (allowed is None or {act.name, mul_users[0].name} <= allowed)
                ):
                    dual = [second, act, mul_users[0]]
                    refusal = self._epilogue_refusal(mul_users[0], [first, second, act])
                    if refusal is None:
                        return dual
                    self._why(second, f"a dual GEMM with {first.name} would not fit: {refusal}")
        return None

    def _attention(self, qk: Op, allowed: set[str] | None) -> list[Op] | None:
        """[softmax, pv] when `qk` heads a fused attention kernel (rule 6)."""
        graph = self.graph
        users = graph.consumers(qk.output)
        if len(users) != 1 or users[0].op != "softmax" or users[0].name in self.assigned:
            return None
        softmax = users[0]
        users = graph.consumers(softmax.output)
        if (
            len(users) != 1
            or users[0].op != "batch_matmul"
            or users[0].inputs[0] != softmax.output
            or users[0].attrs.get("transpose_a")
            or (allowed is not None and not {softmax.name, users[0].name} <= allowed)
        ):
            return None
        pv = users[0]
        if not self._available(pv.inputs[1]):
            self.attention_refusals[pv.name] = (
                f"fused attention: {pv.inputs[1]} does not exist when {qk.name} starts"
            )
            return None
        refusal = route_refusal(self.workload.hardware)
        if refusal is None:
            kernel = _kernel([qk, softmax, pv])
            try:
                attention_blocks(attention_shape(kernel, self.workload), self.workload.hardware)
            except TilingError as exc:
                refusal = str(exc)
        if refusal:
            self.attention_refusals[pv.name] = f"no fused attention with {qk.name}: {refusal}"
            return None
        return [softmax, pv]

    def _available(self, name: str) -> bool:
        """Whether a tensor exists when a kernel starts: an input, or made by an earlier
        kernel (through any views of it)."""
        producer = self.graph.producer(name)
        while producer is not None and OPS[producer.op].unit == "view":
            producer = self.graph.producer(producer.inputs[0])
        return producer is None or producer.name in self.assigned

    def _next(self, tensor: str, ops: list[Op], allowed: set[str] | None) -> Op | None:
        """The op that may join the kernel after `tensor`, or None (recording why not)."""
        graph = self.graph
        users = graph.consumers(tensor)
        for user in users:
            if OPS[user.op].unit == "view":
                self._why(
                    user,
                    f"a {user.op} is a view of {tensor} in HBM, so {tensor} is "
                    f"written there and read back {VIEW_READ[user.op]}",
                )
            elif OPS[user.op].unit == "cube":
                self._why(
                    user,
                    f"a matmul reads its operands through L1, not from UB: {tensor} "
                    "goes out to HBM (or L2) and back",
                )
            elif len(users) > 1:
                others = ", ".join(u.name for u in users if u is not user)
                self._why(
                    user,
                    f"its input {tensor} is also read by {others}, so {tensor} "
                    "must be written to HBM",
                )
        if len(users) != 1 or OPS[users[0].op].unit != "vector":
            return None
        user = users[0]
        if allowed is not None and user.name not in allowed:
            return None
        if user.name in self.assigned:
            return None
        # values the chain has already overwritten in place (the seed, earlier results),
        # except GEMM results no vector op has consumed yet (the u of a dual GEMM)
        vector_ops = [op for op in ops if OPS[op.op].unit == "vector"]
        consumed = {n for op in vector_ops for n in op.inputs}
        seed = [] if len(ops) > len(vector_ops) else [ops[0].inputs[0]]
        overwritten = (
            ({op.output for op in ops} | set(seed))
            - {tensor}
            - ({op.output for op in ops if OPS[op.op].unit == "cube"} - consumed)
        )
        for name in user.inputs:
            if name == tensor:
                continue
            if name in overwritten:
                self._why(user, f"it reads {name} again after the kernel overwrote it in place")
                return None
            if name in {op.output for op in ops}:
                continue
            producer = graph.producer(name)
            if producer is not None and not self._available(name):
                self._why(
                    user,
                    f"its other input {name} is produced by {producer.name}, which "
                    "runs after this kernel would start",
                )
                return None
        if graph.tensor(user.output).shape != graph.tensor(tensor).shape:
            self._why(user, f"it broadcasts {tensor} to a larger shape")
            return None
        refusal = self._epilogue_refusal(user, ops)
        if refusal:
            self._why(user, refusal)
            return None
        return user

    def _epilogue_refusal(self, op: Op, ops: list[Op]) -> str | None:

        gemms = [o for o in ops if OPS[o.op].unit == "cube"]
        if len(gemms) > 1 and OPS[op.op].rowwise:
            return f"{op.op} needs whole rows, which a dual-GEMM epilogue does not keep"
        return epilogue_refusal(self.workload, ops + [op])

    def _why(self, op: Op, reason: str) -> None:
        self.reasons[op.name] = reason  # the latest attempt is the one that decided
