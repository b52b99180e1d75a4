"""Serving: the engine's invariants as properties (on a step model of known costs), the step
times it composes from simulated whole-model steps, agreement with `infer` for one request at
a time, and the one-line refusals of bad traces and options."""

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.config.model import load_model, parse_model
from simulator.config.transformer import Step
from simulator.errors import SimulatorError
from simulator.studies.inference import infer
from simulator.studies.inference_report import StepTime
from simulator.studies.serving import (
    Deployment,
    Lengths,
    Slo,
    find_capacity,
    generate,
    load_trace,
    serve,
)
from simulator.studies.serving.engine import (
    PagedKVCache,
    Served,
    _chunked,
    _State,
    longest,
    prefill_tokens,
    run_engine,
)
from simulator.studies.serving.requests import Request
from simulator.studies.serving.step_times import StepTimes, grid, spread

from .test_inference import TOY

CLOCK_HZ = 1e9


def known_step(step: Step) -> StepTime:
    """A step of made-up but shaped costs: GEMMs grow with the tokens, attention with each
    prompt's square at prefill and with batch x context at decode (cycles)."""
    if step.phase == "prefill":
        attention = 40.0 * step.batch * step.new_tokens**2
    else:
        attention = 500.0 * step.batch * step.context
    cycles = 1e6 + 3e4 * step.tokens + attention
    classes = {"attention": attention, "gemm": cycles - attention}
    return StepTime(step.phase, step.context, cycles, classes, 0.0, 3, {"static": cycles / 1e9})


def known_steps(steps: list[Step]) -> list[StepTime]:
    return [known_step(step) for step in steps]


def known_times(requests, max_batch=8, max_step_tokens=None) -> StepTimes:
    prompts = [r.prompt_tokens for r in requests]
    top = max(max_step_tokens or 0, *(longest(r) for r in requests))
    contexts = (min(prompts) + 1, max(r.prompt_tokens + r.output_tokens - 1 for r in requests))
    return StepTimes(known_steps, CLOCK_HZ, 1, 1, top, max_batch, contexts)


requests_strategy = st.lists(
    st.tuples(st.floats(0, 0.05), st.integers(1, 200), st.integers(1, 40)),  # gap, prompt, output
    min_size=1,
    max_size=25,
).map(
    lambda rows: tuple(
        Request(i, sum(gap for gap, _, _ in rows[: i + 1]), prompt, output)
        for i, (_, prompt, output) in enumerate(rows)
    )
)


