"""The command line as a user meets it: exit codes, one-line errors, no tracebacks."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "simulator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_user_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in result.stderr


def test_main_job_runs_and_explains(tmp_path):
    out = tmp_path / "report.json"
    result = run_cli("run", "workloads/ffn_decode.yaml", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "bound" in result.stdout and "memory" in result.stdout
    assert "Why: memory-bound" in result.stdout
    report = json.loads(out.read_text())
    for key in (
        "workload",
        "hardware",
        "cycles",
        "time_us",
        "flops",
        "achieved_tflops",
        "peak_tflops",
        "hbm_bandwidth_tbps",
        "achieved_hbm_tbps",
        "bound",
        "roofline",
        "traffic",
        "utilization",
        "stalls",
        "kernels",
    ):
        assert key in report
    assert set(report["roofline"]) >= {
        "compute_cycles",
        "memory_cycles",
        "bound_cycles",
        "efficiency",
    }
    assert set(report["traffic"]["L2"]) >= {"read_bytes", "write_bytes", "hits", "misses"}
    for kernel in report["kernels"]:
        assert set(kernel) >= {"name", "ops", "fused", "cycles", "flops", "traffic", "tiling"}


def test_json_to_stdout_is_pure_json():
    result = run_cli("run", "workloads/ffn_decode.yaml", "--json", "-")
    assert result.returncode == 0
    assert json.loads(result.stdout)["bound"] == "memory"


def test_missing_file():
    assert_user_error(run_cli("run", "workloads/nope.yaml"), "nope.yaml: file not found")


def test_malformed_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: broken\nops: [ {op: matmul, inputs: [nope]} \n")
    result = run_cli("run", str(bad))
    assert_user_error(result, "malformed YAML", "line")
    assert len(result.stderr.strip().splitlines()) == 1


def test_unknown_field_from_override():
    assert_user_error(
        run_cli("run", "workloads/ffn_decode.yaml", "--set", "hardware.HBM.bw=1TB/s"),
        "--set hardware.HBM.bw=1TB/s: unknown field",
    )


def test_tiling_that_does_not_fit():
    result = run_cli(
        "run", "workloads/ffn_decode.yaml", "--set", "schedule.tiling.down.base.n=4096"
    )
    assert_user_error(result, "schedule.tiling.down", "does not fit L0B", "65536")


def test_tiling_not_a_multiple_of_the_fractal():
    result = run_cli("run", "workloads/ffn_decode.yaml", "--set", "schedule.tiling.gate.base.k=100")
    assert_user_error(
        result, "schedule.tiling.gate.base.k: 100 is not a multiple of the Cube fractal k=16"
    )


def test_json_refuses_to_overwrite_a_users_file(tmp_path):
    precious = tmp_path / "notes.json"
    precious.write_text('{"mine": true}')
    result = run_cli("run", "workloads/ffn_decode.yaml", "--json", str(precious))
    assert_user_error(result, "--force")
    assert precious.read_text() == '{"mine": true}'


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"]])
def test_help(args):
    assert run_cli(*args).returncode == 0


def _readme_blocks() -> list[tuple[str, str]]:
    from .refresh_readme import shown_blocks

    return shown_blocks((ROOT / "README.md").read_text())


README_BLOCKS = _readme_blocks()


def test_the_readme_opens_with_the_main_job():
    assert [command for command, _ in README_BLOCKS][:1] == [
        "python -m simulator run workloads/ffn_decode.yaml"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("command", "shown"), README_BLOCKS, ids=[c for c, _ in README_BLOCKS])
def test_the_readme_shows_what_its_command_prints_at_a_terminal(command, shown):
    """Each sample output in the README is what its command prints today, byte for byte, run
    as a user at a terminal runs it with the output sent to a file: the progress bars are
    drawn (the suite's other tests pipe everything, which hides that path)."""
    from .refresh_readme import comparable
    from .terminal import run_with_stderr_at_terminal

    code, output, shown_at_terminal = run_with_stderr_at_terminal(shlex.split(command)[3:])
    assert code == 0 and "Traceback" not in shown_at_terminal, shown_at_terminal[-2000:]
    assert comparable(output.rstrip()) == comparable(shown), (
        f"README block for '{command}' is stale; refresh: python -m tests.refresh_readme"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["tune", str(ROOT / "workloads" / "ffn_decode.yaml"), "--top", "1", "--write",
         "tuned.yaml"],
        ["run", str(ROOT / "workloads" / "ffn_decode.yaml"), "--trace", "trace.json", "--plot",
         "plots"],
        ["sweep", str(ROOT / "workloads" / "ffn_decode.yaml"), "--grid", "params.tokens=1,8",
         "--csv", "s.csv", "--plot", "s.png"],
    ],
)  # fmt: skip
def test_the_readmes_other_commands_run_at_a_terminal(tmp_path, args):
    """The README's tune, trace and plot, and sweep commands, on a small workload."""
    from .terminal import run_in_terminal

    code, output = run_in_terminal(args, cwd=tmp_path)
    assert code == 0 and "Traceback" not in output, output[-2000:]


