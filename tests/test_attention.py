"""Fused attention (FlashAttention) on the tiny chip: when the fusion pass forms it, what it
moves over HBM, what causality saves, and the chips and tilings it refuses."""

from dataclasses import replace

import pytest

from simulator.config.workload import parse_workload
from simulator.errors import ConfigError, TooLargeError
from simulator.pipeline import lower_workload, plan_kernels, simulate
from simulator.schedule.attention_plan import attention_blocks, attention_shape, attention_splits


def attention(
    hw,
    queries=64,
    keys=128,
    heads=2,
    head_dim=64,
    causal=False,
    fusion="auto",
    tiling=None,
    cache="fp16",
):
    raw = {
        "name": "attention",
        "hardware": hw.name,
        "tensors": {
            "q": {"shape": [heads, queries, head_dim]},
            "k": {"shape": [heads, keys, head_dim], "kind": "cache", "dtype": cache},
            "v": {"shape": [heads, keys, head_dim], "kind": "cache", "dtype": cache},
        },
        "ops": [
            {
                "name": "qk",
                "op": "batch_matmul",
                "inputs": ["q", "k"],
                "output": "s",
                "attrs": {"transpose_b": True},
            },
            {
                "name": "smx",
                "op": "softmax",
                "inputs": ["s"],
                "output": "p",
                "attrs": {"causal": causal},
            },
            {"name": "pv", "op": "batch_matmul", "inputs": ["p", "v"], "output": "o"},
        ],
        "schedule": {"fusion": fusion, "tiling": tiling or {}},
    }
    return parse_workload(raw, "<attention>", hw)


@pytest.fixture(params=["ub", "registers"])
def chip(request, tiny):
    """The tiny chip as it is (P back to the Cube through UB → L1) and with epilogues in the
    registers (P stays where the softmax left it, as on the GPU presets)."""
    return tiny if request.param == "ub" else replace(tiny, epilogue_in_registers=True)


def test_qk_softmax_pv_fuse_into_one_kernel(chip):
    kernels = plan_kernels(attention(chip)).kernels
    assert [k.name for k in kernels] == ["qk+smx+pv"]
    assert kernels[0].attention


def test_hbm_sees_q_k_v_read_once_and_o_written_once(chip):
    """One query block per head: every K and V block is read once, Q once, O written once;
    the scores and probabilities never reach HBM."""
    w = attention(chip, queries=16)
    report = simulate(w).to_dict()
    hbm = report["traffic"]["HBM"]
    nbytes = {name: t.nbytes for name, t in w.tensors.items()}
    assert hbm["read_bytes"] == nbytes["q"] + nbytes["k"] + nbytes["v"]
    assert hbm["write_bytes"] == nbytes["o"]
    assert report["tensors"].get("s", {"role": "on_chip"})["role"] == "on_chip"


@pytest.mark.parametrize("cache", ["fp8", "int8"])
def test_a_narrow_kv_cache_is_read_narrow_and_converted_once_per_block(chip, cache):
    """An fp8 or int8 cache: HBM reads K and V in one byte an element (half of fp16's), and
    each K and V block is converted to fp16 in L0B by one VECTOR instruction before the Cube
    reads it, at the vector unit's conversion rate; nothing else changes."""
    from simulator.cost import vector_op_cycles

    narrow, wide = attention(chip, queries=16, cache=cache), attention(chip, queries=16)
    read = [simulate(w).to_dict()["traffic"]["HBM"]["read_bytes"] for w in (narrow, wide)]
    assert read[1] - read[0] == 2 * 2 * 128 * 64  # K and V of 2 heads, 128 keys of 64
    block_kv = lower_workload(narrow).kernels[0].tiling["block_kv"]
    padded = block_kv * 64  # tiny's fractals divide both
    for core_narrow, core_wide in zip(
        lower_workload(narrow).kernels[0].cores, lower_workload(wide).kernels[0].cores
    ):
        converts = [i for i in core_narrow.queues["VECTOR"] if i.label.startswith("convert")]
        others = [i for i in core_narrow.queues["VECTOR"] if not i.label.startswith("convert")]
        scores = [i for i in core_narrow.queues["CUBE"] if i.label.startswith("mmad S")]
        assert len(converts) == 2 * len(scores)  # a K block and a V block per score block
        assert {i.cycles for i in converts} == {vector_op_cycles(chip.vector, padded, 2, "convert")}
        assert [i.label for i in others] == [i.label for i in core_wide.queues["VECTOR"]]


