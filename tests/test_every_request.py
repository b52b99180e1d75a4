"""Every valid request runs, every invalid one is refused in one line (issue 21): a named
regression test for each class of request that once crashed or was wrongly refused."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.config.hardware import load_hardware
from simulator.config.model import load_model, model_names, parse_model
from simulator.config.transformer import Step, step_workload
from simulator.config.workload import parse_workload
from simulator.cost import all_reduce_cycles
from simulator.errors import ConfigError, SimulatorError
from simulator.pipeline import simulate
from simulator.studies.inference import fewest_chips, infer
from simulator.studies.outputs import Output, check_outputs, write_json
from simulator.workers import Stopped, stopping_on_sigterm

from .terminal import ROOT, run_in_terminal

TOY = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
}


def attention_workload(hw, queries: int, keys: int, causal: bool, softmax=None, heads=2):
    attrs = {**({"causal": True} if causal else {}), **(softmax or {})}
    raw = {
        "name": "attention",
        "hardware": hw.name,
        "tensors": {
            "q": {"shape": [heads, queries, 128]},
            "k": {"shape": [heads, keys, 128], "kind": "cache"},
            "v": {"shape": [heads, keys, 128], "kind": "cache"},
        },
        "ops": [
            {"name": "qk", "op": "batch_matmul", "inputs": ["q", "k"], "output": "s",
             "attrs": {"transpose_b": True}},
            {"name": "sm", "op": "softmax", "inputs": ["s"], "output": "p", "attrs": attrs},
            {"name": "pv", "op": "batch_matmul", "inputs": ["p", "v"], "output": "o"},
        ],
        "schedule": {"fusion": "auto"},
    }  # fmt: skip
    return parse_workload(raw, "attention.yaml", hw)


def test_class0_infer_at_a_terminal_shows_progress_and_succeeds():
    """Every infer once crashed when stderr was a terminal (its progress bar had no total)."""
    code, output = run_in_terminal(["infer", "llama2-7b", "--prompt", "16", "--generate", "2"])
    assert code == 0, output
    assert "Traceback" not in output
    assert "infer llama2-7b:" in output and "step/s" in output  # the progress bar was drawn
    assert "time to first token" in output


@pytest.mark.parametrize("chip", ["a100", "h100", "h200"])
@pytest.mark.parametrize("keys", [1, 8, 17, 24, 100, 120])
def test_class1_attention_over_keys_past_a_fractal_runs_on_gpu_presets(chip, keys):
    """A key block is K's N side (fractal n=8 on a GPU) and V's K side (fractal k=16): a
    count 1-8 past a multiple of 16 once overflowed V's slot."""
    hw = load_hardware(chip)
    for queries, causal in ((keys, True), (4, False)):
        report = simulate(attention_workload(hw, queries, keys, causal)).to_dict()
        assert report["roofline"]["efficiency"] <= 1


def test_class2_a_router_with_fewer_columns_than_a_sector_gets_a_legal_tiling():
    """mixtral's router (8 columns) once got a 16-column base block on GPU presets, refused
    as a user mistake in a field the model config does not have."""
    model = parse_model({**TOY, "num_local_experts": 8, "num_experts_per_tok": 2}, "moe", "<>")
    for chip in ("a100", "h100"):
        simulate(step_workload(model, load_hardware(chip), Step("prefill", 1, 16, 16), 1))