@settings(max_examples=60, deadline=None)
@given(
    requests=requests_strategy,
    policy=st.sampled_from(["continuous", "chunked", "static"]),
    max_batch=st.integers(1, 8),
    spare_blocks=st.integers(0, 30),
    block_tokens=st.sampled_from([1, 4, 16]),
    leave_last=st.booleans(),
)
def test_every_request_finishes_once_its_tokens_conserved_and_the_cache_never_overfills(
    requests, policy, max_batch, spare_blocks, block_tokens, leave_last
):
    """Whatever the arrivals, lengths, batch and cache (from just enough for the longest
    request on): every request finishes once, after it arrived and after at least its own
    prefill; each step gives each of its sequences one token, so the steps' sequences add
    up to the tokens asked for; the blocks held never pass the cache; steps do not overlap;
    and no schedule serves tokens faster than full steps at their best would. So too where
    prefills stop a token short and a decode step gives the first token (`leave_last`)."""
    cache = PagedKVCache(
        max(-(-longest(r) // block_tokens) for r in requests) + spare_blocks, block_tokens
    )
    times = known_times(requests, max_batch, max_step_tokens=256)
    served, steps = run_engine(requests, times, cache, policy, max_batch, 256, None, leave_last)
    assert sorted(s.request.id for s in served) == [r.id for r in requests]
    for s in served:
        own_prefill = times.prefill([prefill_tokens(s.request.prompt_tokens, leave_last)]).seconds
        assert s.generated == s.request.output_tokens
        assert s.request.arrival_s + own_prefill * (1 - 1e-9) <= s.first_token_s <= s.finish_s
        assert policy != "static" or s.preempted == 0
    assert sum(step.generated for step in steps) == sum(r.output_tokens for r in requests)
    assert all(step.kv_blocks <= cache.blocks and 1 <= step.batch <= max_batch for step in steps)
    assert all(a.end_s <= b.start_s for a, b in zip(steps, steps[1:]))
    assert cache.used == 0  # every request gave its blocks back
    best_tokens_per_s = max(
        max(b / times.decode([1] * b).seconds for b in range(1, max_batch + 1)),
        max(len(p) / times.prefill(p).seconds for p in ([1] * n for n in range(1, max_batch + 1))),
    )
    busy_s = sum(step.end_s - step.start_s for step in steps)
    assert sum(r.output_tokens for r in requests) / busy_s <= best_tokens_per_s * (1 + 1e-9)


def test_one_request_at_a_time_takes_its_prefill_then_its_decodes():
    """Requests far apart never share a step: a request's TTFT is its prefill's time and its
    end-to-end time that plus a decode step at each context it passes through."""
    requests = tuple(Request(i, 10.0 * i, 100 + 7 * i, 5 + i) for i in range(4))
    times = known_times(requests)
    served, _ = run_engine(requests, times, PagedKVCache(1000, 16), "continuous", 8, 2048)
    for s in served:
        prompt, output = s.request.prompt_tokens, s.request.output_tokens
        prefill = times.prefill([prompt]).seconds
        decodes = sum(times.decode([prompt + g]).seconds for g in range(1, output))
        assert s.first_token_s - s.request.arrival_s == pytest.approx(prefill, rel=1e-12)
        assert s.finish_s - s.request.arrival_s == pytest.approx(prefill + decodes, rel=1e-12)


def test_a_full_cache_preempts_the_newest_request_and_recomputes_it():
    """Two requests whose contexts outgrow a cache that holds one and a half of them: the
    newer is preempted, waits, and is prefilled again over its prompt and what it had
    generated; both still finish with every token."""
    requests = (Request(0, 0.0, 32, 40), Request(1, 0.0, 32, 40))
    times = known_times(requests)
    cache = PagedKVCache(6, 16)  # 96 positions; each request grows to 71
    served, steps = run_engine(requests, times, cache, "continuous", 8, 2048)
    assert [s.preempted for s in served] == [0, 1]
    assert [s.generated for s in served] == [40, 40]
    recompute = [step for step in steps if step.phase == "prefill"][-1]
    assert recompute.tokens > 32  # the prompt and the tokens generated before the preemption


def test_step_times_interpolate_between_the_anchors_they_simulate():
    """A step at an anchor costs what the anchor's whole-model step took; between two it
    costs the line between them; a prefill of several prompts is the GEMMs of all their
    tokens plus each prompt's own attention. Only the anchors a step needs are simulated
    (a decode's batch sizes at every context), each once."""
    asked = []
    times = StepTimes(
        lambda steps: asked.extend(steps) or known_steps(steps),
        CLOCK_HZ,
        1,
        64,
        1024,
        16,
        (65, 300),
    )
    assert times.prefill_grid == (64, 96, 128, 192, 256, 384, 512, 768, 1024)
    assert times.context_grid == (65, 183, 300)
    at = times.decode([183] * 4).seconds
    assert at == known_step(Step("decode", 4, 1, 183)).cycles / CLOCK_HZ
    between = times.decode([100, 200, 300]).seconds  # batch 3, mean context 200
    two, four = (times.decode([200] * b).seconds for b in (2, 4))
    assert between == pytest.approx((two + four) / 2)
    prefill = times.prefill([128, 128]).seconds
    full = known_step(Step("prefill", 1, 256, 256))
    own = known_step(Step("prefill", 1, 128, 128)).by_class_cycles["attention"]
    expected = full.cycles - full.by_class_cycles["attention"] + 2 * own
    assert prefill == pytest.approx(expected / CLOCK_HZ)
    assert {s.phase for s in asked} == {"prefill", "decode"}
    assert len(asked) == len(set(asked)) == len(times.simulated)
    assert Step("prefill", 1, 1024, 1024) not in asked  # never needed
    checks = {check.what: check for check in times.checks()}  # each batch's middle context
    assert sorted(checks) == ["decode 2 @ 183", "decode 4 @ 183"]
    simulated = known_step(Step("decode", 4, 1, 183)).cycles
    line = (
        known_step(Step("decode", 4, 1, 65)).cycles * 117
        + known_step(Step("decode", 4, 1, 300)).cycles * 118
    ) / 235
    assert checks["decode 4 @ 183"].error == pytest.approx(line / simulated - 1)
    assert grid(1, 6) == (1, 2, 4, 6) and grid(5, 20, halves=True) == (5, 6, 8, 12, 16, 20)
    assert spread(10, 11) == (10, 11)


def test_serving_one_request_at_a_time_agrees_with_infer(tiny, tmp_path):
    """The step model and the engine add nothing of their own: requests far apart take
    what `infer` says one request takes, within 1% (decode contexts interpolated the same
    way)."""
    model = parse_model(TOY, "toy", "<toy>")
    requests = tuple(Request(i, 1.0 * i, 32, 9) for i in range(3))
    report = serve(model, tiny, requests)
    alone = infer(model, tiny, prompt=32, generate=9).to_dict()
    for row in report.rows():
        assert row["ttft_s"] * 1e6 == pytest.approx(alone["ttft_us"], rel=0.01)
        assert row["e2e_s"] * 1e6 == pytest.approx(alone["e2e_us"], rel=0.01)
    data = report.to_dict()
    assert data["steps"]["max_batch"] == 1 and data["kv_cache"]["preemptions"] == 0
    assert json.dumps(data, allow_nan=False)
    again = serve(model, tiny, requests).to_dict()
    assert again == data  # deterministic


def test_a_generated_workload_is_the_same_for_the_same_seed():
    prompt, output = Lengths.parse("p", "lognormal:200,80"), Lengths.parse("o", "uniform:4-9")
    first = generate(5.0, 200, prompt, output, 7)
    assert first == generate(5.0, 200, prompt, output, 7)
    assert first != generate(5.0, 200, prompt, output, 8)
    assert all(4 <= r.output_tokens <= 9 and r.prompt_tokens >= 1 for r in first)
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(first, first[1:]))
    assert 140 < sum(r.prompt_tokens for r in first) / len(first) < 260
    assert str(prompt) == "lognormal:200,80"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("fixed:0", "token counts are at least 1"),
        ("uniform:9-3", "high end 3 is below its low end 9"),
        ("lognormal:-1,2", "mean must be above 0"),
        ("normal:5", "is not fixed:N"),
        ("fixed:ten", "'ten' is not a whole number"),
    ],
)
def test_a_bad_length_distribution_is_refused_in_a_line(text, problem):
    with pytest.raises(SimulatorError, match=problem):
        Lengths.parse("--prompt-len", text)


