"""How a fused attention kernel is planned before it is lowered (attention.py): the blocks
of queries and keys whose slots fit every buffer, whether a decode step's keys are split
(FlashDecoding) and into how many chunks, and which (batch, query block) units each core
runs, as FlashAttention-3's scheduler deals them."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from ..config.hardware import ACCUMULATOR_BYTES, Hardware
from ..config.workload import Tensor, Workload
from ..errors import TilingError
from ..ops import DTYPE_BYTES, causal_queries
from .kernel import Kernel
from .tiling import round_up

BLOCKS = (128, 64, 32, 16)  # query and key/value block sizes tried, largest first
O_BYTES = 4  # the running output O (and a split's partial O) is kept in fp32
BUFFERS = 2
# FlashAttention-3's split heuristic never splits this few key blocks (hopper/heuristics.h:
# with head_dim 128, a 512-token cache is never split)
MIN_SPLIT_BLOCKS = 4
PARTIALS = ".partials"  # a split attention's workspace is its output's name and this


@dataclass(frozen=True)
class AttentionShape:
    batch: int  # independent (sequence, key/value head) pairs
    queries: int  # rows per batch (grouped-query heads stacked along them)
    keys: int
    head_dim: int
    element_bytes: int  # of Q, the scores and the Cube's operands
    dtype: str
    k_bytes: int  # of K and V as stored: fewer than element_bytes for an int8 or fp8 KV
    v_bytes: int  # cache, whose blocks are converted to the Cube's dtype in L0B
    causal: bool
    sequence_queries: int = 0  # causal: one sequence's queries among the rows (causal_queries)

    def first_position(self, q0: int, q1: int) -> int:
        """The earliest position among the query rows q0..q1 (causal_queries)."""
        if q0 // self.sequence_queries != (q1 - 1) // self.sequence_queries:
            return self.keys - self.sequence_queries  # a new sequence starts in the block
        return self.keys - self.sequence_queries + q0 % self.sequence_queries

    def last_position(self, q0: int, q1: int) -> int:
        """The latest position among the query rows q0..q1."""
        if q0 // self.sequence_queries != (q1 - 1) // self.sequence_queries:
            return self.keys - 1  # a sequence ends in the block
        return self.keys - self.sequence_queries + (q1 - 1) % self.sequence_queries


def attention_shape(kernel: Kernel, workload: Workload) -> AttentionShape:
    qk, softmax, pv = kernel.ops
    q, k = (workload.tensors[n] for n in qk.inputs)
    v = workload.tensors[pv.inputs[1]]
    *batch, queries, head_dim = q.shape
    keys = k.shape[-2] if qk.attrs.get("transpose_b") else k.shape[-1]
    return AttentionShape(
        math.prod(batch),
        queries,
        keys,
        head_dim,
        DTYPE_BYTES[q.dtype],
        q.dtype,
        DTYPE_BYTES[k.dtype],
        DTYPE_BYTES[v.dtype],
        bool(softmax.attrs.get("causal")),
        causal_queries(queries, keys, softmax.attrs),
    )


def route_refusal(hw: Hardware) -> str | None:
    """Why the probabilities cannot reach the Cube on this chip, or None if they can."""
    if hw.epilogue_in_registers or any(
        ("UB", "L1") in e.path_bytes_per_cycle for e in hw.engines.values()
    ):
        return None
    return (
        f"{hw.name} has no path from UB back to L1 (UB->L1), so the softmax's probabilities "
        "cannot reach the Cube on chip"
    )


def attention_needs(s: AttentionShape, hw: Hardware, block_q: int, block_kv: int) -> dict[str, int]:
    """Bytes per core of each buffer for these blocks: the rings of _AttentionCore."""
    d, e = padded_head_dim(s.head_dim, hw, s.dtype), s.element_bytes
    in_registers = hw.epilogue_in_registers
    score_slots = 2 if in_registers else 1  # in the registers S stays until P·V has read it
    needs = {
        "L1": BUFFERS * (block_q * e + block_kv * (s.k_bytes + s.v_bytes)) * d,
        "L0A": BUFFERS * block_q * (d if in_registers else max(d, block_kv)) * e,  # Q, P
        "L0B": BUFFERS * block_kv * d * e,
        "L0C": (score_slots * block_q * block_kv + block_q * d) * ACCUMULATOR_BYTES,
        "UB": 0,
    }
    if not in_registers:  # P through L1 to L0A; S and P in UB; each P·V and the running O
        needs["L1"] += BUFFERS * block_q * block_kv * e
        needs["UB"] = BUFFERS * block_q * block_kv * e + 2 * block_q * d * O_BYTES
    return needs


def attention_blocks(s: AttentionShape, hw: Hardware) -> tuple[int, int]:
    """The largest query and key/value blocks whose slots fit every buffer."""
    fm, fn, fk = hw.cube.fractal[s.dtype]
    key_step = math.lcm(fn, fk)  # a key block is K's N side and V's K side: whole fractals of both
    for block_kv in BLOCKS:
        for block_q in BLOCKS:
            bq = min(round_up(s.queries, fm), block_q)
            bkv = min(round_up(s.keys, key_step), round_up(block_kv, key_step))
            needs = attention_needs(s, hw, bq, bkv)
            if all(n <= hw.buffer_bytes[b] for b, n in needs.items()):
                return bq, bkv
    raise TilingError(
        f"no attention block of at least {BLOCKS[-1]} x {BLOCKS[-1]} fits {hw.name}'s buffers "
        f"with head_dim {s.head_dim}"
    )


def attention_splits(s: AttentionShape, hw: Hardware, block_q: int, block_kv: int) -> int:
    """How many chunks each unit's keys are split into: 1 unless the (batch, query block)
    units leave cores idle; then as many chunks of whole key blocks as the idle cores allow.
    Causal attention (prefill) has query blocks enough and is not split, and neither are
    MIN_SPLIT_BLOCKS key blocks or fewer, whose split would not repay the second kernel."""
    units = s.batch * -(-s.queries // block_q)
    blocks = -(-s.keys // block_kv)
    if s.causal or units >= hw.cores or blocks <= MIN_SPLIT_BLOCKS:
        return 1
    per_chunk = -(-blocks // (hw.cores // units))
    return -(-blocks // per_chunk)


def attention_workspace(kernel: Kernel, workload: Workload) -> Tensor | None:
    """The fp32 partial outputs of a split attention kernel, each row its O and log-sum-exp
    (one batch per sequence and chunk), or None when the keys are not split (or no block
    fits, which lowering reports)."""
    s = attention_shape(kernel, workload)
    hw = workload.hardware
    try:
        splits = attention_splits(s, hw, *attention_blocks(s, hw))
    except TilingError:
        return None
    return partials_tensor(kernel, s, splits)


def partials_tensor(kernel: Kernel, s: AttentionShape, splits: int) -> Tensor | None:
    if splits == 1:
        return None
    shape = (s.batch * splits, s.queries, s.head_dim + 1)
    return Tensor(kernel.output + PARTIALS, shape, "fp32", "intermediate", kernel.name)


def deal_units(
    units: list[tuple[int, int, int]], s: AttentionShape, hw: Hardware, work: dict[int, int]
) -> list[list[tuple[int, int, int]]]:
    """The units each core runs, as FlashAttention-3's longest-first scheduler orders them:
    the batches (sequence, key/value head) in sections whose K and V fit in L2 together, and
    within a section the units with the most key blocks (`work`, per query block) first
    (causal: the last queries); each unit in turn goes to the core with the least work so
    far (the lowest-numbered among equals), as a free core takes the next. Units of equal
    work are dealt in turn."""
    kv_bytes = s.keys * s.head_dim * (s.k_bytes + s.v_bytes)
    section = max(1, hw.memories["L2"].capacity_bytes // kv_bytes)
    loads = [(0, core) for core in range(min(hw.cores, len(units)))]
    dealt: list[list[tuple[int, int, int]]] = [[] for _ in loads]
    for unit in sorted(units, key=lambda u: (u[0] // section, -work[u[1]], u[0])):
        load, core = heapq.heappop(loads)
        dealt[core].append(unit)
        heapq.heappush(loads, (load + work[unit[1]], core))
    return dealt


def keys_seen(s: AttentionShape, q0: int, q1: int) -> int:
    """How many keys the queries q0..q1 attend to: all, or (causal) up to the latest position
    among them; the key blocks past it are skipped, the one it falls in computed whole and
    masked."""
    return s.last_position(q0, q1) + 1 if s.causal else s.keys


def padded_head_dim(head_dim: int, hw: Hardware, dtype: str) -> int:
    fm, fn, fk = hw.cube.fractal[dtype]
    return round_up(head_dim, math.lcm(fn, fk))
