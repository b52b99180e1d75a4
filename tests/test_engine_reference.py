"""The engine against the plain model it stands for (simulator/engine/reference.py: one
SimPy process per pipe, waiting in global time on every flag). The engine times on-chip work
without SimPy (pipes run ahead of the global clock); this checks, over random programs and
sampled ones, that every record is the same."""

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.engine.reference import ProcessPerPipeWorld
from simulator.engine.world import World
from simulator.pipeline import lower_workload

from .helpers import with_queue_depth
from .test_properties import EPILOGUES, cases, legal_workload


def records_of(world_class, workload, sample=False):
    program = lower_workload(workload, sample)
    trace = world_class(program, workload.hardware).run()
    return trace.cycles, sorted(trace.records), trace.kernels


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=cases(),
    epilogue=EPILOGUES,
    split=st.sampled_from([1, 2, "blocks"]),
    depth=st.sampled_from([1, 2, 5]),
    streams=st.sampled_from(["one", "per_tensor"]),
    serialise=st.booleans(),
    gap=st.sampled_from([None, 7]),
    graph=st.booleans(),
    registers=st.booleans(),
    fusion=st.sampled_from(["none", "auto"]),
)
def test_running_ahead_gives_the_times_of_a_process_per_pipe(
    tiny, case, epilogue, split, depth, streams, serialise, gap, graph, registers, fusion
):
    m, n, k, tiling = case
    tiling = dict(tiling, split=split if split == "blocks" else {"m": 1, "n": split})
    hw = replace(
        with_queue_depth(tiny, depth, streams),
        l2_serialises_same_address=serialise,
        kernel_gap_cycles=gap,
        graph_launch=graph,
        epilogue_in_registers=registers,
    )
    workload = replace(
        legal_workload(tiny, (m, n, k, tiling), epilogue), hardware=hw, fusion=fusion
    )
    assert records_of(World, workload) == records_of(ProcessPerPipeWorld, workload)


def test_the_reference_agrees_on_a_decode_ffn(ascend):
    from simulator import load_workload

    workload = load_workload("workloads/ffn_decode.yaml", ["params.hidden=512", "params.ffn=1024"])
    assert records_of(World, workload) == records_of(ProcessPerPipeWorld, workload)


@pytest.mark.parametrize(
    "path, hardware",
    [
        ("workloads/ffn_decode.yaml", "a100"),
        pytest.param("workloads/linear_gelu.yaml", "tiny", marks=pytest.mark.slow),
    ],
)
def test_the_reference_agrees_on_sampled_kernels(path, hardware):
    """Sampling is the engine's own mechanism (the L2 warmed as the skipped units would have
    left it, the kernel run on for them), and the plain model runs it too: K chunks sampled
    (ffn_decode on a100) and rows of blocks with an epilogue (linear_gelu on tiny)."""
    from simulator import load_workload

    workload = load_workload(path, [f"hardware={hardware}"])
    engine = records_of(World, workload, sample=True)
    assert any(span.extrapolated_cycles for span in engine[2])  # something was sampled
    assert engine == records_of(ProcessPerPipeWorld, workload, sample=True)