@pytest.mark.parametrize(
    "name, text, problem",
    [
        (
            "t.jsonl",
            '{"arrival_s": -1, "prompt_tokens": 5, "output_tokens": 2}',
            "line 1: arrival_s: a time in seconds, at least 0",
        ),
        (
            "t.jsonl",
            '{"arrival_s": 2, "prompt_tokens": 5, "output_tokens": 2}\n'
            '{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 2}',
            "line 2: arrival_s: arrivals must not decrease, got 1 after 2",
        ),
        (
            "t.jsonl",
            '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 0}',
            "line 1: output_tokens: a whole number of tokens, at least 1",
        ),
        (
            "t.jsonl",
            '{"arrival_s": 0, "prompt_tokens": 5.5, "output_tokens": 1}',
            "prompt_tokens: a whole number",
        ),
        (
            "t.jsonl",
            '{"arrival_s": 0, "prompt": 5, "output_tokens": 1}',
            "line 1: prompt: not a field",
        ),
        ("t.jsonl", '{"arrival_s": 0, "output_tokens": 1}', "line 1: prompt_tokens: missing"),
        ("t.jsonl", "{oops", "line 1: not JSON"),
        ("t.jsonl", "[1, 2]", "a request is a JSON object"),
        ("t.jsonl", "\n\n", "the trace holds no requests"),
        ("t.csv", "arrival_s,prompt\n0,5\n", "the header must name exactly"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\n0,5\n", "line 2: 2 cells"),
        ("t.csv", "arrival_s,prompt_tokens,output_tokens\nsoon,5,1\n", "arrival_s: a time"),
        ("t.txt", "", "a trace is JSON Lines"),
    ],
)
def test_a_bad_trace_is_refused_with_its_file_line_and_field(tmp_path, name, text, problem):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SimulatorError, match=problem) as refused:
        load_trace(path)
    assert str(path) in str(refused.value)


