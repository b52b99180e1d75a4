"""The foundation issue's acceptance figures, from the modelled mechanisms."""

import pytest

from simulator import load_workload, simulate

WEIGHT_BYTES = 3 * 4096 * 11008 * 2  # gate, up and down projections in fp16


@pytest.fixture(scope="module")
def decode():
    return simulate(load_workload("workloads/ffn_decode.yaml")).to_dict()


def test_decode_is_memory_bound_on_the_weights(decode):
    assert decode["bound"] == "memory"
    activations = 4096 * 2 + 2 * 11008 * 2 * 2 + 11008 * 2  # x, g/u (twice: act, glu), h
    hbm_read = decode["traffic"]["HBM"]["read_bytes"]
    assert abs(hbm_read - (WEIGHT_BYTES + activations)) / (WEIGHT_BYTES + activations) < 0.01


def test_decode_time_is_close_to_weight_bytes_over_bandwidth(decode):
    streaming_us = WEIGHT_BYTES / (decode["hbm_bandwidth_tbps"] * 1e12) * 1e6
    assert 1.0 <= decode["time_us"] / streaming_us <= 1.3
    assert decode["achieved_hbm_tbps"] >= 0.75 * decode["hbm_bandwidth_tbps"]


def test_decode_leaves_the_cube_idle(decode):
    assert decode["mac_utilization"] < 0.02  # useful MACs
    assert decode["utilization"]["cube"] < 0.10  # busy, counting fractal padding of m=1


@pytest.mark.slow
def test_prefill_shape_is_compute_bound():
    report = simulate(load_workload("workloads/ffn_decode.yaml", ["params.tokens=2048"])).to_dict()
    assert report["bound"] == "compute"
    assert report["utilization"]["cube"] >= 0.60
    # what holds the rest back is visible as stalls of the Cube's feeders
    assert report["stalls"]["CUBE"]["data"] > 0
