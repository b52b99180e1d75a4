"""Closed forms on the tiny chip, exact to the cycle.

tiny: launch 100 cycles; MTE2 start 10 cycles at 64 B/cycle; L2 latency 20,
HBM latency 100 beyond it; HBM 64 B/cycle shared by both cores; L2 port
128 B/cycle; MTE1 start 2 at 128 B/cycle; FIXPIPE start 5 at 64 B/cycle;
Cube start 4 plus one cycle per 16x16x16 fractal.
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config.transformer import Step, step_workload
from simulator.engine import l2cache
from simulator.engine.l2cache import L2Cache
from simulator.engine.world import simulate_program
from simulator.pipeline import lower_workload, simulate
from simulator.schedule.program import (
    CoreBuilder,
    CubeBlock,
    Draft,
    KernelProgram,
    Program,
    Region,
    VectorOp,
    transfer,
)

from .helpers import matmul_workload, with_queue_depth

LAUNCH, MTE2, L2_LAT, HBM_LAT = 100, 10, 20, 100


def one_kernel(cores_instrs, geometry):
    return kernels(geometry, cores_instrs)


def kernels(geometry, *kernel_cores: list[list[Draft]]) -> Program:
    """A program of kernels in turn, each of cores running these drafts on their pipes."""
    built = []
    for cores_instrs in kernel_cores:
        cores = []
        for instrs in cores_instrs:
            core = CoreBuilder()
            for instr in instrs:
                core.emit(instr)
            cores.append(core.build())
        built.append(
            KernelProgram("k", ("k",), False, "vector", "fp16", 0, tuple(cores), None, 0, 0)
        )
    return Program(tuple(built), geometry, 0)


def program_of(cores: list[CoreBuilder], geometry=None, unit="vector", gemms=0) -> Program:
    """One kernel of these cores' programs, built."""
    built = tuple(core.build() for core in cores)
    kernel = KernelProgram("k", ("k",), False, unit, "fp16", 0, built, None, 0, 0, gemms=gemms)
    return Program((kernel,), geometry or {}, 0)