def test_a_trace_reads_the_same_from_jsonl_and_csv(tmp_path):
    rows = [(0.0, 12, 3), (0.5, 7, 1), (0.5, 30, 8)]
    (tmp_path / "t.jsonl").write_text(
        "\n".join(
            json.dumps({"arrival_s": a, "prompt_tokens": p, "output_tokens": o}) for a, p, o in rows
        )
    )
    (tmp_path / "t.csv").write_text(
        "prompt_tokens,arrival_s,output_tokens\n" + "".join(f"{p},{a},{o}\n" for a, p, o in rows)
    )
    assert load_trace(tmp_path / "t.jsonl") == load_trace(tmp_path / "t.csv")
    assert [r.prompt_tokens for r in load_trace(tmp_path / "t.csv")] == [12, 7, 30]


def test_serve_refuses_what_it_cannot_run(tiny):
    model = parse_model(TOY, "toy", "<toy>")
    one = (Request(0, 0.0, 32, 4),)
    for options, problem in (
        ({"policy": "fifo"}, "policy must be one of continuous, chunked, static"),
        ({"max_step_tokens": 16}, "below the longest prompt"),
        ({"kv_cache_bytes_per_chip": 1024}, "request 0 needs a KV cache of 35 positions"),
        ({"slo": Slo(ttft_s=1e-9)}, "ttft=1e-06ms cannot be met"),
        ({"slo": Slo(tpot_s=1e-9)}, "tpot=1e-06ms cannot be met"),
    ):
        with pytest.raises(SimulatorError, match=problem):
            serve(model, tiny, one, **options)
    with pytest.raises(SimulatorError, match="attends over at most 512 positions"):
        serve(model, tiny, (Request(0, 0.0, 500, 20),))


def test_the_serve_command_writes_its_report_and_rows_and_refuses_in_a_line(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "toy.json").write_text(json.dumps(TOY))
    (tmp_path / "t.jsonl").write_text(
        '{"arrival_s": 0, "prompt_tokens": 32, "output_tokens": 4}\n'
        '{"arrival_s": 0.001, "prompt_tokens": 20, "output_tokens": 6}\n'
    )
    base = ["serve", "toy.json", "--hardware", "tiny", "--quiet"]
    outputs = ["--json", "r.json", "--csv", "r.csv", "--timeline", "t.json.gz", "--plot", "p.png"]
    assert main([*base, "--trace", "t.jsonl", "--slo", "tpot=1s", *outputs]) == 0
    out = capsys.readouterr().out
    assert "2 requests (trace t.jsonl), continuous batching" in out
    assert "goodput (TPOT <= 1000 ms)" in out and "2 rows written to r.csv" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["requests"] == 2 and report["slo"]["met"] == 2
    assert (tmp_path / "r.csv").read_text().splitlines()[0].startswith("id,arrival_s,")
    timeline = json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))
    tracks = {e["args"]["name"] for e in timeline["traceEvents"] if e["name"] == "thread_name"}
    assert tracks == {"steps", "request 0", "request 1"}
    spans = [e["name"] for e in timeline["traceEvents"] if e["ph"] == "X" and e["pid"] == 2]
    assert spans.count("prefill") == 2 and spans.count("decode") == 2
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    slower = ["--set", "hardware.HBM.bandwidth=16B/cycle", "--json", "slow.json"]
    assert main([*base, "--trace", "t.jsonl", *slower]) == 0  # the chip's HBM at a quarter
    tpot = {
        name: json.loads((tmp_path / name).read_text())["latency"]["tpot_s"]["p50"]
        for name in ("r.json", "slow.json")
    }
    assert tpot["slow.json"] > 1.5 * tpot["r.json"]
    search = ["--rate", "50", "--num", "30", "--slo", "ttft=3ms", "--find-capacity"]
    lengths = ["--prompt-len", "fixed:64", "--output-len", "fixed:8"]
    at_once = ["--rates-at-once", "2", "--workers", "1", "--plot", "load.png"]
    assert main([*base, *search, *lengths, *at_once]) == 0
    out = capsys.readouterr().out
    assert "capacity search: 90% of requests within TTFT <= 3 ms" in out
    assert "  capacity: " in out and "latency against load plotted to load.png" in out
    assert (tmp_path / "load.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "mine.csv").write_text("my notes\n")
    for extra, problem in (
        (["--trace", "t.jsonl", "--csv", "mine.csv"], "mine.csv"),
        ([], "give the requests as --trace FILE, --rate R or --concurrency N"),
        (["--trace", "t.jsonl", "--rate", "2"], "give the requests as --trace FILE, --rate R or"),
        (["--rate", "2", "--concurrency", "4"], "give the requests as --trace FILE, --rate R or"),
        (["--rate", "2", "--slo", "ttft=fast"], "--slo ttft=fast: write ttft=TIME,tpot=TIME"),
        (["--rate", "2", "--kv-cache-memory", "lots"], "--kv-cache-memory: "),
        (["--trace", "missing.jsonl"], "missing.jsonl: no such trace file"),
        (["--rate", "2", "--find-capacity"], "--find-capacity varies the rate"),
        (["--trace", "t.jsonl", "--find-capacity", "--slo", "tpot=1s"], "give --rate R"),
        (["--rate", "2", "--attainment", "1.5"], "--attainment: a share above 0"),
        (["--rate", "2", "--executor", "dask"], "--executor dask and --scheduler ADDRESS go"),
        (["--rate", "2", "--set", "hardware.HBM.speed=1"], "--set hardware.HBM.speed=1: unknown"),
    ):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert problem in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "mine.csv").read_text() == "my notes\n"