def test_the_same_run_in_two_processes_writes_the_same_report_byte_for_byte(tmp_path):
    """Determinism across processes, not just within one: string hashing differs between
    Python processes (PYTHONHASHSEED), so any set or dict order leaking into the timing
    would show here."""
    import os

    outputs = []
    for seed in ("1", "2"):
        out = tmp_path / f"r{seed}.json"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "simulator",
                "run",
                "workloads/llama7b_decode_layer.yaml",
                "--json",
                str(out),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        assert result.returncode == 0, result.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]


def test_the_cli_pauses_the_garbage_collector_and_library_calls_do_not(monkeypatch):
    """The collector is process-wide: only the command line, which owns its process, may
    pause it; simulate() from a notebook leaves it running."""
    import gc

    from simulator import cli, load_workload, pipeline, simulate

    seen = []
    original = pipeline.simulate_program

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(pipeline, "simulate_program", recording)
    simulate(load_workload(ROOT / "workloads" / "matmul_residual_rmsnorm.yaml"))
    assert cli.main(["run", str(ROOT / "workloads" / "matmul_residual_rmsnorm.yaml")]) == 0
    assert seen == [True, False]
    assert gc.isenabled()


def test_a_paused_collector_keeps_nothing_of_a_finished_run():
    """Under the CLI's pause a run's reference cycles (engine, SimPy) are collected as it
    ends: otherwise every step of a request kept its whole program (llama2-7b on h100,
    2048 + 128 sampled: 1.39 GB, against 0.73 GB)."""
    import gc

    from simulator import load_workload, simulate
    from simulator.engine.world import World
    from simulator.gc_pause import gc_paused

    workload = load_workload(ROOT / "workloads" / "matmul_residual_rmsnorm.yaml")
    gc.collect()  # runs of tests before
    with gc_paused():
        simulate(workload)
        worlds = [o for o in gc.get_objects() if isinstance(o, World)]
    assert not worlds


