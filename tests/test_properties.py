"""Physics as properties, over random shapes and legal tilings on the tiny chip."""

import json

import pytest
import simpy
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simulator.analysis.report import UNIT_OF_PIPE
from simulator.engine.bandwidth import SharedChannel, VectorChannel
from simulator.errors import TilingError
from simulator.pipeline import lower_workload, simulate

from .helpers import matmul_workload, with_queue_depth

EPILOGUES = st.sampled_from(
    [
        (),
        ({"name": "b", "op": "bias_add", "inputs": ["c", "bias"], "output": "d"},),
        ({"name": "g", "op": "gelu", "inputs": ["c"], "output": "d"},),
    ]
)


@st.composite
def cases(draw, max_m=96, max_n=96, max_k=160):
    """A shape and a tiling within it: base sizes fractal multiples no larger than the problem."""
    m, n, k = draw(st.integers(1, max_m)), draw(st.integers(1, max_n)), draw(st.integers(1, max_k))

    def base(dim, largest):
        return 16 * draw(st.integers(1, min(largest, -(-dim // 16))))

    base_k = base(k, 4)
    split_m = draw(st.integers(1, 2))
    tiling = {
        "base": {"m": base(m, 4), "n": base(n, 4), "k": base_k},
        "step": {"k": draw(st.integers(1, max(1, -(-k // base_k))))},
        "order": draw(st.sampled_from(["m", "n"])),
        "buffers": draw(st.integers(1, 2)),
        "split": {"m": split_m, "n": draw(st.integers(1, 2 // split_m))},
    }
    return m, n, k, tiling


def legal_workload(tiny, case, epilogue):
    m, n, k, tiling = case
    workload = matmul_workload(tiny, m, n, k, tiling=tiling, extra_ops=epilogue)
    try:
        lower_workload(workload)
    except TilingError:
        assume(False)
    return workload


SHAPES = dict(
    case=cases(),
    epilogue=EPILOGUES,
    depth=st.sampled_from([1, 3]),
    streams=st.sampled_from(["one", "per_tensor"]),
    blocks=st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SHAPES)
def test_physics_holds(tiny, case, epilogue, depth, streams, blocks):
    check_physics(with_queue_depth(tiny, depth, streams), by_blocks(case, blocks), epilogue)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SHAPES)
def test_physics_holds_broadly(tiny, case, epilogue, depth, streams, blocks):
    check_physics(with_queue_depth(tiny, depth, streams), by_blocks(case, blocks), epilogue)


def by_blocks(case, blocks):
    """The case with its split replaced by `split: blocks` (whole blocks dealt in waves)."""
    m, n, k, tiling = case
    return (m, n, k, dict(tiling, split="blocks")) if blocks else case


def check_physics(tiny, case, epilogue):
    workload = legal_workload(tiny, case, epilogue)
    report = simulate(workload).to_dict()
    traffic = report["traffic"]

    # never faster than the roofline, nor a kernel than what it moved and computed allows
    assert report["cycles"] >= report["roofline"]["bound_cycles"]
    assert 0 < report["roofline"]["efficiency"] <= 1
    for kernel in report["kernels"]:
        assert kernel["cycles"] >= kernel["floor_cycles"], kernel["name"]

    # every external input comes from HBM at least once; every result is written exactly once
    inputs = {t for op in workload.ops for t in op.inputs} - {op.output for op in workload.ops}
    assert traffic["HBM"]["read_bytes"] >= sum(workload.tensors[t].nbytes for t in inputs)
    assert traffic["HBM"]["write_bytes"] == sum(
        workload.tensors[op.output].nbytes for op in workload.ops
    )
    # bytes conserved: what is moved into L0A/L0B/UB is consumed from there, no more, no less
    for level in ("L0A", "L0B", "UB"):
        assert traffic[level]["read_bytes"] == traffic[level]["write_bytes"]
    # whatever L1 received came over L2 (hits) or HBM (misses, fetched by whole sectors)
    global_read = traffic["HBM"]["read_bytes"] + traffic["L2"]["read_bytes"]
    assert traffic["L1"]["write_bytes"] <= global_read

    # buffers never hold more than their capacity
    for buffer, peak in report["peak_buffer_bytes"].items():
        assert peak <= report["buffer_capacity_bytes"][buffer]

    # utilizations are fractions, and a pipe is never busy and waiting at once
    assert all(0 <= u <= 1 for u in report["utilization"].values())
    core_cycles = report["cycles"] * workload.hardware.cores
    for pipe, stalls in report["stalls"].items():
        busy = report["utilization"][UNIT_OF_PIPE.get(pipe, pipe)] * core_cycles
        rounding = len(report["kernels"]) * workload.hardware.cores  # a cycle per pipe log
        assert busy + stalls["data"] + stalls["buffer_slot"] <= core_cycles + rounding, pipe

    # every ceiling is a lower bound on the run; the binding one is the highest
    ceilings = report["roofline"]["ceiling_cycles"]
    assert all(0 <= c <= report["cycles"] for c in ceilings.values()), ceilings
    assert ceilings[report["binding"]] == max(ceilings.values())
    assert ceilings["hbm"] >= report["roofline"]["memory_cycles"] - 1e-9


@settings(max_examples=15, deadline=None)
@given(case=cases(64, 64, 96))
def test_same_input_gives_identical_json(tiny, case):
    workload = legal_workload(tiny, case, ())
    first = json.dumps(simulate(workload).to_dict(), sort_keys=True)
    second = json.dumps(simulate(workload).to_dict(), sort_keys=True)
    assert first == second


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 512),
    flows=st.lists(
        st.tuples(st.integers(0, 50), st.integers(1, 100_000), st.integers(1, 256)),
        min_size=1,
        max_size=40,
    ),
)
def test_shared_channel_never_exceeds_its_bandwidth(capacity, flows):
    """Each flow: (start cycle, bytes, engine cap). Max-min sharing must respect both limits;
    the channel for many flows (numpy) ends each flow at the very cycle the one that works
    flow by flow does."""
    finished = finish_cycles(SharedChannel, capacity, flows)
    assert finish_cycles(VectorChannel, capacity, flows) == finished
    assert len(finished) == len(flows)
    for index, (start, nbytes, cap) in enumerate(flows):
        # no flow beats its own cap or the whole channel
        assert finished[index] - start >= nbytes / min(cap, capacity) - 1e-6
    # all bytes that started by time t0 cannot finish before t0 + bytes / capacity
    first_start = min(start for start, _, _ in flows)
    total = sum(nbytes for _, nbytes, _ in flows)
    assert max(finished.values()) - first_start >= total / capacity - 1e-6


def finish_cycles(channel_class, capacity: int, flows) -> dict[int, float]:
    """The cycle each flow (start cycle, bytes, engine cap) ends at on a channel."""
    env = simpy.Environment()
    channel = channel_class(env, "HBM", float(capacity))
    finished = {}

    def flow(index, start, nbytes, cap):
        yield env.timeout(start)
        yield channel.transfer(nbytes, float(cap))
        finished[index] = env.now

    for index, (start, nbytes, cap) in enumerate(flows):
        env.process(flow(index, start, nbytes, cap))
    env.run()
    return finished


def processor_sharing_finishes(capacity: float, cap: float, sizes: list[int]) -> list[float]:
    """Fluid finish times of flows that all start at 0 with one per-flow cap: the k still
    running each move at min(cap, capacity / k), so they finish smallest first."""
    finishes, now, moved = [], 0.0, 0.0
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    for done, index in enumerate(order):
        rate = min(cap, capacity / (len(sizes) - done))
        now += (sizes[index] - moved) / rate
        moved = sizes[index]
        finishes.append((index, now))
    return [t for _, t in sorted(finishes)]


def run_channel(channel_class, capacity: int, cap: int, sizes: list[int]) -> list[int]:
    env = simpy.Environment()
    channel = channel_class(env, "HBM", float(capacity))
    finished = [0] * len(sizes)

    def flow(index, nbytes):
        yield channel.transfer(nbytes, float(cap))
        finished[index] = env.now

    for index, nbytes in enumerate(sizes):
        env.process(flow(index, nbytes))
    env.run()
    return finished


def assert_shares_fairly_and_wastes_nothing(channel_class, capacity, cap, sizes):
    """Every flow lands when fair sharing of the whole channel says, give or take the whole
    cycles it rounds to: a channel that leaves bandwidth idle lands them late."""
    expected = processor_sharing_finishes(capacity, cap, sizes)
    for got, fluid in zip(run_channel(channel_class, capacity, cap, sizes), expected):
        assert fluid - 1e-6 <= got <= fluid + len(sizes), (got, fluid)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 512),
    cap=st.integers(1, 512),
    sizes=st.lists(st.integers(1000, 100_000), min_size=1, max_size=8),
)
def test_shared_channel_uses_all_the_bandwidth_fair_sharing_allows(capacity, cap, sizes):
    assert_shares_fairly_and_wastes_nothing(SharedChannel, capacity, cap, sizes)
    assert_shares_fairly_and_wastes_nothing(VectorChannel, capacity, cap, sizes)


class WastefulChannel(SharedChannel):
    """A mutant that shares only 80% of its bandwidth: the property above must catch it."""

    def __init__(self, env, name, bytes_per_cycle):
        super().__init__(env, name, bytes_per_cycle * 0.8)


def test_the_sharing_property_catches_a_channel_that_wastes_bandwidth():
    with pytest.raises(AssertionError):
        assert_shares_fairly_and_wastes_nothing(WastefulChannel, 100, 1000, [5000, 20_000])
    with pytest.raises(AssertionError):  # capped flows: the waste shows once caps exceed it
        assert_shares_fairly_and_wastes_nothing(WastefulChannel, 100, 60, [5000, 20_000])


@settings(max_examples=500, deadline=None)
@given(
    offset=st.integers(0, 511), nbytes=st.integers(0, 1 << 16), packet_exponent=st.integers(5, 12)
)
def test_packets_never_move_a_run_faster_than_its_bytes_nor_waste_more_than_its_ends(
    offset, nbytes, packet_exponent
):
    """A run's packets carry at least its bytes (so no transfer beats the path's rate), a run
    that starts and ends on packet boundaries is exactly its whole packets, and only its two
    ends (three packets each at most) cost beyond them."""
    from simulator.cost import run_packets

    packet = 1 << packet_exponent
    packets = run_packets(offset % packet, nbytes, packet)
    assert packets * packet >= nbytes
    assert packets <= nbytes // packet + 6
    if offset % packet == 0 and nbytes % packet == 0:
        assert packets == nbytes // packet


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=cases(64, 64, 64),
    layers=st.integers(2, 5),
    l2_bytes=st.sampled_from([8 << 10, 32 << 10, 1 << 20]),
)
def test_a_replayed_run_is_the_simulated_run(tiny, case, layers, l2_bytes):
    """A chain of same-shaped matmuls (x · W0 · W1 ...), each its own kernel, whose later
    kernels may begin with the L2 holding what an earlier one began with: the engine's
    replays (engine/replay.py) give every record the simulation gives, whatever the L2 (a
    small one, where the chain's states repeat, replays a kernel in about 4 draws of 10)."""
    from dataclasses import replace

    from simulator.config.workload import parse_workload
    from simulator.engine.world import World, simulate_program

    m, n, _, tiling = case
    hw = replace(
        tiny,
        memories={**tiny.memories, "L2": replace(tiny.memories["L2"], capacity_bytes=l2_bytes)},
    )
    tensors = {"x0": {"shape": [m, n]}}
    ops = []
    for layer in range(layers):
        tensors[f"w{layer}"] = {"shape": [n, n], "kind": "weight"}
        ops.append(
            {
                "name": f"mm{layer}",
                "op": "matmul",
                "inputs": [f"x{layer}", f"w{layer}"],
                "output": f"x{layer + 1}",
            }
        )
    raw = {
        "name": "chain",
        "hardware": hw.name,
        "tensors": tensors,
        "ops": ops,
        "schedule": {"fusion": "none", "tiling": {op["name"]: tiling for op in ops}},
    }
    try:
        program = lower_workload(parse_workload(raw, "<chain>", hw))
    except TilingError:
        assume(False)
    replayed = World(program, hw).run()
    simulated = simulate_program(program, hw, replay=False)
    assert replayed.kernels == simulated.kernels
    assert (replayed.l2_hits, replayed.l2_misses) == (simulated.l2_hits, simulated.l2_misses)
    for one, other in zip(replayed.pipes, simulated.pipes, strict=True):
        assert list(one.records()) == list(other.records())
