"""Sampled kernels (issue 23, schedule/sampling.py): which chunks a block simulates, how the
skipped ones warm L2, and a sampled run against the exact one."""

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import load_workload
from simulator.pipeline import lower_workload, simulate
from simulator.schedule.program import GlobalTransfer
from simulator.schedule.region import Region
from simulator.schedule.sampling import (
    TAIL_CHUNKS,
    WARM_UP_CHUNKS,
    WINDOW_CHUNKS,
    Extension,
    KernelSampling,
    Load,
    Skip,
    Touch,
    Window,
    block_plan,
    chunk_plan,
    covering_tail,
    extension_cycles,
    fluid_ends,
    kept_blocks,
    warm_order,
)

from .terminal import ROOT

FEWEST = WARM_UP_CHUNKS + 3 * WINDOW_CHUNKS + TAIL_CHUNKS  # the shortest block sampled


@given(st.integers(1, 400))
def test_a_plan_keeps_the_first_chunks_two_windows_and_the_tail_and_accounts_for_every_chunk(
    chunks,
):
    plan = chunk_plan(chunks)
    if chunks < FEWEST:
        assert plan is None
        return
    assert plan is not None
    kept = list(plan.kept)
    early, late = plan.windows
    assert kept == sorted(set(kept)) and kept[-1] == chunks - 1
    assert plan.width == WINDOW_CHUNKS
    assert kept[: late.first] == list(range(late.first))  # warm-up and early window: whole
    assert early.first == WARM_UP_CHUNKS and late.first == early.first + WINDOW_CHUNKS
    assert not early.late and late.late and early.skipped >= 0 and late.skipped >= 1
    assert abs(early.skipped - late.skipped) <= 1  # each stands for half the skipped chunks
    assert len(kept) + plan.skipped * WINDOW_CHUNKS == chunks  # every chunk, once
    assert len(kept) - late.first - WINDOW_CHUNKS >= TAIL_CHUNKS
    gaps = [plan.skipped_before(i) for i in range(len(kept))]
    assert [len(g) for g in gaps if g] == [plan.skipped * WINDOW_CHUNKS]  # one skip
    assert gaps[late.first]  # between the two windows
    marks = [plan.mark(i)[0] for i in range(len(kept))]
    assert [i for i, mark in enumerate(marks) if mark == "opens"] == [early.first, late.first]
    assert [i for i, mark in enumerate(marks) if mark == "closes"] == [
        early.first + WINDOW_CHUNKS - 1,
        late.first + WINDOW_CHUNKS - 1,
    ]