@pytest.mark.parametrize("op", ["rmsnorm", "softmax"])
def test_class2_a_row_longer_than_ub_is_normalised_in_two_passes(tiny, op):
    """A row that does not fit UB (16 KiB on tiny) is split along the row: the statistics
    over its chunks, then their application, each chunk read twice; the result is stored
    once and the vector work is the whole op's."""
    hidden = 16384
    raw = {
        "name": "norm",
        "hardware": "tiny",
        "tensors": {
            "x": {"shape": [4, hidden]},
            **({"g": {"shape": [hidden], "kind": "weight"}} if op == "rmsnorm" else {}),
        },
        "ops": [{"name": "n", "op": op, "inputs": ["x", "g"] if op == "rmsnorm" else ["x"],
                 "output": "y"}],
    }  # fmt: skip
    workload = parse_workload(raw, "norm.yaml", tiny)
    report = simulate(workload)
    kernel = report.kernels[0]
    assert kernel.tiling["passes"] == 2 and kernel.tiling["row_chunk"] < hidden
    x_bytes = workload.tensors["x"].nbytes
    d = report.to_dict()
    reads = d["traffic"]["HBM"]["read_bytes"] + d["traffic"]["L2"]["read_bytes"]
    assert reads >= 2 * x_bytes  # every chunk of x is read for each pass
    assert d["traffic"]["HBM"]["write_bytes"] == workload.tensors["y"].nbytes
    assert d["peak_buffer_bytes"]["UB"] <= tiny.buffer_bytes["UB"]
    assert d["roofline"]["efficiency"] <= 1


def test_class2_a_hidden_size_of_8192_runs_on_gpu_presets():
    """llama2-70b's RMSNorm rows (8192 fp16 values, 32 KiB with their gain and double
    buffering 64 KiB) do not fit h100's UB: split, not refused."""
    model = parse_model({**TOY, "hidden_size": 8192, "num_attention_heads": 64}, "wide", "<>")
    simulate(step_workload(model, load_hardware("h100"), Step("decode", 1, 1, 16), 1, "auto"))


@pytest.mark.parametrize("chip", ["tiny", "h100", "ascend910"])
@pytest.mark.parametrize("queries, keys", [(4, 1000), (8, 1000), (64, 64), (100, 300)])
def test_class4_causal_queries_after_earlier_keys_see_them_all(chip, queries, keys):
    """Fewer causal queries than keys (a prompt's later chunk, a speculative step): the
    diagonal sits keys - queries along, so the last query sees every key. Once the queries
    were placed at the start and the run read fewer keys than its roofline counts."""
    hw = load_hardware(chip)
    report = simulate(attention_workload(hw, queries, keys, True)).to_dict()
    assert report["roofline"]["efficiency"] <= 1
    every_key = simulate(attention_workload(hw, queries, keys, False)).to_dict()
    assert report["flops"] <= every_key["flops"]
    if queries == 4:  # four queries past 996 keys: all but the last block is computed
        assert report["flops"] >= every_key["flops"] * 0.8


def test_class4_a_causal_softmax_places_its_queries_or_is_refused(tiny):
    with pytest.raises(ConfigError, match="whole groups of one sequence's queries"):
        attention_workload(tiny, 12, 8, True)
    with pytest.raises(ConfigError, match="only a causal softmax"):
        attention_workload(tiny, 4, 8, False, {"queries": 4})
    attention_workload(tiny, 12, 8, True, {"queries": 4})  # three query heads of 4 over 8 keys


def test_class5_a_step_of_more_tokens_than_the_vocabulary_runs(tiny):
    """The embedding gather reads a row per token; with more tokens than rows, rows repeat."""
    model = parse_model({**TOY, "vocab_size": 100}, "small-vocab", "<>")
    report = simulate(step_workload(model, tiny, Step("prefill", 3, 64, 64), 1)).to_dict()
    gather = report["kernels"][0]
    assert gather["ops"] == ["embed_lookup"]
    assert gather["traffic"]["HBM"]["read_bytes"] <= 100 * 256 * 2  # the table, at most
    assert gather["traffic"]["HBM"]["write_bytes"] == 3 * 64 * 256 * 2


def test_class6_force_never_lets_an_output_replace_an_input(tmp_path):
    """infer's input check once compared the name given, not the file it resolves to."""
    config = ROOT / "workloads" / "models" / "llama2-7b.json"
    before = config.read_bytes()
    code, output = run_in_terminal(
        ["infer", "llama2-7b", "--prompt", "4", "--generate", "0", "--force", "--json",
         str(config)]
    )  # fmt: skip
    assert code == 2 and "that is an input file" in output, output
    assert config.read_bytes() == before