def load(tensor, nbytes):
    return transfer("MTE2", "load", "HBM", "L1", nbytes, Region(tensor, 0, 1, 0, nbytes // 2))


@pytest.mark.parametrize("nbytes", [64, 1000, 4096, 65536])
def test_one_transfer_of_n_bytes(tiny, nbytes):
    program = one_kernel([[load("t", nbytes)]], {"t": (1, nbytes // 2, 2)})
    trace = simulate_program(program, tiny)
    [record] = trace.records
    expected = MTE2 + L2_LAT + HBM_LAT + -(-nbytes // 64)
    assert (record.start_cycle, record.end_cycle) == (LAUNCH, LAUNCH + expected)
    assert trace.cycles == LAUNCH + expected
    assert record.hbm_bytes == nbytes and record.wait_bandwidth_cycles == 0


def test_a_core_with_nothing_to_do_finishes_at_launch(tiny):
    program = one_kernel([[load("t", 64)], []], {"t": (1, 32, 2)})
    trace = simulate_program(program, tiny)
    assert trace.instructions == 1
    assert trace.cycles == LAUNCH + MTE2 + L2_LAT + HBM_LAT + 1


def test_second_read_hits_l2(tiny):
    nbytes = 4096
    program = one_kernel([[load("t", nbytes), load("t", nbytes)]], {"t": (1, nbytes // 2, 2)})
    first, second = simulate_program(program, tiny).records
    assert second.l2_hit_bytes == nbytes and second.hbm_bytes == 0
    # a hit skips HBM's latency and crosses the L2 port (128 B/cycle) at MTE2's 64 B/cycle
    assert second.end_cycle - second.start_cycle == MTE2 + L2_LAT + nbytes // 64


def test_hits_and_misses_move_at_their_own_paths_rates(tiny):
    """A chip whose L2 feeds a core faster than HBM misses arrive (ascend910b: the CANN
    config's l2_read_rate for hits, the vendor model's rate for misses): the miss crosses
    HBM at the HBM->L1 path's 64 B/cycle, the hit the L2 port at the L2->L1 path's 128."""
    chip = replace(
        tiny,
        engines={
            **tiny.engines,
            "MTE2": replace(
                tiny.engines["MTE2"],
                path_bytes_per_cycle={
                    **tiny.engines["MTE2"].path_bytes_per_cycle,
                    ("L2", "L1"): 128.0,
                },
            ),
        },
    )
    nbytes = 4096
    program = one_kernel([[load("t", nbytes), load("t", nbytes)]], {"t": (1, nbytes // 2, 2)})
    first, second = simulate_program(program, chip).records
    assert first.end_cycle - first.start_cycle == MTE2 + L2_LAT + HBM_LAT + nbytes // 64
    assert second.end_cycle - second.start_cycle == MTE2 + L2_LAT + nbytes // 128


def test_two_cores_streaming_share_hbm_equally(tiny):
    nbytes = 8192
    program = one_kernel(
        [[load("a", nbytes)], [load("b", nbytes)]],
        {"a": (1, nbytes // 2, 2), "b": (1, nbytes // 2, 2)},
    )
    records = simulate_program(program, tiny).records
    alone = MTE2 + L2_LAT + HBM_LAT + nbytes // 64
    for record in records:
        # each gets 32 of the 64 B/cycle: twice the streaming time of a core alone
        assert record.end_cycle - record.start_cycle == MTE2 + L2_LAT + HBM_LAT + nbytes // 32
        assert record.wait_bandwidth_cycles == nbytes // 32 - nbytes // 64
    assert alone < records[0].end_cycle - records[0].start_cycle


def test_one_cube_base_block(tiny):
    """C[16,16] = A[16,16] · B[16,16] on one core, step by step."""
    w = matmul_workload(tiny, 16, 16, 16, tiling={"split": {"m": 1, "n": 1}})
    report = simulate(w)
    trace = simulate_program(lower_workload(w), tiny)
    by_label = {r.label.split()[0] + r.label.split()[1]: r for r in trace.records}
    load_a, load_b = by_label["loadA"], by_label["loadB"]
    move_a, move_b = by_label["moveA"], by_label["moveB"]
    mmad = next(r for r in trace.records if r.pipe == "CUBE")
    drain = next(r for r in trace.records if r.pipe == "FIXPIPE")
    hbm_read = MTE2 + L2_LAT + HBM_LAT + 512 // 64  # 138 per 512 B operand
    assert (load_a.start_cycle, load_a.end_cycle) == (100, 100 + hbm_read)
    assert (load_b.start_cycle, load_b.end_cycle) == (238, 238 + hbm_read)
    assert (move_a.start_cycle, move_a.end_cycle) == (238, 238 + 2 + 512 // 128)
    assert (move_b.start_cycle, move_b.end_cycle) == (376, 376 + 2 + 512 // 128)
    assert (mmad.start_cycle, mmad.end_cycle) == (382, 382 + 4 + 1)  # one fractal: 1 cycle
    # a store is done once L2 holds it: L2's latency, not HBM's, then its bytes at HBM's rate
    assert (drain.start_cycle, drain.end_cycle) == (387, 387 + 5 + L2_LAT + 512 // 64)
    assert report["cycles"] == 420
    assert report["stalls"]["CUBE"]["data"] == 382 - 100
    assert report["traffic"]["HBM"] == {"read_bytes": 1024, "write_bytes": 512}


def test_double_buffering_overlaps_what_single_buffering_serialises(tiny):
    # four base-k blocks per L1 chunk, so moving and multiplying a chunk takes a while
    tiling = {"base": {"m": 32, "n": 64, "k": 32}, "step": {"k": 4}, "split": {"m": 1, "n": 1}}
    cycles, traces = {}, {}
    for buffers in (1, 2):
        w = matmul_workload(tiny, 32, 64, 512, tiling={**tiling, "buffers": buffers})
        traces[buffers] = simulate_program(lower_workload(w), tiny).records
        cycles[buffers] = max(r.end_cycle for r in traces[buffers])

    def slot_waits(records):
        return sum(r.wait_slot_cycles for r in records if r.pipe == "MTE2")

    for side in "AB":
        loads = [r for r in traces[1] if r.label.startswith(f"load {side}")]
        moves = [r for r in traces[1] if r.label.startswith(f"move {side}")]
        last_move_of_chunk = moves[3::4]
        # one slot: chunk i+1 is staged only after MTE1 has moved the last block of chunk i
        for nxt, prev_move in zip(loads[1:], last_move_of_chunk):
            assert nxt.start_cycle >= prev_move.end_cycle
    assert slot_waits(traces[1]) > 0
    # two slots: MTE2 streams chunk after chunk while MTE1 and the Cube work behind it
    assert slot_waits(traces[2]) == 0
    assert cycles[2] < cycles[1]


def test_a_deadlock_is_diagnosed_with_the_waiting_pipe_and_the_flag(tiny):
    from simulator.errors import InvariantError

    core = CoreBuilder()
    never = core.new_flag(0, "data")
    core.emit(Draft(CubeBlock, "CUBE", "mmad waiting forever", cycles=5)).waits_for(never)
    setter = core.emit(Draft(VectorOp, "VECTOR", "would set it", cycles=5))
    setter.waits_for(core.new_flag(0, "data"))
    setter.signals(never)
    with pytest.raises(InvariantError) as info:
        simulate_program(program_of([core], unit="cube"), tiny)
    text = str(info.value)
    assert "deadlock at cycle 100: 0 of 2 instructions executed" in text
    assert (
        "core 0 CUBE #0 'mmad waiting forever' waits on flag 0 (data), set by: VECTOR #0 "
        "'would set it'" in text
    )


def test_a_run_past_its_cycle_budget_stops_with_a_clear_error(tiny):
    from simulator.errors import CycleBudgetError

    w = matmul_workload(tiny, 64, 64, 256)
    with pytest.raises(CycleBudgetError, match="passed its budget of 500 cycles"):
        simulate(w, max_cycles=500)
    assert simulate(w).to_dict()["cycles"] > 500


def test_a_block_staged_in_l0a_but_never_consumed_breaks_conservation(tiny):
    from simulator.analysis.report import analyse
    from simulator.errors import InvariantError

    core = CoreBuilder()
    core.emit(transfer("MTE1", "move A nobody reads", "L1", "L0A", 1024))
    program = program_of([core], unit="cube", gemms=1)
    with pytest.raises(InvariantError, match="L0A received 1024 B but gave 0 B"):
        analyse(simulate_program(program, tiny), program, tiny, "t")


def test_a_private_pipe_runs_ahead_of_the_global_clock_but_its_transfers_wait_for_it(tiny):
    """The Cube's 500 cycles are timed without SimPy; the store that waits on them still
    starts at the Cube's end on the global clock, and an earlier load by another pipe is not
    held back by it."""
    core = CoreBuilder()
    done = core.new_flag(0, "data")
    core.emit(Draft(CubeBlock, "CUBE", "long compute", cycles=500)).signals(done)
    store = transfer("FIXPIPE", "store after compute", "L0C", "HBM", 64, Region("c", 0, 1, 0, 32))
    store.waits_for(done)
    core.emit(store)
    core.emit(transfer("MTE2", "independent load", "HBM", "L1", 64, Region("a", 0, 1, 0, 32)))
    program = program_of([core], {"a": (1, 32, 2), "c": (1, 32, 2)}, unit="cube")
    trace = simulate_program(program, tiny)
    by_label = {r.label: r for r in trace.records}
    launch = tiny.launch_overhead_cycles
    assert by_label["long compute"].end_cycle == launch + 500
    assert by_label["store after compute"].start_cycle == launch + 500
    assert by_label["store after compute"].wait_data_cycles == 500
    assert by_label["independent load"].start_cycle == launch


def test_slots_taken_beyond_a_buffers_capacity_are_caught(tiny):
    from simulator.errors import InvariantError

    core = CoreBuilder()
    for _ in range(2):  # two 8 KiB slots of the 8 KiB L0A, the first never freed
        core.emit(transfer("MTE1", "move", "L1", "L0A", 8192)).takes("L0A", 8192)
    with pytest.raises(InvariantError, match="L0A of core 0 in kernel 0 holds 16384 B"):
        simulate_program(program_of([core], unit="cube"), tiny)


def queued(hw, depth):
    return with_queue_depth(hw, depth)


def test_a_queue_overlaps_start_ups_with_earlier_data_which_moves_in_order(tiny):
    nbytes, alone = 640, MTE2 + L2_LAT + HBM_LAT + 640 // 64
    loads = [load(t, nbytes) for t in "abc"]
    geometry = {t: (1, nbytes // 2, 2) for t in "abc"}
    serial = simulate_program(one_kernel([loads], geometry), tiny).records
    assert [r.end_cycle for r in serial] == [LAUNCH + alone * i for i in (1, 2, 3)]
    records = simulate_program(one_kernel([loads], geometry), queued(tiny, 3)).records
    # all three issue at launch; each one's data follows the previous one's: 10 cycles each
    assert [r.start_cycle for r in records] == [LAUNCH] * 3
    assert [r.end_cycle for r in records] == [LAUNCH + alone + 10 * i for i in (0, 1, 2)]
    assert [r.wait_bandwidth_cycles for r in records] == [0, 10, 10]


def test_an_engine_of_a_stream_per_tensor_moves_tensors_side_by_side(tiny):
    """A GPU's copies: three tensors' loads issued together share HBM's 64 B/cycle at once, a
    third each, and land together, where one stream lands them 10 cycles apart."""
    nbytes, alone = 640, MTE2 + L2_LAT + HBM_LAT + 640 // 64
    loads = [load(t, nbytes) for t in "abc"]
    geometry = {t: (1, nbytes // 2, 2) for t in "abc"}
    chip = with_queue_depth(tiny, 3, streams="per_tensor")
    records = simulate_program(one_kernel([loads], geometry), chip).records
    assert [r.end_cycle for r in records] == [LAUNCH + alone + 20] * 3
    one_stream = simulate_program(one_kernel([loads], geometry), queued(tiny, 3)).records
    assert [r.end_cycle for r in one_stream] == [LAUNCH + alone + 10 * i for i in (0, 1, 2)]


def test_an_engine_retires_its_transfers_in_the_order_it_issued_them(tiny):
    """A small tile of b whose data lands first waits for the large tile of a issued before
    it: a stage is ready when all of it is."""
    big, small = 6400, 640
    geometry = {"a": (1, big // 2, 2), "b": (1, small // 2, 2)}
    chip = with_queue_depth(tiny, 2, streams="per_tensor")
    first, second = simulate_program(
        one_kernel([[load("a", big), load("b", small)]], geometry), chip
    ).records
    latency = MTE2 + L2_LAT + HBM_LAT
    # HBM's 64 B/cycle halved for 20 cycles (b's 640 B), then a alone: its other 5760 B in 90
    assert first.end_cycle == second.end_cycle == LAUNCH + latency + 20 + 90
    assert second.wait_bandwidth_cycles == 0  # its wait is a's landing, not counted twice


def test_a_full_queue_holds_the_next_transfer_until_the_oldest_lands(tiny):
    nbytes, alone = 640, MTE2 + L2_LAT + HBM_LAT + 640 // 64
    loads = [load(t, nbytes) for t in "abc"]
    geometry = {t: (1, nbytes // 2, 2) for t in "abc"}
    records = simulate_program(one_kernel([loads], geometry), queued(tiny, 2)).records
    assert [r.start_cycle for r in records] == [LAUNCH, LAUNCH, LAUNCH + alone]
    assert [r.end_cycle for r in records] == [
        LAUNCH + alone,
        LAUNCH + alone + 10,
        LAUNCH + 2 * alone,
    ]


def test_on_chip_work_of_an_engine_waits_for_its_transfers_in_flight(tiny):
    move = transfer("MTE2", "move", "L1", "L0A", 128)
    program = one_kernel([[load("a", 640), load("b", 640), move]], {t: (1, 320, 2) for t in "ab"})
    *_, last = simulate_program(program, queued(tiny, 4)).records
    landed = LAUNCH + MTE2 + L2_LAT + HBM_LAT + 10 + 10
    assert (last.start_cycle, last.end_cycle) == (landed, landed + 2 + 1)


def test_a_queue_overlaps_but_never_beats_the_engines_rate(tiny):
    """Busy is the union of overlapping transfers; a deep queue buys the start-ups only."""
    nbytes = 6400
    loads = [load(t, nbytes) for t in "abcd"]
    geometry = {t: (1, nbytes // 2, 2) for t in "abcd"}
    trace = simulate_program(one_kernel([loads], geometry), queued(tiny, 4))
    assert trace.cycles == LAUNCH + MTE2 + L2_LAT + HBM_LAT + 4 * nbytes // 64


@pytest.mark.parametrize("multicast", [1, 2])
def test_a_multicast_read_crosses_the_l2_port_once_for_its_cluster(tiny, multicast):
    """Two cores read the same L2-resident block through a 64 B/cycle port: apart, they share
    it (32 B/cycle each); multicast, one read serves both at the engine's full 64 B/cycle."""
    from dataclasses import replace

    narrow = {**tiny.memories, "L2": replace(tiny.memories["L2"], peak_bytes_per_cycle=64)}
    hw = replace(tiny, memories=narrow)
    nbytes = 4096

    def shared_load():
        region = Region("t", 0, 1, 0, nbytes // 2)
        return transfer("MTE2", "load", "HBM", "L1", nbytes, region, multicast=multicast)

    program = kernels(
        {"t": (1, nbytes // 2, 2)}, [[load("t", nbytes)]], [[shared_load()], [shared_load()]]
    )
    trace = simulate_program(program, hw)
    hits = [r for r in trace.records if r.kernel == 1]
    assert [r.l2_hit_bytes for r in hits] == [nbytes, nbytes]
    for record in hits:
        assert record.end_cycle - record.start_cycle == MTE2 + L2_LAT + nbytes // (32 * multicast)


@pytest.mark.parametrize("col0, col1, packets", [(0, 32, 8), (0, 128, 16), (48, 80, 16)])
def test_short_or_misaligned_rows_move_as_whole_packets(tiny, col0, col1, packets):
    """An 8-row block of a 128-column fp16 tensor (256-byte rows) through an engine of
    128-byte packets: 64-byte runs are a packet each, so they move at half the 64 B/cycle
    path; whole rows are one run of whole packets, at the path's rate; 64-byte runs that
    cross a packet boundary are two packets each, a quarter of the rate."""
    from dataclasses import replace

    engines = {**tiny.engines, "MTE2": replace(tiny.engines["MTE2"], packet_bytes=128)}
    hw = replace(tiny, engines=engines)
    nbytes = 8 * (col1 - col0) * 2
    block = transfer("MTE2", "load", "HBM", "L1", nbytes, Region("t", 0, 8, col0, col1))
    [record] = simulate_program(one_kernel([[block]], {"t": (8, 128, 2)}), hw).records
    rate = 64 * nbytes / (packets * 128)
    assert record.end_cycle - record.start_cycle == MTE2 + L2_LAT + HBM_LAT + nbytes / rate


@pytest.mark.parametrize("serialise", [False, True])
def test_same_address_reads_cross_the_l2_port_in_turn_where_the_chip_says_so(tiny, serialise):
    """Two cores read one L2-resident block at once through a 128 B/cycle port at 64 B/cycle
    each: side by side both land together; serialised, the second starts when the first is
    done."""
    from dataclasses import replace

    hw = replace(tiny, l2_serialises_same_address=serialise)
    nbytes = 4096
    program = kernels(
        {"t": (1, nbytes // 2, 2)},
        [[load("t", nbytes)]],
        [[load("t", nbytes)], [load("t", nbytes)]],
    )
    first, second = sorted(
        (r for r in simulate_program(program, hw).records if r.kernel == 1),
        key=lambda r: r.end_cycle,
    )
    alone = MTE2 + L2_LAT + nbytes // 64
    assert first.end_cycle - first.start_cycle == alone
    assert second.end_cycle - second.start_cycle == alone + (nbytes // 64 if serialise else 0)


@pytest.mark.parametrize(
    "graph, gap, expected_second_start",
    [
        (False, None, LAUNCH + 140 + LAUNCH),  # no gap given: each launch waits a whole overhead
        (False, 10, LAUNCH + 140 + 10),  # issued at 200, the device free at 240 + 10
        (True, 10, LAUNCH + 140 + 10),
    ],
)
def test_a_launch_overlaps_the_kernel_before_it(tiny, graph, gap, expected_second_start):
    """Two back-to-back kernels of one 640-byte load (140 cycles) each: the host issues the
    second while the first runs, so it starts a device gap after the first ends."""
    from dataclasses import replace

    hw = replace(tiny, kernel_gap_cycles=gap, graph_launch=graph)
    program = kernels({"a": (1, 320, 2), "b": (1, 320, 2)}, [[load("a", 640)]], [[load("b", 640)]])
    trace = simulate_program(program, hw)
    first, second = trace.kernels
    assert first.run_cycle == LAUNCH and first.end_cycle == LAUNCH + 140
    assert second.run_cycle == expected_second_start


@pytest.mark.parametrize("graph, expected", [(False, 2 * LAUNCH), (True, LAUNCH + 10)])
def test_short_kernels_wait_on_the_host_unless_launched_as_a_graph(tiny, graph, expected):
    """Kernels shorter than a launch: streamed, the host's issuing paces them; as a graph,
    all are issued at once and only the device gap remains."""
    from dataclasses import replace

    hw = replace(tiny, kernel_gap_cycles=10, graph_launch=graph)
    program = kernels({}, [[]], [[]])
    _, second = simulate_program(program, hw).kernels
    assert second.run_cycle == expected


def test_a_strided_run_costs_a_packet_per_element(tiny):
    """Eight rows of 32 elements taken every second column: 256 one-element runs, each a
    whole 128-byte packet's time on an engine with such packets, whatever the bytes."""
    from dataclasses import replace

    engines = {**tiny.engines, "MTE2": replace(tiny.engines["MTE2"], packet_bytes=128)}
    hw = replace(tiny, engines=engines)
    block = transfer("MTE2", "load", "HBM", "L1", 8 * 32 * 2, Region("v", 0, 8, 0, 32))
    program = one_kernel([[block]], {"v": (8, 32, 2)})
    program.slice_steps["v"] = 2
    [record] = simulate_program(program, hw).records
    assert record.hbm_bytes == 2 * 8 * 32 * 2  # whole sectors around kept elements
    assert record.end_cycle - record.start_cycle == MTE2 + L2_LAT + HBM_LAT + 256 * 128 // 64


@pytest.mark.parametrize(
    "hardware, model, step, sample",
    [
        ("tiny", None, Step("prefill", 1, 64, 64), False),
        pytest.param(
            "ascend910", "llama2-7b", Step("decode", 1, 1, 80), False, marks=pytest.mark.slow
        ),
        pytest.param(  # sampled K chunks warm L2
            "h100", "llama2-7b", Step("decode", 1, 1, 80), True, marks=pytest.mark.slow
        ),
    ],
)
def test_a_kernel_that_begins_as_an_earlier_one_did_is_replayed_record_for_record(
    hardware, model, step, sample
):
    """A model's layers repeat: from the second on, most kernels begin with the L2 holding
    what the layer before's began with, tensor for tensor, and the engine replays them
    (engine/replay.py). Every record, span and count is the simulated run's."""
    from simulator.config.hardware import load_hardware
    from simulator.config.model import load_model
    from simulator.engine.world import World

    from .test_inference import toy

    hw = load_hardware(hardware)
    config = toy() if model is None else load_model(model)
    workload = step_workload(config, hw, step, 3, "auto")
    program = lower_workload(workload, sample)
    assert not sample or any(kernel.sampling for kernel in program.kernels)
    world = World(program, hw)
    replayed, simulated = world.run(), simulate_program(program, hw, replay=False)
    kept = sum(len(kernels) for kernels in world.replays.by_entry.values())
    assert kept < len(program.kernels)  # some were replayed
    _assert_same_run(replayed, simulated, program, hw)


@pytest.mark.parametrize(
    "hardware, sample", [("ascend910", False), pytest.param("h100", True, marks=pytest.mark.slow)]
)
def test_a_run_replays_kernels_the_last_run_on_the_same_hardware_simulated(hardware, sample):
    """The next decode step, at a longer context, begins its GEMMs as the step before did:
    they are replayed from the last run (engine/replay.py), record for record, and counted
    as they were."""
    from simulator.analysis.report import analyse
    from simulator.config.hardware import load_hardware
    from simulator.config.model import load_model
    from simulator.engine.world import World

    hw, model = load_hardware(hardware), load_model("llama2-7b")
    before, after = (
        lower_workload(step_workload(model, hw, Step("decode", 1, 1, context), 2), sample)
        for context in (80, 144)
    )
    analyse(World(before, hw).run(), before, hw, "before")  # its tallies serve the next
    world = World(after, hw)
    trace = world.run()
    assert any(earlier.run != world.replays.serial for earlier in world.replays.used)
    _assert_same_run(trace, simulate_program(after, hw, replay=False), after, hw)


def _assert_same_run(replayed, simulated, program, hw):
    """Two traces of `program` are the same run, and so is what the analysis makes of them."""
    from simulator.analysis.report import analyse

    assert replayed.kernels == simulated.kernels
    assert (replayed.cycles, replayed.l2_hits, replayed.l2_misses) == (
        simulated.cycles,
        simulated.l2_hits,
        simulated.l2_misses,
    )
    assert replayed.peak_occupancy_bytes == simulated.peak_occupancy_bytes
    for one, other in zip(replayed.pipes, simulated.pipes, strict=True):
        assert (one.kernel, one.core, one.pipe) == (other.kernel, other.core, other.pipe)
        assert list(one.records()) == list(other.records())  # a replay's: shared, renamed
    # the analysis counts a replayed kernel as the kernel it replayed: the same report
    reports = [analyse(trace, program, hw, "step").to_dict() for trace in (replayed, simulated)]
    assert reports[0] == reports[1]


class _Landed:
    triggered = True


_OWN = {"a": (64, 256, 2), "b": (64, 512, 2)}  # the tensors a kernel touches


@st.composite
def _l2_pair(draw):
    """Two L2s whose lines of the tensors in _OWN are the same, in the same LRU order,
    with runs of other lines between them of the same bytes but made up differently, and
    the oldest run traded in part for free space."""
    geometry = {**_OWN, "x": (1 << 20, 256, 2)}
    pair = [L2Cache(32 * 1024, geometry) for _ in range(2)]
    granule = {"x": 0}
    for step in draw(st.lists(st.one_of(_own_regions(), st.integers(1, 8192)), max_size=12)):
        if isinstance(step, Region):
            for cache in pair:
                cache.write(step)
            continue
        if pair[0].used_bytes + step > pair[0].capacity_bytes:
            continue
        cuts = [draw(st.lists(st.integers(1, step), max_size=3)) for _ in pair]
        for cache, cut in zip(pair, cuts):
            parts = [b - a for a, b in zip([0, *sorted(set(cut))], [*sorted(set(cut)), step])]
            for nbytes in (p for p in parts if p):
                cache.lines[("x", granule["x"])] = l2cache._Line(1, nbytes, _Landed())
                cache.used_bytes += nbytes
                granule["x"] += 1
    oldest = next((line for key, line in pair[1].lines.items() if key[0] == "x"), None)
    if oldest is not None and list(pair[1].lines.values())[0] is oldest:
        freed = draw(st.integers(0, oldest.nbytes - 1))
        oldest.nbytes -= freed
        pair[1].used_bytes -= freed
    return pair


def _own_regions():
    def region(tensor, row, rows, col, cols):
        height, width, _ = _OWN[tensor]
        row, col = row % height, col % width
        return Region(tensor, row, min(height, row + rows), col, min(width, col + cols))

    return st.builds(
        region,
        st.sampled_from(sorted(_OWN)),
        st.integers(0, 63),
        st.integers(1, 64),
        st.integers(0, 511),
        st.integers(1, 512),
    )


@settings(max_examples=150, deadline=None)
@given(_l2_pair(), st.lists(st.tuples(st.booleans(), _own_regions()), max_size=40))
def test_a_kernel_meets_two_l2s_of_one_own_state_alike(pair, accesses):
    """L2Cache.own_state, on which replay.py replays a kernel that evicted every other
    line: two L2s that hold the same lines of a kernel's tensors, in the same order, with
    the lines between made up differently (and free space for some of the oldest), have
    one digest, and every read and write of the kernel's tensors finds and leaves the same
    in both."""
    first, second = pair
    assert first.own_state(sorted(_OWN)) == second.own_state(sorted(_OWN))
    for write, region in accesses:
        found = [
            cache.write(region) if write else cache.read(region, _Landed())[:2] for cache in pair
        ]
        assert found[0] == found[1]
        own = [
            [(key, line.cells, line.nbytes) for key, line in c.lines.items() if key[0] in _OWN]
            for c in pair
        ]
        assert own[0] == own[1]
        assert first.own_state(sorted(_OWN)) == second.own_state(sorted(_OWN))


def test_a_kernel_that_met_its_own_lines_as_an_earlier_one_did_is_replayed_record_for_record(
    tiny,
):
    """The decode step's LM head begins with other lines in L2 than the prefill's did (the
    layers before it ran other kernels), but with the same lines of its own tensors, and
    the prefill's LM head evicted every other line: it is replayed, record for record."""
    from simulator.engine.world import World

    from .test_inference import toy

    runs = []
    for step in (Step("prefill", 1, 32, 32), Step("decode", 1, 1, 40)):
        program = lower_workload(step_workload(toy(), tiny, step, 2, "auto"))
        runs.append((program, World(program, tiny).run()))
    (_, prefill), (program, decode) = runs
    head = decode.kernels[-1]
    assert program.kernels[head.index].name == "lm_head"
    assert head.replayed is not None and head.replayed.entry != head.entry
    assert head.replayed.end_cycle - head.replayed.run_cycle == prefill.kernels[-1].end_cycle - (
        prefill.kernels[-1].run_cycle
    )
    _assert_same_run(decode, simulate_program(program, tiny, replay=False), program, tiny)


def test_lowering_a_matmul_frees_each_cores_drafts_once_its_program_is_built(monkeypatch):
    """Lowering holds the drafts of one core at a time: holding a whole kernel's took three
    times the memory of its program (qwen2-7b's 2048-token prefill layer on h100: 342 MB
    to lower a program of 121 MB)."""
    import gc
    import weakref

    from simulator.config.hardware import load_hardware
    from simulator.schedule import lower

    made: list[weakref.ref] = []

    class Watched(lower.CoreBuilder):
        def __init__(self) -> None:
            gc.collect()
            assert all(ref() is None for ref in made), "an earlier core's drafts are held"
            super().__init__()
            made.append(weakref.ref(self))

    monkeypatch.setattr(lower, "CoreBuilder", Watched)
    lower_workload(matmul_workload(load_hardware("ascend910"), 1024, 1024, 1024))
    assert len(made) == 32  # a core each


def test_cores_that_stage_the_same_block_load_it_with_one_instruction(tiny):
    """Equal drafts build one instruction: two cores side by side in the N split stage the
    same A blocks with equal loads, shared, and their own B blocks with loads of their own
    (a 2048-token prefill layer on h100: 495,091 instructions made, 55,194 now)."""
    tiling = {"base": {"m": 32, "n": 32, "k": 32}, "split": {"m": 1, "n": 2}}
    program = lower_workload(matmul_workload(tiny, 64, 64, 64, tiling=tiling))
    first, second = (core.queues["MTE2"] for core in program.kernels[0].cores)
    pairs = list(zip(first, second, strict=True))
    assert all(a is b for a, b in pairs if a.label.startswith("load A"))
    assert all(a is not b for a, b in pairs if a.label.startswith("load B"))
    assert {a.label.split()[1] for a, _ in pairs} == {"A", "B"}


def test_cores_that_reach_a_skip_in_one_cycle_all_find_l2_warmed(tiny):
    """The last core to reach a skip of a sampled kernel warms L2 with what the skipped units
    touched; cores that reach it in the same cycle look L2 up after the warm, as they would
    have run the skipped units first (before it, the first of two cores reading one block
    fetched it though the warm held it: the window after a skip in LLaMA-7B's down GEMM on
    h100 lost its cores' lockstep, and the kernel came out 8% slow)."""
    from simulator.schedule.sampling import KernelSampling, Skip

    region = Region("a", 0, 1, 0, 64)
    cores = []
    for _ in range(2):
        core = CoreBuilder()
        core.emit(transfer("MTE2", "load a", "HBM", "L1", 128, region, warms=0))
        cores.append(core)
    program = program_of(cores, {"a": (1, 64, 2)})
    skips = (Skip(0, (((region, False),),)),)
    sampled = replace(program.kernels[0], sampling=KernelSampling(2, 2, (), (skips, skips)))
    trace = simulate_program(replace(program, kernels=(sampled,)), tiny)
    assert [log.column("hbm_bytes")[0] for log in trace.pipes] == [0, 0]  # the warm fetched it


def test_a_core_past_a_skip_reads_the_l2_its_peers_skipped_units_left():
    """A core past a skip would have run the skipped units first, and so would its peers: it
    meets L2 as their skipped units left it, while a core not there yet meets it as it was
    (before, the core past it found a block its peers' units would have evicted: G1, a
    1024x10240x5120 GEMM on a100 whose A sits on L2's capacity edge, fetched A once sampled
    and 4.1 times exact). When the last core passes, the chip's L2 is warmed as before, the
    lookups made in the view count, and a fetch the view made still has to land (without
    it, the followers of DG10's first core past its skip stopped waiting for its fetch, and
    the kernel came out 10% slow)."""
    from simulator.engine.l2cache import _LANDED
    from simulator.engine.skips import Skips
    from simulator.engine.transfer import _Fetch
    from simulator.schedule.sampling import KernelSampling, Skip

    l2 = L2Cache(32 * 1024, {"a": (64, 256, 2), "w": (1024, 256, 2)})
    block = Region("a", 0, 16, 0, 256)
    l2.read(block, _LANDED)
    streamed = [((Region("w", row, row + 16, 0, 256), False),) for row in range(0, 1024, 16)]
    per_core = ((Skip(1, tuple(streamed[:32])),), (Skip(1, tuple(streamed[32:])),))
    skips = Skips(l2, KernelSampling(2, 2, (), per_core), 0)
    skips.passed(0, 0, 100)
    past, not_yet = skips.l2_of(0), skips.l2_of(1)
    assert not_yet is l2 and past is not l2
    fetch = _Fetch()
    assert past.read(block, fetch)[:2] == (0, 16 * 256 * 2)  # 512 KiB through 32 KiB
    assert not_yet.read(block, _LANDED)[:2] == (16 * 256 * 2, 0)
    skips.touched(0, block)
    hits, misses = l2.hits, l2.misses
    skips.passed(0, 1, 150)
    assert not skips.pending and skips.l2_of(0) is l2
    assert (l2.hits, l2.misses) == (hits, misses + 1)  # the view's miss
    assert l2.warmed == {"w": [0, 1024 * 256 * 2]}  # counted once, by the chip's L2
    # held after the warm, and a reader waits for the view's fetch to land
    assert l2.read(block, _LANDED) == (16 * 256 * 2, 0, [fetch])


def test_what_cores_touched_after_a_skip_is_held_after_a_warm_larger_than_l2():
    """Cores that reached a skip before the last one ran on: what they read since would have
    come after the skipped units, so it is held after the warm, however much the warm
    streamed through L2 (refreshed before and after, a region the warm evicted was lost, and
    a core found the block its peer had just fetched gone: qwen2-7b's 128-token down GEMM
    on ascend910 came out 5% slow sampled)."""
    from simulator.engine.l2cache import _LANDED

    cache = L2Cache(32 * 1024, {"a": (64, 256, 2), "w": (1024, 256, 2)})
    recent = Region("a", 0, 16, 0, 256)
    cache.read(recent, _LANDED)
    streamed = [(Region("w", row, row + 16, 0, 256), False) for row in range(0, 1024, 16)]
    cache.warm(streamed, [recent])  # 512 KiB through 32 KiB
    hit_bytes, fetch_bytes, _ = cache.read(recent, _LANDED)
    assert (hit_bytes, fetch_bytes) == (16 * 256 * 2, 0)
    assert cache.warmed["w"] == [0, 1024 * 256 * 2]