def test_chunked_prefill_keeps_decoding_while_a_long_prompt_is_prefilled_in_chunks():
    """A long prompt arriving while a request decodes: with chunked prefill every step
    decodes the running request and prefills at most the budget's tokens of the prompt,
    whose first token follows its last chunk; with continuous batching its whole prefill is
    one step during which nobody decodes."""
    requests = (Request(0, 0.0, 64, 40), Request(1, 0.01, 1000, 3))
    times = known_times(requests, max_step_tokens=256)
    served, steps = run_engine(requests, times, PagedKVCache(200, 16), "chunked", 8, 256)
    mixed = [step for step in steps if step.phase == "mixed"]
    assert [step.tokens for step in mixed] == [256, 256, 256, 236]  # a decode each, 1,000 in all
    assert served[1].first_token_s == mixed[-1].end_s
    assert all(step.tokens <= 256 for step in steps)
    _, whole = run_engine(requests, times, PagedKVCache(200, 16), "continuous", 8, 2048)
    assert [step.tokens for step in whole if step.phase == "prefill"] == [64, 1000]


def test_a_mixed_step_is_the_decode_plus_what_its_chunks_add():
    """B decodes and a chunk of K tokens at offset o: the decode step, plus the GEMMs of
    B + K tokens less those of B, plus the prompt's attention up to o + K less up to o
    (at anchors, so nothing is interpolated)."""
    times = StepTimes(known_steps, CLOCK_HZ, 1, 1, 1024, 16, (65, 300))

    def prefill(tokens, part):
        step = known_step(Step("prefill", 1, tokens, tokens))
        attention = step.by_class_cycles["attention"]
        return attention if part == "attention" else step.cycles - attention

    mixed = times.step([183] * 2, [(2, 2)]).seconds * CLOCK_HZ
    expected = (
        known_step(Step("decode", 2, 1, 183)).cycles
        + prefill(4, "rest")
        - prefill(2, "rest")
        + prefill(4, "attention")
        - prefill(2, "attention")
    )
    assert mixed == pytest.approx(expected, rel=1e-12)
    assert times.step([183] * 2, []) == times.decode([183] * 2)
    assert times.step([], [(0, 8), (0, 16)]) == times.prefill([8, 16])