def test_unfused_attention_converts_a_narrow_cache_as_its_matmuls_load_it(tiny):
    """Kept apart (fusion none), Q·Kᵀ and P·V are batch matmuls of fp16 by an fp8 cache:
    each converts its B blocks (vector work it did not have with an fp16 cache) and reads the
    cache in one byte an element."""
    narrow = lower_workload(attention(tiny, cache="fp8", fusion="none"))
    wide = lower_workload(attention(tiny, fusion="none"))
    work = {k.name: k.vector_work_bytes for k in narrow.kernels}
    assert work["qk"] > 0 and work["pv"] > 0
    assert {k.name: k.vector_work_bytes for k in wide.kernels}["qk"] == 0
    reads = [
        simulate(attention(tiny, cache=c, fusion="none")).to_dict()["traffic"]["HBM"]["read_bytes"]
        for c in ("fp8", "fp16")
    ]
    assert reads[1] - reads[0] == 2 * 2 * 128 * 64


def test_fused_attention_moves_fewer_bytes_than_unfused(chip):
    fused = simulate(attention(chip)).to_dict()["traffic"]["HBM"]
    unfused = simulate(attention(chip, fusion="none")).to_dict()["traffic"]["HBM"]
    assert (
        fused["read_bytes"] + fused["write_bytes"] < unfused["read_bytes"] + unfused["write_bytes"]
    )


def test_time_depends_on_the_blocks_the_buffers_allow(tiny):
    """Where P stays in the registers, 32-query blocks fit and fused attention is faster;
    through tiny's 16 KiB UB only 16-query blocks fit, every one re-reads K and V and waits
    on the trip of P back to the Cube, and the three separate kernels are faster."""
    registers = replace(tiny, epilogue_in_registers=True)
    for chip, fused_wins in ((registers, True), (tiny, False)):
        fused = simulate(attention(chip, keys=1024)).cycles
        unfused = simulate(attention(chip, keys=1024, fusion="none")).cycles
        assert (fused < unfused) is fused_wins


