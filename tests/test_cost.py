"""The timing rules of simulator/cost.py in closed form on the tiny chip, and proof that the
engine, the lowering and the roofline time things by them (not by copies of them)."""

import pytest

from simulator import load_workload
from simulator.config.link import Link
from simulator.cost import (
    all_reduce_cycles,
    block_packets,
    compute_cycles,
    cube_call_cycles,
    fractal_steps,
    memory_cycles,
    run_packets,
    shaped_rate,
    transfer_cycles,
    vector_op_cycles,
)
from simulator.pipeline import lower_workload, simulate

from .test_hostile import BASE


def test_a_move_is_its_start_up_then_its_bytes_at_the_rate():
    assert transfer_cycles(4096, 2, 128.0) == 2 + 32
    assert transfer_cycles(4097, 2, 128.0) == 2 + 33  # a partial cycle counts whole
    assert transfer_cycles(0, 5, 64.0) == 5


@pytest.mark.parametrize(
    "offset, nbytes, packets",
    [
        (0, 512, 1),
        (0, 128, 1),
        (0, 640, 2),  # 512 + 128
        (0, 896, 3),
        (0, 1000, 4),  # 512 + 256 + 128, and a remainder of 104
        (128, 640, 3),
        (256, 640, 3),
        (384, 640, 2),
        (32, 16384, 35),
        (0, 0, 0),
    ],
)
def test_a_run_moves_as_ascends_packets_cut_at_packet_boundaries(offset, nbytes, packets):
    """The vendor's rule (cache_tiling_cycle_model.cc): whole 512-byte packets, then a 256-
    and a 128-byte one, then one for any remainder; a run is first cut where it crosses a
    512-byte address."""
    assert run_packets(offset, nbytes, 512) == packets


def test_a_block_moves_its_rows_or_fractal_columns_as_runs():
    # fp16 K x N = 16384 x 6144 row-major: 128 rows of 320 columns are 640-byte runs, at
    # column 320 each starts 128 bytes into a packet (rows are 24 whole packets apart)
    assert block_packets(0, 128, 0, 320, 16384, 6144, 2, 512) == 128 * 2
    assert block_packets(0, 128, 320, 640, 16384, 6144, 2, 512) == 128 * 3
    assert block_packets(0, 4, 0, 6144, 16384, 6144, 2, 512) == 4 * 24  # whole rows: one run
    # a 100-column fp16 tensor (200-byte rows): whole rows are one run; half rows start at
    # offsets that cycle through the packet
    assert block_packets(0, 64, 0, 100, 64, 100, 2, 512) == 64 * 200 // 512
    assert block_packets(0, 300, 0, 50, 640, 100, 2, 512) == sum(
        run_packets(r * 200 % 512, 100, 512) for r in range(300)
    )
    assert block_packets(0, 5, 0, 50, 64, 100, 2, 512) == sum(
        run_packets(r * 200 % 512, 100, 512) for r in range(5)
    )
    # NZ: each fractal column of the block is one run of 32 bytes per row
    assert block_packets(0, 128, 0, 320, 16384, 6144, 2, 512, nz=True) == 20 * 8
    assert block_packets(0, 16384, 0, 32, 16384, 6144, 2, 512, nz=True) == 2 * 1024


def test_packets_slow_a_transfer_only_when_they_outweigh_its_bytes():
    assert shaped_rate(64.0, 8192, 16, 512) == 64.0  # whole packets: the path's rate
    assert shaped_rate(64.0, 640, 2, 512) == 64.0 * 640 / 1024
    assert shaped_rate(64.0, 640, 2, 0) == 64.0  # no packets on this engine


def test_a_cube_call_is_its_fill_then_one_fractal_step_a_cycle(tiny):
    fp16 = tiny.cube.fractal["fp16"]  # 16 x 16 x 16
    assert fractal_steps(32, 64, 64, fp16) == 2 * 4 * 4
    assert fractal_steps(17, 16, 16, fp16) == 2  # partial fractals are padded
    assert cube_call_cycles(tiny.cube, 32, 64, 64, fp16) == 4 + 32
    assert fractal_steps(16, 16, 64, tiny.cube.fractal["int8"]) == 2  # k of 32 for int8