def test_the_capacity_search_brackets_the_highest_rate_that_meets_the_target(tiny):
    """The rate found meets the target (90% of requests within it), and a rate within the
    search's 5% above it does not; every point serves the same requests, only sooner, on one
    deployment, so the whole-model steps are simulated once for all of them."""
    model = parse_model(TOY, "toy", "<toy>")
    prompt, output = Lengths.parse("p", "uniform:16-64"), Lengths.parse("o", "fixed:8")

    def requests_at(rate):
        return generate(rate, 60, prompt, output, 3)

    alone = serve(model, tiny, requests_at(1.0))
    slo = Slo(ttft_s=4 * max(row["ttft_s"] for row in alone.rows()))
    found = {}
    for parallel in (1, 3):
        simulated = []
        with Deployment(model, tiny, requests_at(1.0), on_step=simulated.append) as deployment:
            found[parallel] = find_capacity(deployment, requests_at, slo, 100.0, parallel=parallel)
        # one step model for every point, each step simulated once (threads wait for each
        # other's), and every report names them all
        assert len(simulated) == len(set(simulated)) == len(deployment.times.simulated)
        assert {p.report.simulated_steps for p in found[parallel].points} == {len(simulated)}
    for search in found.values():
        assert search.rate_per_s is not None
        assert search.at_capacity.rate_per_s == search.rate_per_s
        assert search.at_capacity.attainment >= 0.9
        failed = [p.rate_per_s for p in search.points if p.attainment < 0.9]
        assert min(r for r in failed if r > search.rate_per_s) <= search.rate_per_s * 1.05
    # three rates a round: fewer rounds, more points, the same bracket's worth of answer
    assert len(found[3].points) > len(found[1].points)
    assert found[3].rate_per_s == pytest.approx(found[1].rate_per_s, rel=0.1)
    found = found[3]
    data = found.to_dict()
    assert data["capacity_requests_per_s"] == found.rate_per_s
    assert [p["rate_per_s"] for p in data["points"]] == sorted(p.rate_per_s for p in found.points)
    assert "capacity:" in found.summary()[-1]


def test_a_runtime_profile_drives_every_serving_step(tiny):
    """A runtime's host time per step joins every whole-model step the step times come from,
    so one request alone takes what `infer` says it takes on that runtime."""
    model = parse_model(TOY, "toy", "<toy>")
    requests = (Request(0, 0.0, 32, 9),)
    bare = serve(model, tiny, requests).rows()[0]
    # vllm-v0: host time per step; turbomind-v01a1: a prefill a token short, the first
    # token from a decode step over the whole prompt, as infer runs it
    for runtime in ("vllm-v0", "turbomind-v01a1"):
        driven = serve(model, tiny, requests, runtime=runtime)
        alone = infer(model, tiny, prompt=32, generate=9, runtime=runtime).to_dict()
        row = driven.rows()[0]
        assert row["ttft_s"] * 1e6 == pytest.approx(alone["ttft_us"], rel=0.01), runtime
        assert row["e2e_s"] * 1e6 == pytest.approx(alone["e2e_us"], rel=0.01), runtime
        assert row["e2e_s"] > bare["e2e_s"]
        assert driven.to_dict()["provenance"]["options"]["runtime"] == runtime
        notes = " ".join(driven.notes)
        assert ("leaves the prompt's last token" in notes) == (runtime == "turbomind-v01a1")


def test_part_prefilled_requests_that_fill_the_cache_give_way_to_the_oldest():
    """Chunked prefill with no decode running and two part-prefilled prompts holding every
    block, neither able to take the next: the newer is preempted (its blocks given back) and
    the older's prefill moves on, rather than a step of nothing."""
    cache = PagedKVCache(20, 16)  # 320 positions
    older, newer = Served(Request(0, 0.0, 300, 5)), Served(Request(1, 0.0, 300, 5))
    for s, done in ((older, 192), (newer, 128)):
        s.target, s.prefilled = 300, done
        assert cache.hold(s.request.id, done)
    state = _State(running=[older, newer])
    plan = _chunked(state, cache, 8, 64)
    assert plan.decodes == [] and plan.chunks == [(older, 64)]
    assert newer.preempted == 1 and list(state.waiting) == [newer] and state.running == [older]
    assert cache.used == cache.need(256) <= cache.blocks