def test_skipped_chunks_warm_l2_in_the_order_the_cores_would_have_run_them():
    """Cores that reach a skip together warm it chunk by chunk across them; a core that got
    there more than a chunk later (at the cores' mean pace so far: 108 cycles a chunk) runs
    behind them."""

    def chunk(core: int, k: int) -> tuple[Touch, ...]:
        return (
            (Region("a", core, core + 1, k, k + 1), False),
            (Region("c", core, core + 1, 0, 1), True),
        )

    skips = {core: Skip(10, (chunk(core, 0), chunk(core, 1))) for core in range(3)}
    order = warm_order(skips, {0: 1000, 1: 1000, 2: 1250}, 0)
    expected = [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    assert order == [touch for core, k in expected for touch in chunk(core, k)]


@given(
    st.lists(st.sampled_from([(128, 128), (128, 32), (64, 128)]), min_size=1, max_size=60),
    st.integers(1, 12),
)
def test_a_block_plan_keeps_whole_windows_whose_shapes_the_skipped_blocks_repeat(shapes, chunks):
    plan = block_plan(shapes, chunks)
    if plan is None:
        return
    kept = list(plan.kept)
    early, late = plan.windows
    assert kept == sorted(set(kept)) and kept[-1] == len(shapes) - 1
    assert early.first * chunks >= WARM_UP_CHUNKS and plan.width * chunks >= WINDOW_CHUNKS
    assert plan.width % 2 == 0 and plan.skipped >= 1
    assert len(kept) + plan.skipped * plan.width == len(shapes)  # every block, once
    window = shapes[early.first : early.first + plan.width]
    (gap,) = [plan.skipped_before(i) for i in range(len(kept)) if plan.skipped_before(i)]
    assert [shapes[i] for i in gap] == window * plan.skipped
    late_blocks = kept[late.first : late.first + plan.width]
    assert [shapes[i] for i in late_blocks] == window and late_blocks[0] == gap.stop


def test_a_core_samples_each_row_of_blocks_on_its_own():
    """Two rows of ten blocks of four K chunks: each row keeps two blocks of warm-up, a
    window of two, then skips two, and keeps a window of two and its last two (rows reuse
    operands differently: a window stands only for blocks of its own row)."""
    kept = list(kept_blocks([(128, 128)] * 20, [0, 10], 4))
    assert [block for block, *_ in kept] == [*range(4), *range(6, 14), *range(16, 20)]
    assert [gap for *_, gap in kept if gap] == [range(4, 6), range(14, 16)]
    assert [mark for _, _, mark, _, _ in kept if mark] == ["opens", "closes"] * 4
    assert [window.late for _, _, mark, window, _ in kept if mark == "opens"] == [0, 1] * 2


def test_a_cores_last_blocks_are_kept_whole_across_its_rows():
    """The `last` blocks of a core are all simulated, whichever rows they end: here the last
    six of a row of thirty, the rest sampled as before."""
    kept = [block for block, *_ in kept_blocks([(128, 128)] * 30, [0], 4, last=6)]
    assert kept == [0, 1, 2, 3, *range(22, 30)]  # a window of two before the six
    whole = [block for block, plan, *_ in kept_blocks([(128, 128)] * 20, [0, 10], 4, 12)]
    assert whole[-10:] == list(range(10, 20))  # the last row's tail would cover it: whole


def test_the_tail_covers_the_l2_in_distinct_bytes():
    """Blocks the cores share count once: two cores reading one A block (2 bytes) and a B
    block each (1 byte) touch 4 distinct bytes a block, not 6."""
    cores = [[["A0", "B0"], ["A1", "B1"]], [["A0", "B2"], ["A1", "B3"]]]
    size = {"A0": 2, "A1": 2}.get

    def tail(cores, capacity):
        return covering_tail(cores, lambda block: block, capacity, lambda name: size(name, 1))

    assert tail(cores, 4) == 1
    assert tail(cores, 5) == 2
    assert tail(cores, 100) == 2  # all of it
    assert tail([], 100) == 0


@pytest.mark.slow
def test_a_sampled_kernel_leaves_l2_as_the_exact_one_does_for_the_next():
    """LLaMA-2-7B's 1024-token gate+up on ascend910 sampled by blocks, its tail covering
    L2: the down GEMM after it runs as it does after the exact one (with a two-block tail
    it ran 9% slow, its estimate 0.9%)."""
    from simulator.config.hardware import load_hardware
    from simulator.config.model import load_model
    from simulator.config.transformer import Step, step_workload

    hw = load_hardware("ascend910")
    workload = step_workload(
        load_model("llama2-7b"), hw, Step("prefill", 1, 1024, 1024), 1, "auto", "fp16", "fp16"
    )
    exact = simulate(workload)
    sampled = simulate(replace(workload, hardware=replace(hw)), sample=True)
    assert any(k.sampled is not None for k in sampled.kernels)
    (down, sampled_down) = (
        next(k for k in report.kernels if "down" in k.name) for report in (exact, sampled)
    )
    assert abs(sampled_down.cycles - down.cycles) <= max(
        sampled_down.sampled.error_cycles if sampled_down.sampled else 0, down.cycles / 1000
    )
    assert abs(sampled.cycles / exact.cycles - 1) <= 0.01


@pytest.mark.parametrize(
    "name, chip",
    [
        ("ffn_decode", "a100"),  # K chunks sampled
        pytest.param("linear_gelu", "tiny", marks=pytest.mark.slow),  # rows of blocks, a bias
        pytest.param("ffn_prefill", "h100", marks=pytest.mark.slow),  # chunks within blocks
    ],
)
def test_what_sampling_skips_is_what_the_exact_run_touches_beyond_the_sampled_one(name, chip):
    """The regions the skipped units warm L2 with (reads, and the blocks' stores) are, region
    for region, those the exact program's global transfers touch and the sampled one's do
    not."""
    workload = load_workload(ROOT / "workloads" / f"{name}.yaml", [f"hardware={chip}"])
    exact, sampled = (lower_workload(workload, sample).kernels for sample in (False, True))
    assert any(kernel.sampling is not None for kernel in sampled)
    for plain, kernel in zip(exact, sampled):
        skipped = Counter(
            touch
            for skips in (kernel.sampling.skips if kernel.sampling else ())
            for skip in skips
            for step in skip.steps
            for touch in step
        )
        assert _touched(plain) - _touched(kernel) == skipped


def _touched(kernel) -> Counter:
    """Each region a kernel's global transfers read (False) or write (True), counted."""
    return Counter(
        (instr.region, instr.dst == "HBM")
        for core in kernel.cores
        for queue in core.queues.values()
        for instr in queue
        if isinstance(instr, GlobalTransfer)
    )


@pytest.mark.slow
def test_long_k_gemm_sampled_is_within_a_percent_and_says_what_it_sampled():
    workload = load_workload(ROOT / "workloads" / "ffn_decode.yaml", ["hardware=a100"])
    exact, sampled = simulate(workload), simulate(workload, sample=True)
    kinds = [k.sampled for k in sampled.kernels if k.sampled is not None]
    assert kinds and all(s.simulated_chunks < s.chunks for s in kinds)
    assert all(k.sampled is None for k in exact.kernels)
    assert "sampled" not in exact.to_dict()["kernels"][0]
    assert sampled.instructions < exact.instructions
    assert abs(sampled.cycles / exact.cycles - 1) < 0.01
    hbm = [r.traffic["HBM"] for r in (sampled, exact)]
    assert (
        abs((hbm[0].read_bytes + hbm[0].write_bytes) / (hbm[1].read_bytes + hbm[1].write_bytes) - 1)
        < 0.01
    )
    assert hbm[0].write_bytes == hbm[1].write_bytes  # every block's drain is simulated
    for kernel in sampled.kernels:  # each sampled kernel's estimate covers its difference
        if kernel.sampled is not None:
            twin = next(k for k in exact.kernels if k.name == kernel.name)
            assert abs(kernel.cycles - twin.cycles) <= kernel.sampled.error_cycles
    assert simulate(workload, sample=True).to_dict() == sampled.to_dict()  # deterministic


def test_skipped_chunks_take_at_least_their_hbm_time_and_the_floor_counts_as_error():
    """Two cores, one block each, whose window of four chunks took 800 cycles on the Cube
    (two calls a chunk, 100 cycles a call); three windows skipped: 2,400 more cycles on the
    slower core, unless the skipped chunks' fetches need longer at HBM's rate."""
    window = {"CUBE": (4, 12)}
    sampling = KernelSampling(48, 24, (Window(0, window, 3, 4), Window(1, window, 3, 4)))
    ends = [100 * i for i in range(1, 13)]
    timed = {0: ends, 1: [end + 50 for end in ends]}
    core_ends = [2000, 2050]
    assert extension_cycles(sampling, core_ends, timed, 0) == Extension(3 * 800, 0)
    assert extension_cycles(sampling, core_ends, timed, 3000) == Extension(3000, 600)


def test_the_chunks_between_two_windows_run_half_at_each_pace_and_the_gap_counts_as_error():
    """One core, a window of four chunks before its skip (400 Cube cycles: 100 a chunk) and
    one after it (800: its reads now wait on HBM), two windows skipped between, each window
    standing for one: 1,200 cycles more. Where the pace turned is not known: anywhere
    between all of them at the first's (800) and all at the second's (1,600), so the error
    is 400 (one window's difference)."""
    early = Window(0, {"CUBE": (4, 8)}, 1, 4)
    late = Window(0, {"CUBE": (8, 12)}, 1, 4, late=True)
    ends = [100 * i for i in range(1, 9)] + [800 + 200 * i for i in range(1, 5)]
    sampling = KernelSampling(20, 12, (early, late))
    assert extension_cycles(sampling, [1600], {0: ends}, 0) == Extension(1200, 400)


def test_a_kernel_whose_fast_core_ends_first_runs_on_at_its_slow_cores_pace_alone():
    """Two cores whose windows of four chunks took 400 and 800 Cube cycles, each standing
    for three skipped ones, both needing 400 alone and moving their bytes through HBM:
    side by side core 1 would add 2,400 cycles; core 0 ends after 1,200, when core 1 is
    half done, and the other half takes 600 alone: 1,800. Without what the engine measured
    of the windows (the loads), the extension is the side-by-side one. (The error: the
    two cores differ, and two windows say little of a mean; and the 600 cycles the relief
    took off are a model, not simulated.)"""
    window = {"CUBE": (4, 12)}
    sampling = KernelSampling(48, 24, (Window(0, window, 3, 4), Window(1, window, 3, 4)))
    timed = {0: [50 * i for i in range(1, 13)], 1: [100 * i for i in range(1, 13)]}
    loads = (Load(400, (1000, 0)), Load(400, (1000, 0)))
    assert extension_cycles(sampling, [1200, 1200], timed, 0) == Extension(2400, 849)
    assert extension_cycles(sampling, [1200, 1200], timed, 0, loads) == Extension(1800, 849 + 600)


def test_a_core_runs_its_skipped_windows_faster_once_the_cores_it_shared_with_are_done():
    """Two cores that passed their skips at cycle 0 and simulated nothing after: core 0's
    skipped windows take 100 cycles side by side, core 1's 1,000 (500 alone). Core 0 ends
    at 100; core 1, a tenth done, runs the rest alone: 450 more. What a core simulated
    after its skip follows its skipped windows, and it shares the bandwidth until then
    (core 0 to 130: core 1 is 13% done, 87% of 500 cycles take it to 565, and its own 20
    cycles follow)."""

    def segments(core_1_at=0, core_1=(1000.0, 500.0)):
        return {0: [(0, 100.0, 50.0)], 1: [(core_1_at, *core_1)]}

    demand = {0: (1.0, 0.0), 1: (1.0, 0.0)}  # bytes per cycle, on HBM and L2
    assert fluid_ends([0, 0], segments(), demand) == [100, 550]
    assert fluid_ends([30, 20], segments(), demand) == [130, 585]
    # cores alike, ending together: nobody is relieved
    alike = {0: [(0, 1000.0, 500.0)], 1: [(0, 1000.0, 500.0)]}
    assert fluid_ends([0, 0], alike, demand) == [1000, 1000]
    # a core that arrives after its peer is done runs alone
    assert fluid_ends([0, 2000], segments(2000), demand) == [100, 2500]
    # and so does one that shares no memory with it (core 1 reads only from L2)
    assert fluid_ends([0, 0], segments(), {0: (1.0, 0.0), 1: (0.0, 1.0)}) == [50, 500]


def test_only_a_busy_memory_frees_bandwidth_when_its_sharers_end():
    """The cores above on a memory of 2 bytes a cycle, which their demand (1 each) fills:
    as before. On one of 8, a quarter busy: after core 0 ends, core 1's sharing part still
    counts three quarters (500 + 375 cycles a skip; a tenth done by 100, then 787.5 more);
    on one with room to spare for every transfer, nothing is freed."""
    segments = {0: [(0, 100.0, 50.0)], 1: [(0, 1000.0, 500.0)]}
    demand = {0: (1.0, 0.0), 1: (1.0, 0.0)}
    assert fluid_ends([0, 0], segments, demand, (2.0, 1.0)) == [100, 550]
    assert fluid_ends([0, 0], segments, demand, (8.0, 1.0)) == [100, 887.5]
    assert fluid_ends([0, 0], segments, demand, (1e12, 1.0)) == pytest.approx([100, 1000])


def test_a_window_measured_after_a_peer_ended_shares_as_its_skip_would():
    """Core 1's window (cycles 200-1,000: 800, of which 400 alone) ran its second half
    after core 0 had ended (at 600, simulated), where core 0 would have run on to 2,000
    with its skipped windows: it met half the sharing its skipped windows will, so its
    sharing part doubles (1,200). Core 0's window ran with core 1 throughout: as measured."""
    from simulator.schedule.sampling import _at_full_sharing

    window = {"CUBE": (4, 12)}
    sampling = KernelSampling(48, 24, (Window(0, window, 3, 4), Window(1, window, 3, 4)))
    loads = (Load(50, (100, 0)), Load(400, (800, 0)))  # 1 byte a cycle each, on HBM
    spans = [(0, 100), (200, 1000)]
    full = _at_full_sharing(sampling, [100, 800], spans, loads, [600, 1100], [2000, 3000], ())
    assert full == [100, 1200]
    # had core 0 been simulated to where it would have ended, nothing changes
    assert _at_full_sharing(sampling, [100, 800], spans, loads, [2000, 3000], [2000, 3000], ()) == [
        100,
        800,
    ]


def test_a_core_runs_each_skip_where_it_lies():
    """Core 1 skips twice: at cycle 0, 400 cycles side by side (200 alone), and at cycle
    300 of its simulated time, 400 more, with 100 simulated after. Core 0 runs its one skip
    of 800 cycles (400 alone) from cycle 0 to 800, sharing all the while: core 1's first
    skip takes 400 (to 400), its simulated 300 follow (to 700), and its second skip shares
    until 800 (a quarter), then runs alone (three quarters of 200: to 950), and its last 100
    cycles end it at 1,050; lumped at its last skip its first would have run alone too."""
    segments = {0: [(0, 800.0, 400.0)], 1: [(0, 400.0, 200.0), (300, 400.0, 200.0)]}
    demand = {0: (1.0, 0.0), 1: (1.0, 0.0)}
    assert fluid_ends([0, 400], segments, demand) == [800, 1050]


def test_a_chunk_window_inside_a_window_of_blocks_counts_for_both():
    """A window of two blocks standing for two more (its instructions run 3 times) holds a
    window of four K chunks standing for four more in each of those blocks (its
    instructions: 3 x 5 times); its time is added 4 x 3 times, the blocks' 2 times."""
    blocks = Window(0, {"CUBE": (2, 10)}, 2, 2, unit="block")
    chunks = Window(0, {"CUBE": (4, 8)}, 4, 4, repeats=3)
    sampling = KernelSampling(100, 12, (chunks, blocks))
    assert sampling.weights(0, "CUBE", 12) == [1, 1, 3, 3, 15, 15, 15, 15, 3, 3, 1, 1]
    ends = [100 * i for i in range(1, 13)]  # one Cube call a chunk, 100 cycles each
    assert extension_cycles(sampling, [1200], {0: ends}, 0) == Extension(4 * 3 * 400 + 2 * 800, 0)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    chip=st.sampled_from(["ascend910", "a100", "h100"]),
    m=st.sampled_from([16, 64, 512]),
    k=st.sampled_from([4096, 8192, 11008]),
)
def test_sampled_gemms_keep_the_physics_and_stay_near_exact(chip, m, k):
    """Every sampled run passes the analysis' own checks (never below the roofline, bytes
    conserved, buffers within capacity), writes what the exact run writes, and is off the
    exact time by no more than its estimate or a tenth (a gross bound: the estimate covers
    about 95% of rows, which benchmarks/sampling_error.py measures, not every one)."""
    overrides = [f"hardware={chip}", f"params.m={m}", f"params.k={k}", "params.n=4096"]
    workload = load_workload(ROOT / "workloads" / "gemm_4096.yaml", overrides)
    exact, sampled = simulate(workload), simulate(workload, sample=True)
    assert sampled.traffic["HBM"].write_bytes == exact.traffic["HBM"].write_bytes
    (kernel,) = sampled.kernels
    estimate = 0 if kernel.sampled is None else kernel.sampled.error_cycles
    assert abs(sampled.cycles - exact.cycles) <= max(estimate, exact.cycles / 10)