@pytest.mark.parametrize(
    "cost_class, factor", [("elementwise", 1), ("transcendental", 4), ("reduction", 2)]
)
def test_a_vector_op_is_its_start_up_then_its_weighted_bytes_at_the_rate(tiny, cost_class, factor):
    # 1024 fp16 values: 2 KiB at 64 B/cycle is 32 cycles, times the class's cost factor
    assert vector_op_cycles(tiny.vector, 1024, 2, cost_class) == 4 + 32 * factor


def test_a_kernels_bound_is_its_busier_unit_or_its_bytes(tiny):
    # 2 cores x 16x16x16 MACs a cycle x 2 FLOPs: 16,384 FLOPs a cycle
    assert compute_cycles(16_384 * 100, "fp16", 0.0, tiny) == 100
    assert compute_cycles(0, "fp16", 64 * 2 * 50, tiny) == 50  # 64 B/cycle on 2 cores
    assert compute_cycles(16_384 * 10, "fp16", 64 * 2 * 50, tiny) == 50
    assert memory_cycles(6400, tiny) == 100  # 64 B/cycle


def test_the_lowering_and_the_roofline_use_the_rules(tmp_path, tiny):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "  - {name: act, op: gelu, inputs: [c], output: d}\n")
    workload = load_workload(path)
    program = lower_workload(workload)
    mmads = [i for k in program.kernels for core in k.cores for i in core.queues["CUBE"]]
    for mmad in mmads:  # 'mmad MxNxK' of one base block
        m, n, k = map(int, mmad.label.split()[1].split("x"))
        assert mmad.cycles == cube_call_cycles(
            tiny.cube, -(-m // 16) * 16, -(-n // 16) * 16, k, tiny.cube.fractal["fp16"]
        )
    vector = [
        i
        for k in program.kernels
        for core in k.cores
        for i in core.queues["VECTOR"]
        if i.label.startswith("gelu")
    ]
    assert vector and all(
        i.cycles == vector_op_cycles(tiny.vector, i.nbytes // 2, 2, "transcendental")
        for i in vector
    )
    report = simulate(workload).to_dict()
    flops = 2 * 32 * 64 * 64
    compute = compute_cycles(flops, "fp16", 0.0, tiny) + compute_cycles(
        0, "fp16", sum(k.vector_work_bytes for k in program.kernels), tiny
    )
    roof = report["roofline"]
    assert roof["compute_cycles"] == pytest.approx(compute)
    assert roof["memory_cycles"] == memory_cycles(roof["compulsory_hbm_bytes"], tiny)


def test_a_run_saturating_an_engine_is_memory_bound_by_it_not_latency_bound(tiny):
    """16x16x16 blocks re-fetch A and B for every block they meet: MTE2 moves far more than
    the compulsory bytes, and its own rate (64 B/cycle a core) holds the run back, although
    neither the Cube nor HBM is near its peak. The old two-roof bound said 'latency'."""
    from .helpers import matmul_workload

    workload = matmul_workload(tiny, 128, 128, 256, tiling={"base": {"m": 16, "n": 16, "k": 16}})
    report = simulate(workload).to_dict()
    ceilings = report["roofline"]["ceiling_cycles"]
    # MTE2 carries every byte into L1, at 64 B/cycle on each of the 2 cores
    assert ceilings["MTE2"] == report["traffic"]["L1"]["write_bytes"] / (64 * 2)
    assert report["binding"] == "MTE2" and report["bound"] == "memory"
    assert ceilings["MTE2"] / report["cycles"] >= 0.5
    assert max(ceilings["cube"], ceilings["hbm"]) / report["cycles"] < 0.5


@pytest.mark.parametrize("chips", [2, 4, 8])
def test_a_ring_all_reduce_is_its_start_up_then_each_steps_hop_and_share(chips):
    """2(N - 1) steps, each a hop's latency and 1/N of the bytes at the link's rate: a small
    all-reduce grows with the chips, as measured ones do (hw_models/h100.yaml's link)."""
    link = Link(bytes_per_cycle=100.0, latency_cycles=1000, hop_latency_cycles=50)
    nbytes = 8000
    steps = 2 * (chips - 1)
    expected = 1000 + steps * (50 + nbytes / chips / 100.0)
    assert all_reduce_cycles(link, chips, nbytes) == pytest.approx(expected)
    assert all_reduce_cycles(link, 1, nbytes) == 0
