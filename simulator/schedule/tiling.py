"""Matmul tiling: the rules a tiling must obey, and a legal default derived from shapes.

Vocabulary follows Ascend C's TCubeTiling: `base` m/n/k is one Cube call
(one block in L0A/L0B/L0C), `step.k` how many base-k blocks one MTE2 load
stages in L1, `order` which output dimension the loop walks first (n: walk
along N, keeping the A panel), `buffers` the ping-pong depth of every staged
buffer, `acc_buffers` that of the L0C accumulators (Ascend's dbL0C: 1 frees L0C
for twice the block, at the price of the Cube waiting while a block drains),
`split` how output blocks are spread over cores (K is never split).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from ..config.hardware import ACCUMULATOR_BYTES, CONVERT, Hardware
from ..config.workload import TilingSpec
from ..cost import (
    SECTOR_BYTES,
    block_packets,
    cube_call_cycles,
    multicast_share,
    queued_transfers_cycles,
    same_address_ramp_cycles,
    shaped_rate,
)
from ..errors import TilingError
from ..ops import DTYPE_BYTES, matmul_dims, operands_of
from ..units import format_size


@dataclass(frozen=True)
class MatmulShape:
    m: int
    n: int
    k: int
    a_bytes: int  # bytes per element of A, B and the output
    b_bytes: int
    out_bytes: int
    dtype: str  # the Cube's input dtype (selects the fractal)
    batch: int = 1  # independent matmuls of this shape (batch_matmul)
    gemms: int = 1  # GEMMs sharing A in one kernel (2 for a dual gate/up GEMM)
    a_nz: bool = False  # A or B stored in the fractal NZ layout (cost.block_packets)
    b_nz: bool = False
    a_transposed: bool = False  # A stored K x M, or B stored N x K
    b_transposed: bool = False

    @property
    def cube_b_bytes(self) -> int:
        """Bytes per element of B in L0B: the Cube's dtype, wider than B's own where fp16
        activations meet int8 weights (weight-only quantization) or an int8 or fp8 KV cache,
        converted on the way in."""
        return DTYPE_BYTES[self.dtype]

    @property
    def converts_b(self) -> bool:
        """B narrower than A (see cube_b_bytes): each B block is converted before the Cube."""
        return self.cube_b_bytes > self.b_bytes


@dataclass(frozen=True)
class Tiling:
    """One kernel's tiling with every field decided: what the file fixed, the rest derived.
    Kept apart from TilingSpec (what the file said) so that the lowering, the estimate and
    the tuner all work from the same complete, legal answer."""

    base_m: int
    base_n: int
    base_k: int
    step_k: int
    order: str
    buffers: int
    split_b: int
    split_m: int
    split_n: int
    acc_buffers: int | None = None  # L0C accumulator depth (Ascend's dbL0C); None = buffers
    # `split: blocks`: every base block is a cell of its own, dealt to the cores in turn (cell
    # i to core i mod cores), so more blocks than cores run in waves, as a CUDA grid or
    # CATLASS's block scheduler runs them; split_b/m/n then count the blocks
    split_blocks: bool = False

    @property
    def l0c_buffers(self) -> int:
        return self.acc_buffers or self.buffers

    def cell_extents(self, shape: MatmulShape, fractal: tuple[int, int, int]) -> tuple[int, ...]:
        """The batch, rows and columns of one cell of the split (the last cell may get less):
        whole base blocks with `split: blocks`, else an even share rounded to the fractal."""
        if self.split_blocks:
            return 1, self.base_m, self.base_n
        return (
            -(-shape.batch // self.split_b),
            single_core_extent(shape.m, self.split_m, fractal[0]),
            single_core_extent(shape.n, self.split_n, column_align(shape, fractal[1])),
        )

    def cells(
        self, shape: MatmulShape, fractal: tuple[int, int, int]
    ) -> list[tuple[range, tuple[int, int], tuple[int, int]]]:
        """Every cell of the split that holds work: its batches, rows and columns."""
        cell_b, cell_m, cell_n = self.cell_extents(shape, fractal)
        return [
            (
                range(b0, min(shape.batch, b0 + cell_b)),
                (m0, min(shape.m, m0 + cell_m)),
                (n0, min(shape.n, n0 + cell_n)),
            )
            for b0 in range(0, self.split_b * cell_b, cell_b)
            for m0 in range(0, self.split_m * cell_m, cell_m)
            for n0 in range(0, self.split_n * cell_n, cell_n)
            if b0 < shape.batch and m0 < shape.m and n0 < shape.n
        ]

    def cores_used(self, cores: int) -> int:
        return min(cores, self.split_b * self.split_m * self.split_n)

    def waves(self, cores: int) -> int:
        """How many cells the busiest core runs, one after another."""
        return -(-self.split_b * self.split_m * self.split_n // cores)

    def to_dict(self) -> dict:
        return {
            "base": {"m": self.base_m, "n": self.base_n, "k": self.base_k},
            "step": {"k": self.step_k},
            "order": self.order,
            "buffers": self.buffers,
            "acc_buffers": self.l0c_buffers,
            "split": {
                "b": self.split_b,
                "m": self.split_m,
                "n": self.split_n,
                **({"blocks": True} if self.split_blocks else {}),
            },
        }


def gemm_shape(gemms: list, tensors: dict) -> MatmulShape:
    """The shape of a kernel's GEMMs (two only when they share A and have equal shapes)."""
    op = gemms[0]
    a, b = (tensors[name] for name in op.inputs)
    batch, m, n, k = matmul_dims(operands_of(op, tensors), op.attrs)
    return MatmulShape(
        m=m,
        n=n,
        k=k,
        a_bytes=DTYPE_BYTES[a.dtype],
        b_bytes=DTYPE_BYTES[b.dtype],
        out_bytes=DTYPE_BYTES[tensors[op.output].dtype],
        dtype=a.dtype,
        batch=batch,
        gemms=len(gemms),
        a_nz=a.layout == "nz",
        b_nz=b.layout == "nz",
        a_transposed=op.attrs.get("transpose_a", False),
        b_transposed=op.attrs.get("transpose_b", False),
    )


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def single_core_extent(total: int, parts: int, align: int) -> int:
    """Each core's share of a dimension, rounded up to the alignment (the last core gets less)."""
    return round_up(-(-total // parts), align)


def column_align(shape: MatmulShape, fn: int) -> int:
    """The alignment of a core's share of N: whole fractals, and whole 32-byte sectors of B's
    rows, so that neighbouring cores never fetch the same sector."""
    return math.lcm(fn, max(1, SECTOR_BYTES // shape.b_bytes))


def buffer_needs(shape: MatmulShape, t: Tiling) -> dict[str, tuple[int, str]]:
    """Bytes each per-core buffer needs for this tiling, with the formula that gives them."""
    a, b, db, g = shape.a_bytes, shape.b_bytes, t.buffers, shape.gemms
    gemms = f"{g} GEMMs × " if g > 1 else ""
    l1 = (t.base_m * t.base_k * a + g * t.base_k * t.base_n * b) * t.step_k * db
    b0 = shape.cube_b_bytes
    return {
        "L0A": (
            t.base_m * t.base_k * a * db,
            f"base.m × base.k × {a} B × buffers = {t.base_m} × {t.base_k} × {a} × {db}",
        ),
        "L0B": (
            g * t.base_k * t.base_n * b0 * db,
            f"{gemms}base.k × base.n × {b0} B × buffers = {t.base_k} × {t.base_n} × {b0} × {db}",
        ),
        "L0C": (
            g * t.base_m * t.base_n * ACCUMULATOR_BYTES * t.l0c_buffers,
            f"{gemms}base.m × base.n × {ACCUMULATOR_BYTES} B × acc_buffers = {t.base_m} × "
            f"{t.base_n} × {ACCUMULATOR_BYTES} × {t.l0c_buffers}",
        ),
        "L1": (
            l1,
            f"(base.m × base.k × {a} B + {gemms}base.k × base.n × {b} B) × step.k × "
            f"buffers = ({t.base_m} × {t.base_k} × {a} + {g} × {t.base_k} × {t.base_n} × "
            f"{b}) × {t.step_k} × {db}",
        ),
    }


def check_tiling(shape: MatmulShape, t: Tiling, hw: Hardware, path: str, kernel: str) -> list[str]:
    """Every rule the tiling breaks, as 'path.field: rule (numbers)'."""
    fm, fn, fk = hw.cube.fractal[shape.dtype]
    problems = []
    for dim, value, frac, total in (
        ("m", t.base_m, fm, shape.m),
        ("n", t.base_n, fn, shape.n),
        ("k", t.base_k, fk, shape.k),
    ):
        if value % frac:
            problems.append(
                f"{path}.base.{dim}: {value} is not a multiple of the Cube fractal "
                f"{dim}={frac} for {shape.dtype}"
            )
        elif value > round_up(total, frac):
            problems.append(
                f"{path}.base.{dim}: {value} is larger than the problem: kernel "
                f"'{kernel}' has {dim.upper()}={total} (at most "
                f"{round_up(total, frac)} after fractal padding)"
            )
    if t.step_k * t.base_k > round_up(shape.k, fk) and t.step_k > 1:
        problems.append(
            f"{path}.step.k: step.k × base.k = {t.step_k} × {t.base_k} = "
            f"{t.step_k * t.base_k} is larger than K={shape.k} of kernel '{kernel}'"
        )
    if t.split_b * t.split_m * t.split_n > hw.cores and not t.split_blocks:
        problems.append(
            f"{path}.split: split.b × split.m × split.n = {t.split_b} × {t.split_m} "
            f"× {t.split_n} = {t.split_b * t.split_m * t.split_n} cores, but "
            f"{hw.name} has {hw.cores}"
        )
    if t.split_b > shape.batch:
        problems.append(
            f"{path}.split.b: {t.split_b} is larger than the batch of kernel "
            f"'{kernel}' ({shape.batch})"
        )
    for buffer, (need, formula) in buffer_needs(shape, t).items():
        capacity = hw.buffer_bytes[buffer]
        if need > capacity:
            problems.append(
                f"{path}: does not fit {buffer} for kernel '{kernel}': {formula} = "
                f"{need} B ({format_size(need)}) > {buffer} capacity {capacity} B "
                f"({format_size(capacity)})"
            )
    return problems


def resolve_tiling(shape: MatmulShape, spec: TilingSpec, hw: Hardware, kernel: str) -> Tiling:
    """The file's tiling with every unspecified field derived; refused if it breaks a rule."""
    derived = default_tiling(shape, hw, spec)
    given = {k: v for k, v in asdict(spec).items() if k != "path" and v is not None}
    tiling = Tiling(**{**asdict(derived), **given})
    if tiling.split_blocks:
        tiling = replace(
            tiling,
            split_b=shape.batch,
            split_m=-(-shape.m // tiling.base_m),
            split_n=-(-shape.n // tiling.base_n),
        )
    problems = check_tiling(shape, tiling, hw, spec.path or "schedule.tiling", kernel)
    if problems:
        raise TilingError("\n".join(problems))
    return tiling


NOTHING_FIXED = TilingSpec()


def default_tiling(shape: MatmulShape, hw: Hardware, fixed: TilingSpec = NOTHING_FIXED) -> Tiling:
    """A legal tiling derived from the shapes and the buffer sizes, honouring fields already fixed.

    For each core split that keeps the busiest core within 15% of the least work, and with
    double or single accumulators: base blocks as large as double-buffering in L0 allows (m up
    to 128, n up to 256, then k as deep as L0A/L0B allow) and as many base-k blocks per L1
    stage as fit, or the most whose rows of A (along K) are whole MTE2 packets, or the most
    that cut K into equal chunks, if fewer; of those, the one the analytic estimate says is
    fastest. (A single accumulator makes the Cube wait for each block's drain but lets
    blocks be twice as large, which a long K repays.)
    """
    fm, fn, _ = hw.cube.fractal[shape.dtype]
    accumulators = [fixed]
    if fixed.acc_buffers is None and fixed.buffers != 1:
        accumulators.append(replace(fixed, acc_buffers=1))
    candidates = [
        tiling
        for split in _splits(shape, hw, fm, fn, fixed)
        for spec in accumulators
        for tiling in _blocks_for(shape, hw, split, spec)
    ]
    if not candidates:  # a fixed split the shapes cannot use: keep it, the rules say why
        split = (fixed.split_b or 1, fixed.split_m or 1, fixed.split_n or hw.cores)
        return _blocks_for(shape, hw, split, fixed)[0]
    return min(
        candidates,
        key=lambda t: (estimate_cycles(shape, hw, t), -t.split_b, t.split_m, -t.step_k),
    )


def _blocks_for(
    shape: MatmulShape, hw: Hardware, split: tuple[int, int, int], fixed: TilingSpec
) -> list[Tiling]:
    """The split's tilings: one per L1 stage depth worth estimating, deepest first."""
    fm, fn, fk = hw.cube.fractal[shape.dtype]
    buffers = fixed.buffers or 2
    acc = fixed.acc_buffers or buffers
    g = shape.gemms
    core_m = single_core_extent(shape.m, split[1], fm)
    core_n = single_core_extent(shape.n, split[2], column_align(shape, fn))
    base_m = fixed.base_m or min(core_m, 128)
    # a core's share of N is aligned to whole sectors, but a block need not pass the problem
    base_n = fixed.base_n or min(core_n, round_up(shape.n, fn), 256)

    def too_large(base_m: int, base_n: int) -> bool:
        """The blocks overflow L0C, or L0A/L0B even one fractal deep."""
        return (
            g * base_m * base_n * ACCUMULATOR_BYTES * acc > hw.buffer_bytes["L0C"]
            or base_m * fk * shape.a_bytes * buffers > hw.buffer_bytes["L0A"]
            or g * fk * base_n * shape.cube_b_bytes * buffers > hw.buffer_bytes["L0B"]
        )

    while too_large(base_m, base_n):
        if base_n > fn and not fixed.base_n:
            base_n = round_up(base_n // 2, fn)
        elif base_m > fm and not fixed.base_m:
            base_m = round_up(base_m // 2, fm)
        else:
            break
    if fixed.base_k:
        base_k = fixed.base_k
    else:
        k_room = min(
            hw.buffer_bytes["L0A"] // (base_m * shape.a_bytes * buffers),
            hw.buffer_bytes["L0B"] // (g * base_n * shape.cube_b_bytes * buffers),
        )
        base_k = max(fk, min(k_room // fk * fk, round_up(shape.k, fk), 256))
    if fixed.step_k:
        steps = [fixed.step_k]
    else:  # as many as fit L1, the most whose rows of A are whole packets, and the most that
        # cut K into equal chunks (no short last chunk), where fewer
        per_step = (base_m * shape.a_bytes + g * base_n * shape.b_bytes) * base_k * buffers
        k_blocks = round_up(shape.k, fk) // base_k
        most = max(1, min(hw.buffer_bytes["L1"] // per_step, k_blocks))
        steps = [most]
        packet = hw.engines["MTE2"].packet_bytes
        if packet:
            row_bytes = base_k * shape.a_bytes  # A's rows run along K
            whole = next((s for s in range(most, 0, -1) if s * row_bytes % packet == 0), 0)
            if 0 < whole < most:
                steps.append(whole)
        even = next(s for s in range(most, 0, -1) if k_blocks % s == 0)
        if even not in steps and 2 * even > most:
            steps.append(even)
    return [
        Tiling(
            base_m,
            base_n,
            base_k,
            step_k,
            fixed.order or "n",
            buffers,
            *split,
            acc_buffers=fixed.acc_buffers,
        )
        for step_k in steps
    ]


def _splits(
    shape: MatmulShape, hw: Hardware, fm: int, fn: int, fixed: TilingSpec = NOTHING_FIXED
) -> list[tuple[int, int, int]]:
    """Core splits (honouring fixed fields) whose busiest core has at most 15% more output
    than the best one's."""
    options = []
    for split_b in range(1, min(shape.batch, hw.cores) + 1):
        if fixed.split_b and split_b != fixed.split_b:
            continue
        for split_m in range(1, hw.cores // split_b + 1):
            if fixed.split_m and split_m != fixed.split_m:
                continue
            split_n = fixed.split_n or hw.cores // (split_b * split_m)
            if split_b * split_m * split_n > hw.cores:
                continue
            core_m = single_core_extent(shape.m, split_m, fm)
            core_n = single_core_extent(shape.n, split_n, column_align(shape, fn))
            if core_m > round_up(shape.m, fm) or core_n > round_up(
                shape.n, column_align(shape, fn)
            ):
                continue
            options.append(
                (-(-shape.batch // split_b) * core_m * core_n, (split_b, split_m, split_n))
            )
    if not options:
        return []
    least = min(work for work, _ in options)
    return sorted({split for work, split in options if work <= 1.15 * least})


def multicast_sides(t: Tiling, cluster: int, gemms: int) -> dict[int, int]:
    """The operand sides whose L1 loads a cluster of `cluster` cores shares (side 0 is A,
    1.. the Bs), with the cores each read serves. Cores next to each other in the M split
    stage the same B blocks at the same steps, and cores next to each other in the N split
    the same A blocks; a cluster forms along M if the split fills whole clusters, else
    along N."""
    if cluster == 1 or t.split_blocks:  # dealt blocks: not modelled as clusters
        return {}
    if t.split_m % cluster == 0:
        return dict.fromkeys(range(1, gemms + 1), cluster)
    if t.split_n % cluster == 0:
        return {0: cluster}
    return {}


def load_packets(
    rows: int,
    cols: int,
    tensor_rows: int,
    tensor_cols: int,
    element_bytes: int,
    nz: bool,
    transposed: bool,
    packet_bytes: int,
) -> float:
    """The packets one load of a rows × cols operand block moves as (stored transposed: cols ×
    rows), averaged over the column offsets successive blocks start at."""
    if not packet_bytes:
        return 0.0
    if transposed:
        rows, cols, tensor_rows, tensor_cols = cols, rows, tensor_cols, tensor_rows
    rows, cols = min(rows, tensor_rows), min(cols, tensor_cols)
    blocks = min(
        -(-tensor_cols // cols), packet_bytes // math.gcd(cols * element_bytes, packet_bytes)
    )
    return (
        sum(
            block_packets(
                0,
                rows,
                j * cols,
                min((j + 1) * cols, tensor_cols),
                tensor_rows,
                tensor_cols,
                element_bytes,
                packet_bytes,
                nz,
            )
            for j in range(blocks)
        )
        / blocks
    )


def estimate_cycles(
    shape: MatmulShape,
    hw: Hardware,
    t: Tiling,
    epilogue: tuple[str, ...] = (),
    epilogue_in_registers: bool = False,
) -> float:
    """The busiest core's time for a tiling, from the same rates the engine uses, with no
    simulation: each pipe's total work, overlapped (buffers 2) or partly serialised
    (buffers 1), plus filling the pipeline, plus, on a chip whose L2 serialises same-address
    reads, the ramp of cores that start one shared read apart; never below the chip's HBM
    time. `epilogue` lists the vector cost classes of a fused epilogue,
    `epilogue_in_registers` whether it works on the accumulators in place. It ranks
    tilings; the simulation decides."""
    fm, fn, fk = hw.cube.fractal[shape.dtype]
    g = shape.gemms
    batch, core_m, core_n = t.cell_extents(shape, hw.cube.fractal[shape.dtype])
    core_m, core_n = min(shape.m, core_m), min(shape.n, core_n)
    m_blocks, n_blocks = -(-core_m // t.base_m), -(-core_n // t.base_n)
    k_blocks = -(-shape.k // t.base_k)
    waves = t.waves(hw.cores)  # cells the busiest core runs one after another
    blocks = batch * m_blocks * n_blocks * waves
    rows = min(t.base_m, shape.m)
    cube: float = (
        blocks
        * k_blocks
        * g
        * cube_call_cycles(hw.cube, rows, t.base_n, t.base_k, hw.cube.fractal[shape.dtype])
    )
    mte1_latency, rate_a = _route(hw, "L1", "L0A")
    _, rate_b = _route(hw, "L1", "L0B")
    mte1 = (
        blocks
        * k_blocks
        * (
            mte1_latency
            + round_up(rows, fm) * t.base_k * shape.a_bytes / rate_a
            + g * (mte1_latency + t.base_k * t.base_n * shape.b_bytes / rate_b)
        )
    )
    chunk = min(shape.k, t.base_k * t.step_k)
    chunks = -(-shape.k // chunk)
    a_loads = batch * m_blocks * waves if chunks == 1 and t.order == "n" else blocks * chunks
    b_loads = batch * n_blocks * waves if chunks == 1 and t.order == "m" else blocks * chunks
    a_load_bytes = a_loads * rows * chunk * shape.a_bytes
    b_load_bytes = g * b_loads * chunk * t.base_n * shape.b_bytes
    mte2_bytes = a_load_bytes + b_load_bytes
    shared = multicast_sides(t, hw.multicast_cores, g)  # a cluster's one read serves all
    port_share = (
        multicast_share(a_load_bytes, shared.get(0, 1))
        + multicast_share(b_load_bytes, shared.get(1, 1))
    ) / mte2_bytes
    mte2_latency, path_rate = _route(hw, "HBM", "L1")
    # short or misaligned rows move below the path's rate (cost.shaped_rate)
    packet = hw.engines["MTE2"].packet_bytes
    a_rate = shaped_rate(
        path_rate,
        rows * chunk * shape.a_bytes,
        load_packets(
            rows, chunk, shape.m, shape.k, shape.a_bytes, shape.a_nz, shape.a_transposed, packet
        ),
        packet,
    )
    b_rate = shaped_rate(
        path_rate,
        chunk * t.base_n * shape.b_bytes,
        load_packets(
            chunk, t.base_n, shape.k, shape.n, shape.b_bytes, shape.b_nz, shape.b_transposed, packet
        ),
        packet,
    )
    mte2_rate = mte2_bytes / (a_load_bytes / a_rate + b_load_bytes / b_rate)
    l2, hbm = hw.memories["L2"], hw.memories["HBM"]
    used = t.cores_used(hw.cores)
    out_bytes = shape.batch * shape.m * shape.n * shape.out_bytes
    hbm_bytes = _hbm_bytes(
        shape, hw, *((t.split_m, t.split_n) if t.split_blocks else (m_blocks, n_blocks))
    )
    miss_bytes = min(mte2_bytes, hbm_bytes / used)  # this core's share of the misses
    transfers = a_loads + g * b_loads
    miss_transfers = transfers * miss_bytes / mte2_bytes
    # transfers in flight: the engine's queue, or both operands' staged slots if fewer
    in_flight = min(hw.engines["MTE2"].queue_depth, 2 * t.buffers)
    mte2 = queued_transfers_cycles(
        transfers,
        mte2_latency + l2.latency_cycles + miss_transfers / transfers * hbm.latency_cycles,
        (mte2_bytes - miss_bytes) / min(mte2_rate, l2.sustained_bytes_per_cycle / used / port_share)
        + miss_bytes / min(mte2_rate, hbm.sustained_bytes_per_cycle / used),
        in_flight,
    )
    # an epilogue drains each block to UB, unless it works on the accumulators in place
    fix_latency, fix_rate = _route(
        hw, "L0C", "UB" if epilogue and not epilogue_in_registers else "HBM"
    )
    drain = blocks * g * (fix_latency + rows * t.base_n * shape.out_bytes / fix_rate)
    vector = 0.0
    if shape.converts_b:  # each B block is converted as it moves to L0B
        vector += (
            (blocks * k_blocks * g * t.base_k * t.base_n * shape.cube_b_bytes)
            * hw.vector.cost_factor[CONVERT]
            / hw.vector.bytes_per_cycle
        )
    for cost_class in epilogue:
        vector += (
            batch
            * core_m
            * core_n
            * 2
            * hw.vector.cost_factor[cost_class]
            / hw.vector.bytes_per_cycle
        )
    stages = [mte2, mte1, cube, drain, vector]
    if t.l0c_buffers == 1:  # one accumulator: the Cube waits while each block drains
        cube += drain
        stages[2] = cube
    if t.buffers == 2:  # every stage overlaps the others: the slowest sets the pace
        steady = max(stages)
    else:  # one slot: staging the next chunk waits until MTE1 moved this one
        steady = max(mte2 + mte1, cube + mte1, drain, vector)
    # filling and draining the pipeline: one step of every stage that does not set the pace
    steps = max(1, blocks * chunks)
    chip = (hbm_bytes + out_bytes) / hbm.sustained_bytes_per_cycle
    fill = hbm.latency_cycles + (sum(stages) - steady) / steps
    ramp = 0.0
    if not t.split_blocks:  # split_n cores stage each A chunk at once, split_m each B chunk
        a_chunk, b_chunk = rows * chunk * shape.a_bytes, g * chunk * t.base_n * shape.b_bytes
        ramp = same_address_ramp_cycles(hw, ((t.split_n, a_chunk), (t.split_m, b_chunk)))
    # the chip loses half a ramp's capacity where it is bound by HBM, the last core all of it
    return max(steady, chip) + fill + (ramp / 2 if chip >= steady else ramp)


def _hbm_bytes(shape: MatmulShape, hw: Hardware, m_blocks: int, n_blocks: int) -> float:
    """Operand bytes from HBM: each core re-reads its A rows per N block and its B columns
    per M block; a re-read operand that fits half the L2 is read from HBM once."""
    a_bytes = shape.batch * shape.m * shape.k * shape.a_bytes
    b_bytes = shape.batch * shape.k * shape.n * shape.b_bytes * shape.gemms
    half = hw.memories["L2"].capacity_bytes // 2
    return a_bytes * (n_blocks if a_bytes > half else 1) + b_bytes * (
        m_blocks if b_bytes > half else 1
    )


def _route(hw: Hardware, src: str, dst: str) -> tuple[int, float]:
    engine, rate = hw.route(src, dst)
    return engine.latency_cycles, rate
