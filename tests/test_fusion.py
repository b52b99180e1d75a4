"""The fusion pass: each rule, each refusal reason, and what fusing saves, exactly."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import load_hardware, load_workload, simulate
from simulator.config.workload import parse_workload
from simulator.engine.world import simulate_program
from simulator.errors import ConfigError
from simulator.pipeline import lower_workload
from simulator.schedule.fusion import plan_kernels


def op(name, kind, inputs, output, **attrs):
    return {
        "name": name,
        "op": kind,
        "inputs": inputs,
        "output": output,
        **({"attrs": attrs} if attrs else {}),
    }


def workload(hw, tensors, ops, fusion="auto", tiling=None, params=None):
    raw = {
        "name": "f",
        "hardware": hw.name,
        "params": params or {},
        "tensors": {n: s if isinstance(s, dict) else {"shape": s} for n, s in tensors.items()},
        "ops": ops,
        "schedule": {"fusion": fusion, "tiling": tiling or {}},
    }
    return parse_workload(raw, "f.yaml", hw)


def kernels_of(w):
    plan = plan_kernels(w)
    return [k.name for k in plan.kernels], plan.reasons


FFN = [
    op("gate", "matmul", ["x", "wg"], "g"),
    op("up", "matmul", ["x", "wu"], "u"),
    op("act", "silu", ["g"], "ga"),
    op("glu", "mul", ["ga", "u"], "h"),
    op("down", "matmul", ["h", "wd"], "y"),
]
FFN_TENSORS = {"x": [32, 64], "wg": [64, 96], "wu": [64, 96], "wd": [96, 64]}


def test_a_matmul_absorbs_its_elementwise_chain(tiny):
    w = workload(
        tiny,
        {"a": [32, 64], "b": [64, 64], "bias": [64]},
        [
            op("mm", "matmul", ["a", "b"], "c"),
            *[o for o in [op("bb", "bias_add", ["c", "bias"], "d"), op("g", "gelu", ["d"], "e")]],
        ],
    )
    names, reasons = kernels_of(w)
    assert names == ["mm+bb+g"] and reasons == {}


def test_gate_and_up_become_one_dual_gemm(tiny):
    names, reasons = kernels_of(workload(tiny, FFN_TENSORS, FFN))
    assert names == ["gate+up+act+glu", "down"]
    assert reasons["down"].startswith("a matmul reads its operands through L1, not from UB")
    plan = plan_kernels(workload(tiny, FFN_TENSORS, FFN))
    assert [o.name for o in plan.kernels[0].gemms] == ["gate", "up"]


def test_fusion_none_runs_every_op_alone(tiny):
    names, reasons = kernels_of(workload(tiny, FFN_TENSORS, FFN, fusion="none"))
    assert names == ["gate", "up", "act", "glu", "down"]
    assert reasons["act"] == "schedule.fusion is none: every op runs as its own kernel"


def test_a_result_read_twice_must_reach_hbm(tiny):
    w = workload(
        tiny,
        {"a": [32, 64], "b": [64, 64]},
        [
            op("mm", "matmul", ["a", "b"], "c"),
            op("r", "relu", ["c"], "d"),
            op("g", "gelu", ["c"], "e"),
        ],
    )
    names, reasons = kernels_of(w)
    assert names == ["mm", "r", "g"]
    assert reasons["r"] == "its input c is also read by g, so c must be written to HBM"


def test_an_input_produced_later_blocks_the_chain(tiny):
    w = workload(
        tiny,
        {"a": [32, 64], "b": [64, 64], "b2": [64, 64]},
        [
            op("mm", "matmul", ["a", "b"], "c"),
            op("mm2", "matmul", ["a", "b2"], "c2"),
            op("add", "add", ["c", "c2"], "d"),
        ],
    )
    names, _ = kernels_of(w)
    # add cannot join mm's kernel (c2 does not exist yet); it joins mm2's, which runs after mm
    assert names == ["mm", "mm2+add"]


def test_rowwise_after_a_matmul_needs_whole_rows(tiny):
    tensors = {"a": [32, 64], "w": [64, 64], "g": [64]}
    ops = [op("mm", "matmul", ["a", "w"], "c"), op("n", "rmsnorm", ["c", "g"], "d")]
    names, reasons = kernels_of(
        workload(tiny, tensors, ops, tiling={"mm": {"split": {"m": 1, "n": 2}}})
    )
    assert names == ["mm", "n"]
    assert "needs whole rows of c (N=64) on one core, but split.n=2" in reasons["n"]
    assert "set schedule.tiling.mm.split.n=1" in reasons["n"]
    names, _ = kernels_of(workload(tiny, tensors, ops, tiling={"mm": {"split": {"m": 2, "n": 1}}}))
    assert names == ["mm+n"]


def test_rowwise_needs_order_n(tiny):
    tensors = {"a": [32, 64], "w": [64, 64], "g": [64]}
    ops = [op("mm", "matmul", ["a", "w"], "c"), op("n", "rmsnorm", ["c", "g"], "d")]
    _, reasons = kernels_of(
        workload(
            tiny,
            tensors,
            ops,
            tiling={"mm": {"split": {"m": 2, "n": 1}, "order": "m", "base": {"n": 32}}},
        )
    )
    assert "set schedule.tiling.mm.order=n" in reasons["n"]


def test_rowwise_chain_must_fit_ub(tiny):
    tensors = {"a": [64, 64], "w": [64, 2048], "g": [2048]}
    ops = [op("mm", "matmul", ["a", "w"], "c"), op("n", "rmsnorm", ["c", "g"], "d")]
    _, reasons = kernels_of(
        workload(tiny, tensors, ops, tiling={"mm": {"split": {"m": 2, "n": 1}}})
    )
    assert "the chain needs" in reasons["n"] and "UB holds 16384 B" in reasons["n"]


def test_a_dual_gemm_keeps_no_whole_rows(tiny):
    tensors = {**FFN_TENSORS, "gn": [96]}
    del tensors["wd"]  # no down projection here
    ops = FFN[:4] + [op("n", "rmsnorm", ["h", "gn"], "hn")]
    _, reasons = kernels_of(workload(tiny, tensors, ops))
    assert reasons["n"] == "rmsnorm needs whole rows, which a dual-GEMM epilogue does not keep"


def test_a_reshape_is_a_view_in_hbm(tiny):
    w = workload(
        tiny,
        {"a": [32, 64], "b": [64, 64]},
        [
            op("mm", "matmul", ["a", "b"], "c"),
            op("v", "reshape", ["c"], "c3", shape=[2, 16, 64]),
            op("r", "relu", ["c3"], "d"),
        ],
    )
    names, reasons = kernels_of(w)
    assert names == ["mm", "r"]
    assert reasons["v"].startswith("a reshape is a view of c in HBM")


def test_explicit_groups(tiny):
    names, _ = kernels_of(workload(tiny, FFN_TENSORS, FFN, fusion=[["gate", "up", "act", "glu"]]))
    assert names == ["gate+up+act+glu", "down"]
    names, _ = kernels_of(workload(tiny, FFN_TENSORS, FFN, fusion=[["gate", "act"]]))
    assert names == ["gate+act", "up", "glu", "down"]


def test_a_group_the_rules_forbid_is_refused(tiny):
    with pytest.raises(
        ConfigError,
        match=r"group \[glu, down\] cannot run as one kernel: "
        r"'down' cannot join: a matmul reads",
    ):
        plan_kernels(workload(tiny, FFN_TENSORS, FFN, fusion=[["glu", "down"]]))


def test_fused_kernels_write_only_their_result(tiny):
    w = workload(tiny, FFN_TENSORS, FFN)
    report = simulate(w).to_dict()
    assert report["traffic"]["HBM"]["write_bytes"] == (
        w.tensors["h"].nbytes + w.tensors["y"].nbytes
    )
    assert report["tensors"]["g"]["role"] == "on_chip"
    assert report["tensors"]["h"]["role"] == "intermediate"


def test_linear_gelu_traffic_is_exact():
    """Unfused minus fused HBM traffic = the intermediates' round trips that fusion removed:
    every byte written, plus the bytes read back from HBM (those L2 absorbed are reported).
    The matmul's own inputs must then meet L2 alike in both runs: with the split 16x2 they
    do (with 8x4 the fused run fetches 8 KiB more of them from HBM)."""
    split = ["schedule.tiling.default.split.m=16", "schedule.tiling.default.split.n=2"]
    runs = {
        mode: simulate(
            load_workload("workloads/linear_gelu.yaml", [f"schedule.fusion={mode}", *split])
        ).to_dict()
        for mode in ("none", "auto")
    }
    hbm = {
        m: r["traffic"]["HBM"]["read_bytes"] + r["traffic"]["HBM"]["write_bytes"]
        for m, r in runs.items()
    }
    removed = runs["none"]["intermediates"]
    y_bytes = 2048 * 4096 * 2
    assert removed["hbm_write_bytes"] == 2 * y_bytes  # y and y + bias
    assert removed["hbm_read_bytes"] + removed["l2_read_bytes"] == 2 * y_bytes
    assert hbm["none"] - hbm["auto"] == removed["hbm_write_bytes"] + removed["hbm_read_bytes"]
    assert runs["auto"]["intermediates"]["hbm_write_bytes"] == 0
    # the first launch is waited on whole; each later kernel starts a device gap after the
    # one before it, its launch having overlapped that kernel
    gap = load_hardware("ascend910").kernel_gap
    assert (
        runs["none"]["launch_overhead_cycles"] == runs["auto"]["launch_overhead_cycles"] + 2 * gap
    )


EPILOGUE_OPS = st.lists(
    st.sampled_from(["relu", "gelu", "silu", "bias_add", "add", "mul"]), min_size=1, max_size=3
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 64), n=st.integers(1, 64), k=st.integers(1, 96), chain=EPILOGUE_OPS)
def test_fusing_never_adds_hbm_traffic(tiny, m, n, k, chain):
    tensors = {"a": [m, k], "w": [k, n], "bias": [n], "r": [m, n]}
    ops, value = [op("mm", "matmul", ["a", "w"], "c0")], "c0"
    for i, kind in enumerate(chain):
        inputs = {"bias_add": [value, "bias"], "add": [value, "r"], "mul": ["r", value]}.get(
            kind, [value]
        )
        ops.append(op(f"e{i}", kind, inputs, f"c{i + 1}"))
        value = f"c{i + 1}"
    tensors = {
        name: shape for name, shape in tensors.items() if any(name in o["inputs"] for o in ops)
    }
    traffic = {}
    for mode in ("none", "auto"):
        report = simulate(workload(tiny, tensors, ops, fusion=mode)).to_dict()
        traffic[mode] = report["traffic"]["HBM"]
        assert report["cycles"] >= report["roofline"]["bound_cycles"]
    assert traffic["auto"]["write_bytes"] <= traffic["none"]["write_bytes"]
    assert (
        traffic["auto"]["read_bytes"] + traffic["auto"]["write_bytes"]
        <= traffic["none"]["read_bytes"] + traffic["none"]["write_bytes"]
    )


def test_int8_halves_weight_bytes_and_runs_the_cube_at_its_int8_rate(tiny):
    def run(dtype):
        w = workload(
            tiny,
            {
                "a": {"shape": [32, 256], "dtype": dtype},
                "b": {"shape": [256, 64], "dtype": dtype, "kind": "weight"},
            },
            [op("mm", "matmul", ["a", "b"], "c")],
            tiling={
                "mm": {
                    "base": {"m": 32, "n": 32, "k": 64},
                    "step": {"k": 1},
                    "split": {"m": 1, "n": 1},
                }
            },
        )
        trace = simulate_program(lower_workload(w), tiny)
        cube = [r.end_cycle - r.start_cycle for r in trace.records if r.pipe == "CUBE"]
        report = simulate(w).to_dict()
        return cube, report["tensors"]["b"]["hbm_read_bytes"]

    cube16, b16 = run("fp16")
    cube8, b8 = run("int8")
    assert b8 * 2 == b16
    latency = tiny.cube.latency_cycles
    # 8 calls of 32x32x64: 2 x 2 x 4 fp16 fractals (k=16), 2 x 2 x 2 int8 fractals (k=32)
    assert cube16 == [latency + 16] * 8 and cube8 == [latency + 8] * 8


# Regressions from a review of the fusion pass and the vector chains.


def test_an_op_reading_the_running_value_twice_releases_its_slot_once(tiny):
    w = workload(
        tiny,
        {"a": [64, 64], "b": [64, 64]},
        [op("mm", "matmul", ["a", "b"], "c"), op("sq", "mul", ["c", "c"], "d")],
    )
    program = lower_workload(w)
    for core in program.kernels[0].cores:
        instrs = [i for q in core.queues.values() for i in q]
        acquired = sum(i.acquire[1] for i in instrs if i.acquire and i.acquire[0] == "UB")
        released = sum(n for i in instrs for b, n in i.release if b == "UB")
        assert acquired == released
    simulate(w)


def test_a_value_overwritten_in_place_is_not_read_again(tiny):
    w = workload(
        tiny, {"x": [32, 64]}, [op("rl", "relu", ["x"], "y"), op("ad", "add", ["y", "x"], "z")]
    )
    names, reasons = kernels_of(w)
    assert names == ["rl", "ad"]
    assert reasons["ad"] == "it reads x again after the kernel overwrote it in place"


def test_dual_gemm_needs_the_shared_tensor_as_both_a_operands(tiny):
    w = workload(
        tiny,
        {"x": [64, 64], "wg": [64, 64], "wu": [64, 64]},
        [
            op("gate", "matmul", ["x", "wg"], "g"),
            op("up", "matmul", ["wu", "x"], "u"),
            op("act", "silu", ["g"], "ga"),
            op("glu", "mul", ["ga", "u"], "h"),
        ],
    )
    names, _ = kernels_of(w)
    assert "gate+up+act+glu" not in names
    report = simulate(w).to_dict()
    assert report["tensors"]["wu"]["hbm_read_bytes"] == w.tensors["wu"].nbytes


def test_dual_gemm_waits_for_its_second_weight(tiny):
    w = workload(
        tiny,
        {"x": [32, 64], "wg": [64, 64], "wq": [64, 64]},
        [
            op("gate", "matmul", ["x", "wg"], "g"),
            op("deq", "relu", ["wq"], "wu"),
            op("up", "matmul", ["x", "wu"], "u"),
            op("act", "silu", ["g"], "ga"),
            op("glu", "mul", ["ga", "u"], "h"),
        ],
    )
    names, _ = kernels_of(w)
    assert names.index("deq") < next(i for i, n in enumerate(names) if "up" in n.split("+"))


def test_dual_gemm_epilogue_must_fit_ub(tiny):
    small = load_hardware_with(tiny, "UB.capacity", "4KiB")
    names, reasons = kernels_of(workload(small, FFN_TENSORS, FFN))
    assert "gate+up+act+glu" not in names
    assert "would not fit" in reasons["up"]
    simulate(workload(small, FFN_TENSORS, FFN))


def load_hardware_with(hw, path, value):
    from simulator import load_hardware

    return load_hardware("tiny", [(path, value)])


def test_default_tiling_of_a_dual_gemm_is_legal(tiny):
    w = workload(tiny, {"x": [256, 64], "wg": [64, 96], "wu": [64, 96], "wd": [96, 64]}, FFN)
    simulate(w)


def test_an_explicit_group_in_another_file_order(tiny):
    ops = [FFN[0], FFN[2], FFN[1], FFN[3], FFN[4]]  # gate, act, up, glu, down
    names, _ = kernels_of(workload(tiny, FFN_TENSORS, ops, fusion=[["gate", "act", "up", "glu"]]))
    assert names[0] == "gate+up+act+glu"


def test_an_input_behind_a_view_of_an_input_is_available(tiny):
    w = workload(
        tiny,
        {"a": [32, 64], "b": [64, 64], "r": [64, 32]},
        [
            op("flat", "reshape", ["r"], "r2", shape=[32, 64]),
            op("mm", "matmul", ["a", "b"], "c"),
            op("ad", "add", ["c", "r2"], "d"),
        ],
    )
    names, _ = kernels_of(w)
    assert "mm+ad" in names


def test_rowwise_chain_sizes_block_inputs_by_block(tiny):
    tensors = {"a": [32, 64], "w": [64, 256], "res": [32, 256], "g": [256]}
    ops = [
        op("mm", "matmul", ["a", "w"], "c"),
        op("ad", "add", ["c", "res"], "h"),
        op("n", "rmsnorm", ["h", "g"], "o"),
    ]
    names, reasons = kernels_of(
        workload(
            tiny,
            tensors,
            ops,
            tiling={"mm": {"split": {"m": 2, "n": 1}, "base": {"m": 16, "n": 32}, "buffers": 1}},
        )
    )
    assert names == ["mm+ad+n"], reasons