def test_class6_a_file_that_appears_during_a_run_is_not_replaced(tmp_path):
    """The path was free when checked; a user's file put there before the report is written
    is left alone (and replaced only with --force)."""
    path = tmp_path / "report.json"
    out = Output("--json", path, "json")
    check_outputs([out])
    path.write_text("my notes\n")
    with pytest.raises(Exception, match="appeared there while the run was going"):
        write_json(out, "report", {"x": 1})
    assert path.read_text() == "my notes\n"
    write_json(Output("--json", path, "json", force=True), "report", {"x": 1})
    assert json.loads(path.read_text())["x"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary left


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[" * 1000 + "]" * 1000, "nested deeper than 32 levels"),
        ('{"hidden_size": ' + "9" * 5000 + "}", "a number of 5,000 characters"),
        ('{"hidden_size": 1, "hidden_size": 2}', "'hidden_size' is given twice"),
        ('{"hidden_size": NaN}', "NaN is not a number"),
    ],
)
def test_class7_config_json_is_read_strictly(tmp_path, text, problem):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem):
        load_model(str(path))


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:  # a thread that ended between the listing and the read
            continue
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped (a zombie computes nothing)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


SIGNAL_RUNS = {
    "sweep": ["sweep", str(ROOT / "workloads" / "ffn_prefill.yaml"), "--grid",
              "params.tokens=1024,2048,4096,8192", "--workers", "2", "--csv", "out.csv"],
    "tune": ["tune", str(ROOT / "workloads" / "ffn_prefill.yaml"), "--workers", "2", "--write",
             "out.yaml"],
    "infer": ["infer", "llama2-7b", "--prompt", "2048", "--json", "out.json"],
}  # fmt: skip