def test_causal_attention_skips_the_blocks_after_each_querys_position(tiny):
    """128 queries over their own 128 keys, in blocks of 16 queries and 32 keys: a query
    block ending at position p computes only the key blocks up to p, so the Cube does
    sum over the 8 query blocks of ceil((16 i + 16) / 32) key blocks: 20 of 32."""
    full = simulate(attention(tiny, queries=128, keys=128)).to_dict()
    causal = simulate(attention(tiny, queries=128, keys=128, causal=True)).to_dict()
    w = attention(tiny)
    assert attention_blocks(attention_shape(plan_kernels(w).kernels[0], w), tiny) == (16, 32)
    blocks = sum(-(-(16 * i + 16) // 32) for i in range(8))
    assert causal["flops"] * 32 == full["flops"] * blocks
    assert causal["cycles"] < full["cycles"]


def test_a_chip_that_cannot_bring_p_back_to_the_cube_keeps_the_ops_apart(tiny):
    engines = {**tiny.engines}
    engines["MTE3"] = replace(
        engines["MTE3"],
        path_bytes_per_cycle={
            k: v for k, v in engines["MTE3"].path_bytes_per_cycle.items() if k != ("UB", "L1")
        },
    )
    plan = plan_kernels(attention(replace(tiny, engines=engines)))
    assert [k.name for k in plan.kernels] != ["qk+smx+pv"]
    assert "no fused attention with qk: tiny has no path from UB back to L1" in plan.reasons["pv"]


def test_a_tiling_for_the_head_of_a_fused_attention_kernel_is_refused(tiny):
    w = attention(tiny, tiling={"qk": {"base": {"m": 16, "n": 16, "k": 16}}})
    with pytest.raises(ConfigError, match="heads the fused attention kernel qk\\+smx\\+pv"):
        plan_kernels(w)


def test_split_keys_when_units_leave_cores_idle(tiny):
    """Decode: one query block per head leaves cores idle, so the keys are split into
    chunks of whole blocks over the idle cores (FlashDecoding); prefill is not split."""
    w = attention(replace(tiny, cores=8), queries=16, keys=1024)
    kernel = plan_kernels(w).kernels[0]
    s = attention_shape(kernel, w)
    blocks = attention_blocks(s, w.hardware)
    assert attention_splits(s, w.hardware, *blocks) == 4  # 2 units, 8 cores, 32 key blocks
    assert attention_splits(replace(s, keys=160), w.hardware, *blocks) == 3  # 5 blocks: 2+2+1
    assert attention_splits(replace(s, keys=128), w.hardware, *blocks) == 1  # 4 blocks
    assert attention_splits(replace(s, causal=True), w.hardware, *blocks) == 1
    assert attention_splits(s, tiny, *blocks) == 1  # 2 units on 2 cores


def test_split_keys_store_partials_that_a_second_kernel_combines(chip):
    """Each chunk stores its fp32 partial O and log-sum-exp; a second kernel reads them back
    and writes O once. The Cube does the same work as unsplit, K and V are still read once,
    and the idle cores make it faster than the two units' cores alone."""
    split_chip = replace(chip, cores=8)
    w = attention(split_chip, queries=16, keys=1024, head_dim=64)
    report = simulate(w)
    plain = simulate(attention(chip, queries=16, keys=1024, head_dim=64))
    assert [k.name for k in report.kernels] == ["qk+smx+pv", "qk+smx+pv (combine)"]
    assert report.kernels[0].tiling["splits"] == 4
    partials = report.to_dict()["tensors"]["o.partials"]
    assert partials["role"] == "intermediate"
    assert partials["bytes"] == 2 * 4 * 16 * (64 + 1) * 4  # heads x chunks x rows x (O, lse)
    assert partials["hbm_write_bytes"] == partials["bytes"]
    hbm = report.to_dict()["traffic"]["HBM"]
    nbytes = {name: t.nbytes for name, t in w.tensors.items()}
    assert hbm["write_bytes"] == nbytes["o"] + partials["bytes"]
    assert hbm["read_bytes"] >= nbytes["q"] + nbytes["k"] + nbytes["v"]
    assert report.flops == plain.flops
    assert report.cycles < plain.cycles


def test_a_kernel_too_large_to_hold_is_refused_before_it_is_built(tiny):
    """64 heads of 4096 causal queries in tiny's 16 x 32 blocks: some 13.8 million
    instructions, counted (13 a block through UB, 3 a unit) and refused at once, with the
    shape and the blocks."""
    with pytest.raises(TooLargeError, match="about 13,787,136 instructions.*blocks of 16 x 32"):
        lower_workload(attention(tiny, queries=4096, keys=4096, heads=64, causal=True))


def s_blocks_per_core(w):
    """How many score blocks (Q·Kᵀ) each core of the attention kernel computes."""
    cores = lower_workload(w).kernels[0].cores
    return [sum(i.label.startswith("mmad S") for i in core.queues["CUBE"]) for core in cores]


def test_causal_units_are_dealt_longest_first_to_the_least_loaded_core(tiny):
    """8 query blocks of 1, 1, 2, 2, 3, 3, 4 and 4 key blocks on 3 cores: the longest first,
    each to the core with the least work, gives 7, 7 and 6 (dealt in turn: 7, 8 and 5)."""
    w = attention(replace(tiny, cores=3), queries=128, keys=128, heads=1, causal=True)
    assert sorted(s_blocks_per_core(w)) == [6, 7, 7]


def test_in_the_registers_a_unit_starts_once_the_one_before_is_stored(tiny):
    """On a chip whose epilogues run in the registers, the warps that compute a unit also
    store it: each unit's first score block waits for the store of the unit before it."""
    chip = replace(tiny, epilogue_in_registers=True, cores=1)
    core = lower_workload(attention(chip, queries=32, keys=64, heads=2)).kernels[0].cores[0]
    stores = [i for i in core.queues["FIXPIPE"] if i.label.startswith("store")]
    scores = [i for i in core.queues["CUBE"] if i.label.startswith("mmad S")]
    firsts = scores[:: len(scores) // 2]  # two units of equal blocks
    assert len(stores) == len(firsts) == 2
    assert set(stores[0].sets) & set(firsts[1].waits)