@pytest.fixture(scope="module")
def short_prefill():
    """LLaMA-2-7B, a 64-token prompt and one decode step on h100, plain and sampled."""
    from simulator import infer

    request = {"prompt": 64, "generate": 2}
    return infer("llama2-7b", "h100", **request), infer("llama2-7b", "h100", **request, sample=True)


@pytest.mark.slow
def test_infer_samples_only_when_asked_and_says_so(short_prefill):
    plain, sampled = short_prefill
    assert "simulated in part" in sampled.method and "simulated in part" not in plain.method
    assert sampled.provenance["options"]["sample"] and not plain.provenance["options"]["sample"]


@pytest.mark.slow
def test_a_sampled_short_prefill_is_within_its_stated_estimate(short_prefill):
    plain, sampled = short_prefill
    stated = float(sampled.method.split("error estimate up to ")[1].split("%")[0]) / 100
    assert abs(sampled.ttft_us / plain.ttft_us - 1) <= stated


def test_a_sampled_run_is_held_to_the_instructions_it_lowers(monkeypatch):
    """The count a run is refused on beforehand is the unsampled one; a sampled run lowers a
    fraction of it (gemm_4096 on a100: 79,872 of 179,712) and is held to that instead, so
    a prompt whose layers fit sampled is not cut to one layer (qwen2-7b's 4,096-token
    prefill on ascend910: 8.4 M estimated, 2.7 M lowered)."""
    from simulator.errors import TooLargeError
    from simulator.schedule import footprint, lower

    for module in (footprint, lower):
        monkeypatch.setattr(module, "MAX_INSTRUCTIONS", 100_000)
    workload = load_workload(ROOT / "workloads" / "gemm_4096.yaml", ["hardware=a100"])
    with pytest.raises(TooLargeError, match="100,000 a run can hold"):
        lower_workload(workload)
    assert lower_workload(workload, sample=True).instruction_count == 79_872
    monkeypatch.setattr(lower, "MAX_INSTRUCTIONS", 60_000)  # what it lowers is still held
    with pytest.raises(TooLargeError, match="already need 79,872 instructions"):
        lower_workload(workload, sample=True)
