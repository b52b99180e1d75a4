"""The timing rules of the model, each stated once.

The engine and its reference twin time instructions with these rules, the lowering
sets the cycles of each compute instruction with them, and the analytic side (the
roofline, the tuner's estimate and its kernel bound) reasons with the same rules. A
change to a mechanism is made here and reaches all of them.

  a move:        its engine's start-up, then its bytes at the path's rate (a move through
                 a shared memory also shares that memory's bandwidth: engine/bandwidth.py);
  a transfer's shape: a global transfer moves a tile as contiguous runs (row-major: a row
                 each; fractal NZ: a 32-byte-wide column of fractals each; one run if the
                 tile spans the tensor that way); an engine with a packet size cuts each run
                 at packet boundaries and moves each piece as whole, half and quarter
                 packets, each taking a whole packet's time, so short or misaligned rows
                 move below the path's rate;
  a strided read: a slice read in place (x[..., ::step]) moves each element as a run of
                 its own, and memory moves whole 32-byte sectors around the elements it keeps;
  a multicast:   a read that serves several cores at once crosses the L2 port once: each
                 core's transfer carries its share of the port's bytes (and of its own rate);
  an engine's queue: up to its queue depth of global transfers in flight, their start-ups
                 overlapping earlier transfers' data, which moves in order;
  a Cube call:   the Cube's pipeline fill, then one fractal step per cycle, partial
                 fractals padded;
  a vector op:   the unit's start-up, then elements × the widest operand's bytes × the
                 op class's cost factor at the unit's rate; a row-wise op over a row longer
                 than UB holds: two passes over the row's chunks, its cost split between them;
  a launch:      the host issues kernels one launch overhead apart (all at once after one
                 with graph launch) while the device runs the earlier ones, and a kernel starts
                 its device gap after the one before it ends, or when issued if that is later;
  a kernel's bound: the busier of the Cube (FLOPs at peak) and the vector unit (its work
                 at its rate on every core), against its bytes at peak HBM bandwidth;
  a collective:  rings over the chip-to-chip link, hierarchical where groups of chips share
                 a link and a slower one joins the groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .config.hardware import Cube, Hardware, Vector
from .config.link import Link
from .config.workload import Op, Tensor
from .errors import InvariantError
from .ops import OPS, operands_of


def transfer_cycles(nbytes: int, latency_cycles: int, bytes_per_cycle: float) -> int:
    """A move alone on its path: the engine's start-up, then its bytes at the path's rate."""
    return latency_cycles + math.ceil(nbytes / bytes_per_cycle)


NZ_FRACTAL_BYTES = 32  # Ascend's FRACTAL_NZ: 16-row fractals of 32 bytes per row (C0)


def piece_packets(nbytes: int, packet_bytes: int) -> int:
    """Packets for a piece within one packet: a half and a quarter packet if it holds them,
    and one more for any remainder (Ascend's 512/256/128-byte packets)."""
    half, quarter = packet_bytes // 2, packet_bytes // 4
    return nbytes // half + nbytes % half // quarter + (nbytes % quarter > 0)


def run_packets(offset: int, nbytes: int, packet_bytes: int) -> int:
    """Packets a contiguous run of `nbytes` moves as, starting `offset` bytes into a packet:
    cut at packet boundaries, whole packets for the middle and fewer for the ends."""
    head = min(nbytes, -offset % packet_bytes)
    middle, tail = divmod(nbytes - head, packet_bytes)
    return piece_packets(head, packet_bytes) + middle + piece_packets(tail, packet_bytes)


def block_packets(
    row0: int,
    row1: int,
    col0: int,
    col1: int,
    tensor_rows: int,
    tensor_cols: int,
    element_bytes: int,
    packet_bytes: int,
    nz: bool = False,
) -> int:
    """Packets a block [row0:row1, col0:col1] of a 2-D tensor moves as, the tensor starting on
    a packet boundary. Its contiguous runs: row-major, one per row, or one in all when the
    block spans whole rows; NZ (columns of fractals, each all rows deep), one per fractal
    column it touches, or one in all when the block spans whole columns."""
    if nz:
        width = NZ_FRACTAL_BYTES // element_bytes
        column_bytes = tensor_rows * NZ_FRACTAL_BYTES
        first, last = col0 // width, -(-col1 // width)
        if row1 - row0 >= tensor_rows:
            return run_packets(
                first * column_bytes % packet_bytes, (last - first) * column_bytes, packet_bytes
            )
        return strided_runs_packets(
            first * column_bytes + row0 * NZ_FRACTAL_BYTES,
            column_bytes,
            last - first,
            (row1 - row0) * NZ_FRACTAL_BYTES,
            packet_bytes,
        )
    pitch = tensor_cols * element_bytes
    if col1 - col0 >= tensor_cols:
        return run_packets(row0 * pitch % packet_bytes, (row1 - row0) * pitch, packet_bytes)
    return strided_runs_packets(
        row0 * pitch + col0 * element_bytes,
        pitch,
        row1 - row0,
        (col1 - col0) * element_bytes,
        packet_bytes,
    )


def strided_runs_packets(
    first_byte: int, stride_bytes: int, runs: int, run_bytes: int, packet_bytes: int
) -> int:
    """Packets of `runs` runs of `run_bytes`, `stride_bytes` apart from `first_byte` on: their
    offsets into a packet repeat every packet_bytes / gcd(stride, packet) runs."""
    if runs <= 0 or run_bytes <= 0:
        return 0
    period = min(runs, packet_bytes // math.gcd(stride_bytes, packet_bytes))
    per_run = [
        run_packets((first_byte + r * stride_bytes) % packet_bytes, run_bytes, packet_bytes)
        for r in range(period)
    ]
    repeats, rest = divmod(runs, period)
    return repeats * sum(per_run) + sum(per_run[:rest])


SECTOR_BYTES = 32  # GPUs read global memory in 32-byte sectors; Ascend moves 32-byte blocks


def strided_read_factor(step: int, element_bytes: int) -> int:
    """Bytes memory moves per byte kept when reading every `step`-th element: the whole
    sectors they sit in, up to one sector per element."""
    return max(1, min(step, SECTOR_BYTES // element_bytes))


def shaped_rate(bytes_per_cycle: float, nbytes: int, packets: float, packet_bytes: int) -> float:
    """A global transfer's rate on its engine: the path's, unless its packets, each taking a
    whole packet's time, come to more than its bytes."""
    if not packet_bytes or not nbytes:
        return bytes_per_cycle
    return bytes_per_cycle * nbytes / max(nbytes, packets * packet_bytes)


def multicast_share(nbytes: float, cores: int) -> float:
    """One core's share of a read multicast to `cores` cores: the L2 port moves the block once."""
    return nbytes / cores


def l2_port_bytes(hit_bytes: int, multicast: int) -> int:
    """The bytes a core's multicast read moves over the L2 port: its share, rounded up."""
    return math.ceil(multicast_share(hit_bytes, multicast))


def same_address_ramp_cycles(hw: Hardware, shared: Sequence[tuple[int, float]]) -> float:
    """Cycles between the first and the last core's start on a chip whose L2 serialises
    same-address reads (`shared`: per operand, how many cores stage each of its chunks at
    once, and a chunk's bytes): cores that start together are served a chunk one after
    another, so they begin one read apart, and stay apart (each reads a chunk the others
    read a step earlier or later)."""
    if not hw.l2_serialises_same_address:
        return 0.0
    rate = hw.route("L2", "L1")[1]
    return max((readers - 1) * nbytes / rate for readers, nbytes in shared)


def queued_transfers_cycles(
    transfers: float, start_cycles: float, data_cycles: float, in_flight: int
) -> float:
    """A run of transfers through one engine keeping `in_flight` of them under way: the
    start-ups overlap each other and earlier data, the data moves in order, so the run takes
    its data's time or its start-ups shared among the transfers in flight, the longer."""
    return max(data_cycles, (transfers * start_cycles + data_cycles) / in_flight)


def kernel_start_cycle(index: int, previous_end: int, hw: Hardware) -> int:
    """When kernel `index` (from 0) of a back-to-back sequence can start on the device."""
    return _device_ready_cycle(index, previous_end, hw) - min(
        0, host_lead_cycles(index, previous_end, hw)
    )


def host_lead_cycles(index: int, previous_end: int, hw: Hardware) -> int:
    """How far ahead of the device the host issued kernel `index` (from 0): the cycles from
    its issue to when the device could start it (the kernel before it ended, plus the gap);
    below 0 the device waits for the host."""
    issued = hw.launch_overhead_cycles * (1 if hw.graph_launch else index + 1)
    return _device_ready_cycle(index, previous_end, hw) - issued


def _device_ready_cycle(index: int, previous_end: int, hw: Hardware) -> int:
    """When the device could start kernel `index` were it issued: the kernel before it
    ended, plus the gap (the first, at once)."""
    return previous_end + hw.kernel_gap if index else 0


def launch_bound_cycles(kernels: int, hw: Hardware) -> float:
    """The least time launches alone take for `kernels` back-to-back kernels: the first
    launch and a device gap before each later kernel, and the host's issuing of them all."""
    if not kernels:
        return 0.0
    device = hw.launch_overhead_cycles + (kernels - 1) * hw.kernel_gap
    host = hw.launch_overhead_cycles * (1 if hw.graph_launch else kernels)
    return float(max(device, host))


def _ring_cycles(link: Link, chips: int, steps: int, share_bytes: float) -> float:
    """A ring collective over `chips` chips: the link's start-up once, then `steps` shares
    sent one after another, each its hop's latency and its bytes at the link's rate (none
    when alone)."""
    if chips == 1:
        return 0.0
    return link.latency_cycles + steps * (
        link.hop_latency_cycles + share_bytes / link.bytes_per_cycle
    )


def _groups(link: Link, chips: int) -> tuple[int, int, Link]:
    """(chips per group, groups, the link between groups) of `chips` chips on these links
    (Link.refusal judged them; one group needs no link between groups: its own stands in)."""
    group = min(chips, link.group_chips or chips)
    groups = chips // group
    if groups == 1:
        return group, 1, link
    if link.across is None:
        raise InvariantError(f"{chips} chips in groups of {group} with nothing between groups")
    return group, groups, link.across


def all_reduce_cycles(link: Link, chips: int, nbytes: float) -> float:
    """An all-reduce of `nbytes` on each of `chips` chips. One group: a ring, 2(N - 1)
    shares of nbytes/N. Groups of g joined by a slower link (`across`): a reduce-scatter in
    each group, an all-reduce of each chip's nbytes/g share across the groups, an
    all-gather in each group, as hierarchical collectives run."""
    group, groups, between = _groups(link, chips)
    if groups == 1:
        return _ring_cycles(link, chips, 2 * (chips - 1), nbytes / chips)
    inside = _ring_cycles(link, group, group - 1, nbytes / group)
    across = _ring_cycles(between, groups, 2 * (groups - 1), nbytes / group / groups)
    return 2 * inside + across


def all_gather_cycles(link: Link, chips: int, nbytes: float) -> float:
    """An all-gather of `nbytes` in all, nbytes/N from each of `chips` chips: a ring of N - 1
    shares; in groups, the shares first gathered across the groups, then within each."""
    group, groups, between = _groups(link, chips)
    inside = _ring_cycles(link, group, group - 1, nbytes / group)
    return _ring_cycles(between, groups, groups - 1, nbytes / chips) + inside


def fractal_steps(m: int, n: int, k: int, fractal: tuple[int, int, int]) -> int:
    """Fractal steps of an m × n × k product: one per cycle, partial fractals padded."""
    fm, fn, fk = fractal
    return math.ceil(m / fm) * math.ceil(n / fn) * math.ceil(k / fk)


def cube_call_cycles(cube: Cube, m: int, n: int, k: int, fractal: tuple[int, int, int]) -> int:
    """One Cube call (Mmad): the pipeline fill, then its fractal steps."""
    return cube.latency_cycles + fractal_steps(m, n, k, fractal)


def vector_op_cycles(
    vector: Vector, elements: int, widest_bytes: int, cost_class: str, factor: float | None = None
) -> int:
    """One vector instruction over `elements` values whose widest operand has
    `widest_bytes` per value, at its class's cost factor (or `factor`, a pass's part of it)."""
    factor = vector.cost_factor[cost_class] if factor is None else factor
    return vector.latency_cycles + math.ceil(
        elements * widest_bytes * factor / vector.bytes_per_cycle
    )


def row_pass_factors(vector: Vector, cost_class: str) -> tuple[float, float]:
    """A row-wise op over a row too long for UB runs in two passes over the row's chunks, as
    long-row norm and softmax kernels do: the statistics (a sum, a maximum), then applying
    them. The vector work is the op's own, split between the passes: the applying pass one
    elementwise pass, the statistics the rest; what the split adds is reading the row twice."""
    whole = vector.cost_factor[cost_class]
    apply = min(whole, vector.cost_factor["elementwise"])
    return whole - apply, apply


def vector_work(
    ops: tuple[Op, ...] | list[Op], tensors: dict[str, Tensor], vector: Vector
) -> float:
    """Bytes × cost factor of vector ops: their work in bytes at the unit's plain rate."""
    return sum(
        OPS[op.op].vector_work_bytes(operands_of(op, tensors), op.attrs)
        * vector.cost_factor[OPS[op.op].cost_class]
        for op in ops
    )


def cube_peak_cycles(cube_flops: int, dtype: str, hw: Hardware) -> float:
    """FLOPs at the Cube's peak rate for the dtype on every core."""
    return cube_flops / hw.peak_flops_per_cycle(dtype) if cube_flops else 0


def vector_peak_cycles(vector_work_bytes: float, hw: Hardware) -> float:
    """Vector work (bytes × cost factor) at the vector unit's rate on every core."""
    return vector_work_bytes / (hw.vector.bytes_per_cycle * hw.cores)


def compute_cycles(cube_flops: int, dtype: str, vector_work_bytes: float, hw: Hardware) -> float:
    """A kernel's compute bound: the Cube and the vector unit work side by side on every
    core, so the busier one bounds it."""
    return max(cube_peak_cycles(cube_flops, dtype, hw), vector_peak_cycles(vector_work_bytes, hw))


def memory_cycles(nbytes: float, hw: Hardware, level: str = "HBM") -> float:
    """Bytes at a shared memory's peak bandwidth: the memory bound of moving them."""
    return nbytes / hw.memories[level].peak_bytes_per_cycle