def _interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads children from /proc")
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("command", sorted(SIGNAL_RUNS))
def test_class8_a_signal_stops_the_command_its_workers_and_its_files(tmp_path, command, signum):
    """SIGTERM (kill, timeout, a CI cancellation) or SIGINT (Ctrl-C) stops the command: its
    worker processes go with it, and no temporary or half-written file is left behind (an
    interrupted sweep keeps the rows of the points that finished, whole)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "simulator", *SIGNAL_RUNS[command]],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as at a terminal: a suite started in the background of a script (`... &`) inherits
        # SIGINT ignored, and a command that inherits it rightly ignores Ctrl-C
        preexec_fn=_interruptible,
    )
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        workers |= _children(process.pid)
        if command == "infer" and time.monotonic() > deadline - 57:
            break  # a single process, busy once it has loaded
        if len(workers) >= 2:
            break
        time.sleep(0.1)
    assert process.poll() is None, f"finished before it could be stopped: {process.communicate()}"
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signum, err
    assert "Traceback" not in err
    assert f"interrupted ({signal.Signals(signum).name})" in err
    time.sleep(0.5)
    assert not [pid for pid in workers if _running(pid)], "workers left running"
    left = sorted(p.name for p in tmp_path.iterdir())
    if command == "sweep" and left:
        assert left == ["out.csv"]
        rows = list(csv.DictReader((tmp_path / "out.csv").open()))
        assert all(row["time_us"] for row in rows)  # only whole rows of finished points
    else:
        assert left == []


class _StoppedInAFinaliser:
    """A stop handled while Python runs a finaliser, as a signal handled in an at-fork hook
    while a pool forks its workers is: Python prints the exception and goes on."""

    def __del__(self):
        raise Stopped(signal.SIGTERM)


def test_class8_a_stop_that_python_swallowed_is_delivered_again():
    """The race the signal test above lost under load: the stop still stops the command."""
    with pytest.raises(Stopped), stopping_on_sigterm():
        _StoppedInAFinaliser()  # collected at once: its stop is swallowed, then sent again
        time.sleep(5)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux: PR_SET_PDEATHSIG")
def test_class8_workers_end_with_their_parent_however_it_ends():
    """A parent killed outright (SIGKILL: no clean-up at all) takes its workers with it, even
    busy ones: an orphaned worker would compute on, holding the command's pipes open."""
    script = (
        "import time\n"
        "from simulator.workers import worker_pool\n"
        "with worker_pool(2) as pool:\n"
        "    pool.map_async(time.sleep, [60, 60])\n"
        "    time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    workers = set()
    deadline = time.monotonic() + 30
    while len(workers) < 2 and time.monotonic() < deadline:
        workers = _children(parent.pid)
        time.sleep(0.1)
    assert len(workers) == 2
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if _running(pid)], "workers outlived their parent"


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.parametrize("chip", ["a100", "h100", "h200"])
@pytest.mark.parametrize("model", model_names())
def test_class2_every_shipped_model_runs_on_every_gpu_preset_where_it_fits(model, chip):
    """On the fewest chips whose shares fit (about ten minutes for all 18: a soak test)."""
    chips = fewest_chips(load_model(model), load_hardware(chip), prompt=8, generate=2)
    assert chips is not None, f"{model} fits on no group of {chip}s"
    report = infer(model, chip, prompt=8, generate=2, chips=chips).to_dict()
    assert report["ttft_us"] > 0 and report["tpot_us"]["mean"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("chip, chips", [("h100", 4), ("h100", 8), ("a100", 8)])
def test_class2_llama2_70b_runs_on_the_deployments_users_choose(chip, chips):
    """The issue's named deployments (mixtral-8x7b on 2 x h100 is the README's example)."""
    assert fewest_chips(load_model("llama2-70b"), load_hardware(chip), 16, 1) <= chips
    report = infer("llama2-70b", chip, prompt=16, generate=1, chips=chips).to_dict()
    assert report["ttft_us"] > 0


def test_class13_chips_beyond_a_presets_links_are_refused_and_groups_cost_more():
    """ascend910's HCCS joins groups of 4 chips, PCIe the two groups of a server: 8 chips pay
    the slower link, 6 do not make whole groups, 16 are more than a server."""
    hw = load_hardware("ascend910")
    model = parse_model({**TOY, "num_attention_heads": 16, "num_key_value_heads": 16,
                         "intermediate_size": 1024}, "toy", "<>")  # fmt: skip
    for chips, problem in ((6, "not whole groups of 4"), (16, "at most 8 chips")):
        with pytest.raises(SimulatorError, match=problem):
            infer(model, hw, prompt=8, generate=2, chips=chips)
    link = hw.link
    nbytes = 1 << 20
    within = all_reduce_cycles(link, 4, nbytes)
    across = all_reduce_cycles(link, 8, nbytes)
    assert across > within  # the second group is reached over PCIe
    assert across >= 2 * (3 / 4) * (nbytes / 4) / link.bytes_per_cycle
    assert across >= link.across.latency_cycles + (nbytes / 4) / link.across.bytes_per_cycle


@pytest.mark.slow
def test_class9_a_request_past_the_work_limit_is_refused_before_it_starts(tiny):
    """--exact --generate 300 on a 32-layer model is 9,600 layer-steps: refused in a moment,
    with --yes the way on; a huge generation is summed in closed form, not step by step."""
    model = parse_model({**TOY, "num_hidden_layers": 32}, "deep", "<>")
    with pytest.raises(SimulatorError, match=r"9,600 layer-steps .* pass --yes"):
        infer(model, tiny, prompt=4, generate=300, exact=True)
    long = parse_model({**TOY, "max_position_embeddings": 1 << 17}, "long", "<>")
    report = infer(long, tiny, prompt=4, generate=100_000, decode_points=2)
    assert len(report.decode) == 2 and report.decode_steps == 99_999
    exact = infer(
        toy_model := parse_model(TOY, "toy", "<>"), tiny, prompt=4, generate=6, exact=True
    )
    sampled = infer(toy_model, tiny, prompt=4, generate=6, decode_points=2)
    assert sampled.e2e_us == pytest.approx(exact.e2e_us, rel=0.01)


def test_class9_the_work_limit_is_the_one_the_help_names():
    from simulator.cli_args import build_parser
    from simulator.studies.inference import WORK_LIMIT_LAYER_STEPS

    infer_help = build_parser()._subparsers._group_actions[0].choices["infer"].format_help()
    assert f"{WORK_LIMIT_LAYER_STEPS:,}" in " ".join(infer_help.split())


def test_class10_a_one_token_request_defines_no_rate_and_says_why(tiny, tmp_path):
    report = infer(parse_model(TOY, "toy", "<>"), tiny, prompt=8, generate=1).to_dict()
    assert report["tpot_us"] is None and report["tokens_per_s"] is None
    assert report["energy_j"]["per_token"] is None
    assert "no decode step" in report["undefined"]["tokens_per_s"]
    json.dumps(report, allow_nan=False)
    provenance = report["provenance"]
    assert provenance["simulator_version"] and provenance["hardware"]["name"] == "tiny"
    assert provenance["options"]["generate"] == 1 and provenance["model"]["hidden"] == 256


def test_class10_overrides_are_recorded_and_said_once(tmp_path):
    out = tmp_path / "r.json"
    code, output = run_in_terminal(
        ["infer", "llama2-7b", "--prompt", "4", "--generate", "0", "--set",
         "num_key_value_heads=8", "--set", "hardware.HBM.bandwidth=2TB/s", "--json", str(out)]
    )  # fmt: skip
    assert code == 0, output
    assert json.loads(out.read_text())["provenance"]["overrides"] == [
        "num_key_value_heads=8",
        "hardware.HBM.bandwidth=2TB/s",
    ]
    assert "  --set num_key_value_heads=8, hardware.HBM.bandwidth=2TB/s\r\n" in output  # header
    for args, problem in (
        (["--set", "num_key_value_heads=8", "--set", "num_key_value_heads=4"], "already set"),
        (["--set", "tie_word_embeddings=yes"], "expected true or false"),
    ):
        code, output = run_in_terminal(["infer", "llama2-7b", *args])
        assert code == 2 and problem in output and "Traceback" not in output, output


@pytest.mark.slow
def test_class11_api_mistakes_say_what_was_expected(tiny):
    import simulator as sim

    with pytest.raises(TypeError, match="takes a Workload"):
        sim.plan("workloads/ffn_decode.yaml")
    with pytest.raises(TypeError, match="takes a model"):
        sim.infer(3, tiny)
    with pytest.raises(ValueError, match="decode_points must be at least 2"):
        sim.infer(parse_model(TOY, "toy", "<>"), tiny, decode_points=1)
    with pytest.raises(TypeError, match="load_model\\(\\) takes"):
        sim.load_model(42)
    assert sim.infer("llama2-7b", "h100", prompt=4, generate=0).hardware == "h100"
    assert sim.load_model("llama2-7b", ["num_key_value_heads=8"]).kv_heads == 8


def test_class12_leftovers_are_refused_in_one_line(tmp_path):
    workload = tmp_path / "w.yaml"
    workload.write_text(
        "name: t\nhardware: tiny\ntensors:\n  a: {shape: [16, 16]}\n"
        "  big: {shape: [1000000, 1000000]}\nops:\n  - {name: r, op: relu, inputs: [a], "
        "output: b}\n"
    )
    for args, problem in (
        (["run", str(workload)], "tensors.big: no op reads it (2000.0 GB"),
        (["run", str(workload), "--set", "schedule.fusion=[]"], "fuses nothing: write none"),
        (["infer", "llama2-7b", "--hardware", str(ROOT / "workloads" / "ffn_decode.yaml")],
         "is a workload (it has ops), not a hardware file"),
    ):  # fmt: skip
        code, output = run_in_terminal(args)
        lines = [line for line in output.splitlines() if line.strip()]
        assert code == 2 and len(lines) == 1 and problem in lines[0], output
