"""The cache of simulated runs (issue 23, item 3): a repeated step or sweep point costs a
file read and gives the report a fresh run gives, bit for bit; any change to what decides a
run (a figure, a shape, a tiling, the simulator's code) misses; the cache can be emptied,
turned off, and never turns a damaged entry or an unwritable folder into an error."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from simulator import load_hardware, load_workload, simulate
from simulator.config.model import parse_model
from simulator.step_cache import (
    ENV,
    OFF,
    cache_state,
    clear_cache,
    code_digest,
    run_key,
    simulate_cached,
)
from simulator.studies.inference import infer

from .terminal import ROOT
from .test_every_request import TOY as TOY_CONFIG

FFN = ROOT / "workloads" / "ffn_decode.yaml"
TOY = parse_model(TOY_CONFIG, "toy", "<toy>")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def entries(folder) -> list:
    return sorted(folder.glob("runs/*/*.pickle"))


def test_a_repeated_run_is_read_back_and_equals_a_fresh_one(cache, monkeypatch):
    workload = load_workload(FFN)
    fresh = simulate(workload)
    first = simulate_cached(workload)
    assert len(entries(cache)) == 1
    monkeypatch.setattr("simulator.pipeline._simulate", lambda *a: pytest.fail("simulated"))
    again = simulate_cached(load_workload(FFN))  # read back, not simulated
    assert again.to_json() == first.to_json() == fresh.to_json()
    assert again.trace is None  # timelines come from `run`, which always simulates


@pytest.mark.parametrize(
    "change",
    [
        "hardware.HBM.bandwidth=1.5TB/s",  # a figure
        "params.tokens=2",  # a shape
        "schedule.tiling.default.buffers=1",  # a tiling
        "name=another",  # what the report says it ran
    ],
)
def test_whatever_decides_a_run_changes_its_key(change):
    assert run_key(load_workload(FFN, [change]), None) != run_key(load_workload(FFN), None)


def test_the_key_depends_on_the_simulators_code_and_the_cycle_budget():
    workload = load_workload(FFN)
    assert run_key(workload, None) != run_key(workload, 10**9)
    assert len(code_digest()) == 64
    code_digest.cache_clear()
    try:
        assert code_digest() == code_digest()  # from the files, the same every time
    finally:
        code_digest.cache_clear()


def test_keys_are_the_same_in_every_process():
    """String hashes follow the hash seed: the key must not."""
    script = (
        "from simulator import load_hardware, load_model\n"
        "from simulator.config.runtime import load_runtime\n"
        "from simulator.config.transformer import Step, step_workload\n"
        "from simulator.step_cache import run_key\n"
        "hw = load_runtime('vllm-v1').on(load_hardware('h100'))\n"
        "w = step_workload(load_model('mixtral-8x7b'), hw, Step('decode', 2, 1, 64), 1)\n"
        "print(run_key(w, None))\n"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(keys) == 1


def test_infer_reads_its_steps_back(cache, monkeypatch):
    model, hw = TOY, load_hardware("tiny")
    first = infer(model, hw, prompt=8, generate=3, decode_points=2).to_dict()
    stored = entries(cache)
    assert len(stored) == 3  # the prefill and two decode contexts
    monkeypatch.setattr("simulator.pipeline._simulate", lambda *a: pytest.fail("simulated"))
    assert infer(model, hw, prompt=8, generate=3, decode_points=2).to_dict() == first
    assert entries(cache) == stored


def test_a_damaged_entry_is_simulated_anew_and_an_unwritable_folder_is_passed_by(
    cache, tmp_path, monkeypatch
):
    workload = load_workload(FFN)
    fresh = simulate_cached(workload).to_json()
    (entry,) = entries(cache)
    entry.write_bytes(b"half an entry")
    assert simulate_cached(workload).to_json() == fresh
    assert entry.read_bytes() != b"half an entry"  # replaced by the run just simulated
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    monkeypatch.setenv(ENV, str(blocked))
    assert simulate_cached(workload).to_json() == fresh


def test_off_neither_reads_nor_writes(cache, monkeypatch):
    monkeypatch.setenv(ENV, OFF)
    report = simulate_cached(load_workload(FFN))
    assert report.trace is None and not cache.exists()
    assert cache_state().folder is None


def test_clear_empties_it(cache):
    simulate_cached(load_workload(FFN))
    simulate_cached(load_workload(FFN, ["params.tokens=2"]))
    state = cache_state()
    assert state.entries == 2 and state.nbytes > 0
    assert clear_cache() == state
    assert cache_state().entries == 0


def test_the_command_line_says_what_it_holds_clears_it_and_no_cache_bypasses_it(cache, tmp_path):
    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "simulator", *args],
            capture_output=True,
            text=True,
            env={**os.environ, ENV: str(cache)},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("cache").startswith("holds 0 runs, 0 B: ")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TOY_CONFIG))
    infer_args = ("infer", str(config), "--hardware", "tiny", "--prompt", "8", "--generate", "2")
    uncached = run(*infer_args, "--no-cache")
    assert run("cache").startswith("holds 0 runs")
    assert run(*infer_args) == uncached
    assert run("cache").startswith("holds 2 runs")
    assert run("cache", "--clear").startswith("removed 2 runs")
    assert run("cache").startswith("holds 0 runs")


def test_a_cached_report_is_a_whole_report():
    """What the cache keeps is the report less its trace: every field a caller reads."""
    report = simulate(load_workload(FFN))
    kept = dataclasses.replace(report, trace=None)
    assert kept.to_dict() == report.to_dict()


def test_a_sweep_reads_its_points_back(cache, monkeypatch):
    from simulator.studies.sweep import sweep

    first = sweep(str(FFN), {"params.tokens": [1, 2]}, workers=1)
    assert len(entries(cache)) == 2
    monkeypatch.setattr("simulator.pipeline._simulate", lambda *a: pytest.fail("simulated"))
    assert sweep(str(FFN), {"params.tokens": [1, 2]}, workers=1) == first


@pytest.mark.slow
def test_the_tuner_reads_its_kernel_runs_back(cache, monkeypatch):
    from simulator.studies.search import tune

    workload = load_workload(FFN)
    first = tune(workload, top=2)
    assert entries(cache)
    monkeypatch.setattr(
        "simulator.engine.world.simulate_program", lambda *a: pytest.fail("simulated")
    )
    assert tune(load_workload(FFN), top=2) == first