def test_help_and_import_leave_the_heavy_libraries_unloaded():
    """`--help` and `import simulator` stay quick because numpy, networkx, matplotlib and
    SimPy load only when a run needs them (benchmarks/engine_speed.py times the start-up)."""
    code = (
        "import sys, io, contextlib\n"
        "import simulator\n"
        "from simulator import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        cli.main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in ('numpy', 'networkx', 'matplotlib', 'simpy')"
        " if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
def test_hardware_picks_the_chip_of_a_workload(tmp_path):
    """`--hardware` runs a workload on another chip, by preset name in any case or by a
    file's path from where the user stands; with a --set of another chip it is refused, as
    two values of one field are."""

    def chip(*args):
        out = tmp_path / "r.json"
        result = run_cli("run", "workloads/ffn_decode.yaml", *args, "--json", str(out))
        assert result.returncode == 0, result.stderr
        return json.loads(out.read_text())["hardware"]

    assert chip("--hardware", "H100") == "h100"
    assert chip("--hardware", str(Path("hw_models") / "h200.yaml")) == "h200"
    assert_user_error(
        run_cli("run", "workloads/ffn_decode.yaml", "--hardware", "h100", "--set", "hardware=a100"),
        "hardware is already set to 'h100'",
    )
    assert_user_error(
        run_cli("plan", "workloads/ffn_decode.yaml", "--hardware", "h1000"),
        "no hardware preset named 'h1000' (presets: a100,",
    )


def test_shipped_names_are_found_whatever_their_case_and_help_lists_them():
    from simulator import load_hardware, load_model
    from simulator.config.hardware import preset_names
    from simulator.config.model import model_names
    from simulator.config.runtime import load_runtime

    assert load_hardware("H100").name == "h100"
    assert load_model("LLaMA2-7B").name == "llama2-7b"
    assert load_runtime("CUDA-Graphs").name == "cuda-graphs"
    for command, names in (("run", preset_names()), ("infer", model_names() + preset_names())):
        text = " ".join(run_cli(command, "--help").stdout.split())
        assert all(name in text for name in names), (command, text)


def test_examples_lists_every_shipped_workload_and_lab():
    result = run_cli("examples")
    assert result.returncode == 0, result.stderr
    for example in [*(ROOT / "workloads").glob("*.yaml"), *(ROOT / "notebooks").glob("*.ipynb")]:
        assert f"  {example.name} " in result.stdout
    for key in (ROOT / "notebooks" / "answers").glob("*.ipynb"):
        assert f"  answers/{key.name} " in result.stdout
    assert "LLaMA-7B feed-forward block at decode: one token, batch 1" in result.stdout
    assert "Lab 1: why is decode GEMM bandwidth-bound?" in result.stdout


def test_examples_copy_keeps_what_the_user_changed(tmp_path):
    assert run_cli("examples", "--copy", str(tmp_path)).returncode == 0
    mine = tmp_path / "workloads" / "gemm_4096.yaml"
    assert mine.read_bytes() == (ROOT / "workloads" / "gemm_4096.yaml").read_bytes()
    again = run_cli("examples", "--copy", str(tmp_path))
    assert again.returncode == 0 and "already hold every example" in again.stdout
    mine.write_text("# mine\n")
    assert_user_error(run_cli("examples", "--copy", str(tmp_path)), str(mine), "differs", "--force")
    assert mine.read_text() == "# mine\n"
    forced = run_cli("examples", "--copy", str(tmp_path), "--force")
    assert forced.returncode == 0 and "copied 1 file into" in forced.stdout
    assert mine.read_bytes() == (ROOT / "workloads" / "gemm_4096.yaml").read_bytes()
    # the copied lab finds the copied workloads beside it, as it does in the checkout
    ran = run_cli("run", "workloads/ffn_decode.yaml", cwd=tmp_path)
    assert ran.returncode == 0 and "llama7b-ffn-decode on ascend910" in ran.stdout


def test_a_missing_workload_named_as_an_example_says_how_to_get_it(tmp_path):
    assert_user_error(
        run_cli("run", "ffn_decode.yaml", cwd=tmp_path),
        "ffn_decode.yaml: file not found; 'ffn_decode.yaml' is a shipped example",
        "python -m simulator examples --copy .",
    )
    assert_user_error(run_cli("plan", "mine.yaml", cwd=tmp_path), "mine.yaml: file not found")
    assert "shipped example" not in run_cli("plan", "mine.yaml", cwd=tmp_path).stderr


def test_the_console_command_names_itself(monkeypatch, capsys):
    from simulator import cli

    monkeypatch.setattr(sys, "argv", ["/venv/bin/npu-memsim"])
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert capsys.readouterr().out.startswith("usage: npu-memsim ")


@pytest.mark.slow
def test_a_trace_can_be_gzipped_and_limited_to_cores_and_kernels(tmp_path):
    import gzip

    workload = str(ROOT / "workloads" / "ffn_decode.yaml")
    plain = run_cli("run", workload, "--trace", "t.json", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    limited = ["--trace-cores", "0-1,5", "--trace-kernels", "gate,d*"]
    zipped = run_cli("run", workload, "--trace", "t.json.gz", *limited, cwd=tmp_path)
    assert zipped.returncode == 0, zipped.stderr
    raw = (tmp_path / "t.json.gz").read_bytes()
    trace = json.loads(gzip.decompress(raw))
    assert trace["otherData"]["format"] == "npu-memsim/trace"
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] - 1 for e in slices} == {0, 1, 5}
    assert {e["args"]["kernel"] for e in slices} == {"gate", "down"}
    whole = json.loads((tmp_path / "t.json").read_text())
    assert len(raw) * 20 < len(json.dumps(whole))  # a small part of it, compressed
    again = run_cli("run", workload, "--trace", "t.json.gz", *limited, cwd=tmp_path)
    assert again.returncode == 0 and (tmp_path / "t.json.gz").read_bytes() == raw  # ours
    for args, fragment in (
        (["--trace-cores", "0"], "add --trace FILE"),
        (["--trace", "u.json", "--trace-cores", "32"], "ascend910 has 32 cores"),
        (["--trace", "u.json", "--trace-cores", "3-1"], "a range low-high"),
        (["--trace", "u.json", "--trace-kernels", "nope"], "gate, up, act, glu, down"),
        (["--trace", "u.json.zip"], "must end in .json or .json.gz"),
    ):
        assert_user_error(run_cli("run", workload, *args, cwd=tmp_path), fragment)
    assert not (tmp_path / "u.json").exists()