@pytest.mark.slow
def test_a_real_deployment_never_serves_faster_than_its_bytes_allow(ascend):
    """LLaMA-2-7B on ascend910 under a load that batches up to dozens of requests: every
    request finishes, and no step runs faster than reading what it must from HBM at full
    bandwidth (the weights once, every request's KV cache whole), so the output tokens a
    second never pass a full batch's at that bound (about 30 s: the whole-model steps)."""
    model = load_model("llama2-7b")
    requests = generate(
        50.0, 60, Lengths.parse("p", "fixed:128"), Lengths.parse("o", "fixed:32"), 1
    )
    report = serve(model, ascend, requests, max_batch=64, workers=2)
    data = report.to_dict()
    assert data["requests"] == 60 and max(s.batch for s in report.steps) > 16
    bytes_per_s = ascend.memories["HBM"].peak_bytes_per_cycle * ascend.clock_hz
    weights = 2 * model.weight_count()
    kv_per_position = 2 * model.layers * model.kv_heads * model.head_dim * 2
    for step in report.steps:
        if step.phase == "decode":
            floor_s = (weights + step.batch * 128 * kv_per_position) / bytes_per_s
            assert step.end_s - step.start_s >= floor_s
    best = max(b / ((weights + b * 128 * kv_per_position) / bytes_per_s) for b in range(1, 65))
    assert data["throughput"]["output_tokens_per_s"] <= best


def test_a_step_too_large_to_simulate_is_refused_in_a_line(capsys):
    """Prompts whose prefill is more than a run holds: one line naming the step and what to
    shrink, and the worker processes that were simulating beside it end quietly."""
    args = ["serve", "qwen2-7b", "--hardware", "h100", "--rate", "1", "--num", "3"]
    args += ["--prompt-len", "uniform:15000-16000", "--output-len", "fixed:2", "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "Exception ignored" not in err
    assert "needs about" in err and "use a smaller --max-step-tokens or shorter prompts" in err


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_a_closed_loop_keeps_its_clients_requests_in_flight_and_no_more(concurrency):
    """`concurrency` clients each send a request when their last one finished: never more
    than that many requests in the system; with one client each request starts as the one
    before ends and takes what it takes alone."""
    requests = tuple(Request(i, 0.0, 40 + 9 * i, 3 + i % 5) for i in range(12))
    times = known_times(requests)
    served, steps = run_engine(
        requests, times, PagedKVCache(1000, 16), "continuous", 8, 2048, concurrency
    )
    assert [s.request.id for s in sorted(served, key=lambda s: s.request.id)] == list(range(12))
    for step in steps:  # the requests sent and not finished as the step starts
        in_flight = [s for s in served if s.request.arrival_s <= step.start_s < s.finish_s]
        assert len(in_flight) <= concurrency
    assert max(step.batch for step in steps) == min(concurrency, 8)
    assert sum(step.generated for step in steps) == sum(r.output_tokens for r in requests)
    if concurrency == 1:
        for before, after in zip(served, served[1:]):
            assert after.request.arrival_s == before.finish_s
        for s in served:
            prompt, output = s.request.prompt_tokens, s.request.output_tokens
            alone = times.prefill([prompt]).seconds + sum(
                times.decode([prompt + g]).seconds for g in range(1, output)
            )
            assert s.finish_s - s.request.arrival_s == pytest.approx(alone, rel=1e-12)


@pytest.mark.slow
def test_serving_on_a_dask_cluster_gives_the_local_report(tiny):
    """The whole-model steps on a Dask cluster's workers: the same step times, the same
    report as on local processes."""
    distributed = pytest.importorskip("distributed")
    model = parse_model(TOY, "toy", "<toy>")
    requests = generate(
        50.0, 40, Lengths.parse("p", "uniform:16-64"), Lengths.parse("o", "fixed:8"), 1
    )
    local = serve(model, tiny, requests, workers=2)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        remote = serve(model, tiny, requests, scheduler=cluster.scheduler_address)
    assert remote.to_dict() == local.to_dict()


def test_a_serving_report_says_when_a_power_cap_held_its_steps_clock(tiny):
    """As infer's: steps whose runs the power cap slowed are named in the report's notes,
    whichever process simulated them; a chip that keeps its clock has none."""
    from dataclasses import replace

    energy = replace(
        tiny.energy, cap_watts=tiny.energy.static_watts, cap_clock_hz=tiny.clock_hz / 2
    )
    capped = replace(tiny, energy=energy)  # every run draws more than its static power
    model = parse_model(TOY, "toy", "<toy>")
    requests = (Request(0, 0.0, 24, 3), Request(1, 0.01, 40, 2))
    for workers in (1, 2):
        notes = serve(model, capped, requests, workers=workers).to_dict()["method"]["notes"]
        assert [n.split(" ran at ")[0] for n in notes] == ["prefill", "decode"]
        assert all("held there by tiny's" in n for n in notes)
    assert serve(model, tiny, requests).notes == ()
