"""The timing rules of simulator/cost.py in closed form on the tiny chip, and proof that the
engine, the lowering and the roofline time things by them (not by copies of them)."""

import pytest

from simulator import load_workload
from simulator.cost import (
    compute_cycles,
    cube_call_cycles,
    fractal_steps,
    memory_cycles,
    transfer_cycles,
    vector_op_cycles,
)
from simulator.pipeline import lower_workload, simulate

from .test_hostile import BASE


def test_a_move_is_its_start_up_then_its_bytes_at_the_rate():
    assert transfer_cycles(4096, 2, 128.0) == 2 + 32
    assert transfer_cycles(4097, 2, 128.0) == 2 + 33        # a partial cycle counts whole
    assert transfer_cycles(0, 5, 64.0) == 5


def test_a_cube_call_is_its_fill_then_one_fractal_step_a_cycle(tiny):
    fp16 = tiny.cube.fractal["fp16"]                         # 16 x 16 x 16
    assert fractal_steps(32, 64, 64, fp16) == 2 * 4 * 4
    assert fractal_steps(17, 16, 16, fp16) == 2              # partial fractals are padded
    assert cube_call_cycles(tiny.cube, 32, 64, 64, fp16) == 4 + 32
    assert fractal_steps(16, 16, 64, tiny.cube.fractal["int8"]) == 2   # k of 32 for int8


@pytest.mark.parametrize("cost_class, factor", [("elementwise", 1), ("transcendental", 4),
                                                ("reduction", 2)])
def test_a_vector_op_is_its_start_up_then_its_weighted_bytes_at_the_rate(tiny, cost_class,
                                                                           factor):
    # 1024 fp16 values: 2 KiB at 64 B/cycle is 32 cycles, times the class's cost factor
    assert vector_op_cycles(tiny.vector, 1024, 2, cost_class) == 4 + 32 * factor


def test_a_kernels_bound_is_its_busier_unit_or_its_bytes(tiny):
    # 2 cores x 16x16x16 MACs a cycle x 2 FLOPs: 16,384 FLOPs a cycle
    assert compute_cycles(16_384 * 100, "fp16", 0.0, tiny) == 100
    assert compute_cycles(0, "fp16", 64 * 2 * 50, tiny) == 50     # 64 B/cycle on 2 cores
    assert compute_cycles(16_384 * 10, "fp16", 64 * 2 * 50, tiny) == 50
    assert memory_cycles(6400, tiny) == 100                          # 64 B/cycle


def test_the_lowering_and_the_roofline_use_the_rules(tmp_path, tiny):
    path = tmp_path / "w.yaml"
    path.write_text(BASE + "  - {name: act, op: gelu, inputs: [c], output: d}\n")
    workload = load_workload(path)
    program = lower_workload(workload)
    mmads = [i for k in program.kernels for core in k.cores for i in core.queues["CUBE"]]
    for mmad in mmads:                                  # 'mmad MxNxK' of one base block
        m, n, k = map(int, mmad.label.split()[1].split("x"))
        assert mmad.cycles == cube_call_cycles(tiny.cube, -(-m // 16) * 16, -(-n // 16) * 16,
                                               k, tiny.cube.fractal["fp16"])
    vector = [i for k in program.kernels for core in k.cores for i in core.queues["VECTOR"]
              if i.label.startswith("gelu")]
    assert vector and all(i.cycles == vector_op_cycles(tiny.vector, i.nbytes // 2, 2,
                                                       "transcendental") for i in vector)
    report = simulate(workload).to_dict()
    flops = 2 * 32 * 64 * 64
    compute = compute_cycles(flops, "fp16", 0.0, tiny) + compute_cycles(
        0, "fp16", sum(k.vector_work_bytes for k in program.kernels), tiny)
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
