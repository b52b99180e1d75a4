"""Whole-model inference: a model config → time to first token, time per output token,
tokens per second, where the time goes and whether the model fits.

Every step is a generated workload (config/transformer.py) run through the one pipeline: the
prefill of `batch` prompts, then one decode step per generated token after the first (the
prefill's logits give the first; a runtime with `first_token: decode` prefills all but the
prompt's last token, and a decode step over that token gives it). Two savings keep a
32-layer model quick, and a third is asked for; the report states them, and `exact=True`
turns them off:

- Layers: a step simulates the model cut to its first few layers (the final norm and LM
  head still run, on the last one's output): three, when they prove that the layers between
  repeat the second exactly, else four or more whose middle ones are compared
  (layer_steps.py).
- Contexts: decode steps are simulated at `decode_points` contexts spread over the
  generation, first and last included, and steps between two of them interpolated linearly
  in the context (only attention changes with it, and its work grows linearly, in steps of
  its blocks); the method states the most the line can miss that staircase by.
- Chunks and blocks (`sample=True`): a matmul block of many K chunks, and a row of many
  blocks, simulates its first ones, a measured window and its last ones; those between
  repeat the window (schedule/sampling.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace

from ..config.hardware import Hardware, load_hardware
from ..config.model import ModelConfig, kv_cache_bytes, load_model, shard
from ..config.runtime import DECODE, Runtime, load_runtime
from ..config.transformer import (
    EXPERTS,
    KV_CACHE_DTYPES,
    WEIGHT_DTYPES,
    Step,
    expert_rows,
    layer_and_role,
    routing,
    step_workload,
)
from ..cost import all_gather_cycles, all_reduce_cycles
from ..errors import ConfigError, InvariantError, SimulatorError, TooLargeError, check_count
from ..ops import DTYPE_BYTES
from ..pipeline import plan_kernels
from ..report import SimulationReport
from ..schedule.footprint import RESIDENT_ROLES, tensor_roles
from ..schedule.program import MAX_INSTRUCTIONS
from ..step_cache import simulate_cached
from ..units import format_bytes_decimal as fmt_bytes
from ..version import __version__
from .inference_report import (
    Footprint,
    InferenceReport,
    StepTime,
    interpolation_note,
)
from .layer_steps import PROVEN_LAYERS, clock_scale, layers_method, whole_model_step

DECODE_POINTS = 3
MAX_CHIPS = 64  # the largest tensor-parallel group a refusal suggests
# A request runs this many simulated layer-steps without asking (the CLI's --yes lifts it):
# 2,000 is about 10 minutes at decode on a 2-core machine, while the default request (a
# prefill and three decode steps of three layers) is 12
WORK_LIMIT_LAYER_STEPS = 2_000
ACTIVATION_BYTES = 2  # fp16 activations cross the links


def infer(
    model: ModelConfig | str,
    hardware: Hardware | str = "ascend910",
    batch: int = 1,
    prompt: int = 128,
    generate: int = 128,
    fusion: str = "auto",
    weights: str = "fp16",
    chips: int = 1,
    runtime: Runtime | str | None = None,
    kv_cache: str = "fp16",
    exact: bool = False,
    decode_points: int = DECODE_POINTS,
    sample: bool = False,
    on_step: Callable[[str, int, int], None] | None = None,
    work_limit: int | None = WORK_LIMIT_LAYER_STEPS,
) -> InferenceReport:
    """Simulate one request of `batch` prompts of `prompt` tokens generating `generate`
    tokens each, on `chips` chips in tensor parallel, driven by `runtime` (a profile, or its
    name; None: the hardware file's own launch figures and no host time per step), with its
    weights and KV cache in the dtypes given. `model`
    and `hardware` are loaded configs, or names (or paths) to load; `decode_points` is how
    many decode contexts are simulated (at least the first and the last). `on_step(what,
    step, steps)` hears of each step as its simulation starts (for a progress bar). A request
    of more than `work_limit` layer-steps (layers simulated x steps; None: no limit) is
    refused before it starts. `sample` simulates a matmul's repeating K chunks or blocks in part
    (schedule/sampling.py; ignored with `exact`): not yet the default, as a sampled run is
    not yet within 1% of the exact one everywhere (the HBM bytes of kernels whose operands
    nearly fill L2: a 512-token prefill layer on h200, 13% low)."""
    model, hardware, runtime = loaded(model, hardware, runtime, "infer()")
    if decode_points == 1 or (isinstance(decode_points, int) and decode_points < 1):
        raise ValueError(
            f"decode_points must be at least 2 (the first and last contexts), got {decode_points}"
        )
    for name, value in (
        ("batch", batch),
        ("prompt", prompt),
        ("chips", chips),
        ("decode_points", decode_points),
    ):
        check_count(name, value)
    if isinstance(generate, bool) or not isinstance(generate, int) or generate < 0:
        raise SimulatorError(f"generate must be a whole number of tokens, got {generate!r}")
    check_deployment(hardware, chips, fusion, weights, kv_cache)
    check_context(model, prompt, generate)

    part = shard(model, chips)
    steps = StepOptions(fusion, weights, kv_cache)
    timer = StepTimer(
        part, hardware, steps, runtime, exact, sample, f"--prompt {prompt} --batch {batch}"
    )

    def whole(step: Step, index: int, planned: int) -> StepTime:
        if on_step:
            on_step(f"{step.phase} @ {step.context}", index, planned)
        return timer(step)

    prefill_step = Step("prefill", batch, prompt, prompt)
    longest = prompt + generate
    footprint = hbm_footprint(part, hardware, prefill_step, longest, steps)
    if footprint.total_bytes > footprint.hbm_capacity_bytes:
        _refuse(model, part, hardware, footprint, prefill_step, longest, steps)
    first_steps = [prefill_step]  # the steps before the first token
    if runtime is not None and runtime.first_token == DECODE:
        short = [Step("prefill", batch, prompt - 1, prompt - 1)] if prompt > 1 else []
        first_steps = [*short, Step("decode", batch, 1, prompt)]
    contexts = range(prompt + 1, prompt + generate)
    sampled = list(contexts if exact else spread(contexts.start, contexts.stop - 1, decode_points))
    planned = len(first_steps) + len(sampled)
    layer_steps = planned * (model.layers if exact else min(model.layers, PROVEN_LAYERS))
    if work_limit is not None and layer_steps > work_limit:
        raise SimulatorError(
            f"this request simulates about {layer_steps:,} layer-steps ({planned:,} steps of "
            f"{layer_steps // planned} layers), more than the {work_limit:,} a request runs "
            "without asking (each takes from a fraction of a second to seconds); pass --yes "
            "to run it"
            + ("" if not exact else ", or drop --exact (a few layers at a few contexts)")
        )
    prefill = _then([whole(s, 1 + i, planned) for i, s in enumerate(first_steps)])
    decode = tuple(
        whole(Step("decode", batch, 1, c), len(first_steps) + 1 + i, planned)
        for i, c in enumerate(sampled)
    )
    layers = sorted({s.layers_simulated for s in (prefill, *decode)})
    every = len(sampled) == len(contexts)
    method = (
        "every layer of every step simulated"
        if exact or (layers == [model.layers] and every)
        else (
            f"layers simulated per step: {layers_method(layers, model.layers)}"
            + (
                f"; decode simulated at each of its {len(contexts)} contexts"
                if every
                else f"; decode simulated at {len(sampled)} of {len(contexts):,} contexts "
                f"({', '.join(map(str, sampled))}), interpolated between them"
                + interpolation_note(decode)
            )
        )
    )
    errors = [e for e in timer.sampled_error if e is not None]
    if errors:
        method += "; " + sampling_note(errors, "--exact simulates them all")
    notes = capped_notes(timer.capped, hardware)
    if runtime is not None and runtime.first_token == DECODE:
        notes.append(
            f"runtime {runtime.name} leaves the prompt's last token to its first decode step: "
            "the first token follows "
            + (f"a prefill of {prompt - 1:,} tokens and " if prompt > 1 else "")
            + f"a decode step at context {prompt:,} (counted in the prefill column)"
        )
    if model.experts > 1:  # say how the tokens were taken to reach the experts
        routed = [prefill_step, *([Step("decode", batch, 1, prompt + 1)] if generate > 1 else [])]
        notes.append(
            "mixture of experts, routing taken as even: "
            + "; ".join(routing(part, step) for step in routed)
        )
    return InferenceReport(
        model.name,
        hardware.name,
        hardware.clock_hz / 1e9,
        batch,
        prompt,
        generate,
        fusion,
        weights,
        chips,
        prefill,
        decode,
        footprint,
        method,
        tuple(notes),
        runtime=None if runtime is None else runtime.name,
        kv_cache=kv_cache,
        provenance={
            "simulator_version": __version__,
            "model_file": model.source,
            "model": asdict(model),
            "hardware_file": hardware.source,
            "hardware": hardware.to_dict(),
            "overrides": [*model.overrides, *hardware.overrides],
            "options": {
                "batch": batch,
                "prompt": prompt,
                "generate": generate,
                "fusion": fusion,
                "weights": weights,
                "kv_cache": kv_cache,
                "chips": chips,
                "runtime": None if runtime is None else runtime.to_dict(),
                "exact": exact,
                "decode_points": decode_points,
                "sample": sample and not exact,
            },
        },
    )


def loaded(
    model: ModelConfig | str,
    hardware: Hardware | str,
    runtime: Runtime | str | None,
    caller: str,
) -> tuple[ModelConfig, Hardware, Runtime | None]:
    """The model, hardware and runtime (each loaded, or its name or path loaded), the
    hardware with the runtime's launch figures in place of its own; `caller` names the API
    a wrong type was given to."""
    if isinstance(model, str):
        model = load_model(model)
    if isinstance(hardware, str):
        hardware = load_hardware(hardware)
    if isinstance(runtime, str):
        runtime = load_runtime(runtime)
    if not isinstance(model, ModelConfig) or not isinstance(hardware, Hardware):
        raise TypeError(
            f"{caller} takes a model (load_model(name) or its name) and hardware "
            f"(load_hardware(name) or its name), got {type(model).__name__} and "
            f"{type(hardware).__name__}"
        )
    if runtime is not None:
        if not isinstance(runtime, Runtime):
            raise TypeError(
                f"{caller} takes a runtime (load_runtime(name) or its name), got "
                f"{type(runtime).__name__}"
            )
        hardware = runtime.on(hardware)
    return model, hardware, runtime


def check_deployment(
    hardware: Hardware, chips: int, fusion: str, weights: str, kv_cache: str
) -> None:
    """Refuse, in a line, a chip group the hardware cannot join or dtypes and a fusion mode it
    cannot run (what `infer` and `serve` both check before simulating anything)."""
    if chips > 1:
        if hardware.link is None:
            raise SimulatorError(
                f"{hardware.name} names no link to other chips (link: in its preset), so "
                f"tensor parallelism over {chips} chips cannot be modelled"
            )
        why = hardware.link.refusal(chips)
        if why is not None:
            raise SimulatorError(f"--chips {chips}: {hardware.name} cannot join them: {why}")
    if fusion not in ("none", "auto"):
        raise SimulatorError(f"fusion must be none or auto, got {fusion!r}")
    if weights not in WEIGHT_DTYPES:
        raise SimulatorError(f"weights must be one of {', '.join(WEIGHT_DTYPES)}, got {weights!r}")
    if weights == "fp8" and "fp8" not in hardware.cube.fractal:
        raise SimulatorError(
            f"fp8 weights need a matrix unit with an fp8 mode, and {hardware.name}'s has "
            f"{', '.join(hardware.cube.fractal)}; try int8 or w8a16 weights"
        )
    if kv_cache not in KV_CACHE_DTYPES:
        raise SimulatorError(
            f"kv_cache must be one of {', '.join(KV_CACHE_DTYPES)}, got {kv_cache!r}"
        )


def check_context(model: ModelConfig, prompt: int, generate: int, which: str = "") -> None:
    """Refuse a request (`which`, named in the error) longer than the model attends over."""
    if prompt + generate > model.max_context:
        raise SimulatorError(
            f"{which}{model.name} attends over at most {model.max_context:,} positions "
            f"(max_position_embeddings), but prompt {prompt:,} + generate {generate:,} "
            f"is {prompt + generate:,}"
        )


class StepTimer:
    """Whole-model steps of one (sharded) model on one chip group, each simulated through the
    cache of runs (inference.py's layer saving unless `exact`), with the group's collectives
    and the runtime's host time: what `infer` and `serve` time every step with. A step too
    large for a run is refused, naming `request` and giving `advice`."""

    def __init__(
        self,
        part: ModelConfig,
        hardware: Hardware,
        steps: StepOptions,
        runtime: Runtime | None,
        exact: bool,
        sample: bool,
        request: str,
        advice: str = "use a shorter --prompt or a smaller --batch",
    ):
        self.part, self.hardware, self.steps, self.runtime = part, hardware, steps, runtime
        self.exact, self.sample, self.request = exact, sample and not exact, request
        self.advice = advice
        self.issue_cycles = 0 if runtime is None else runtime.issue_cycles(hardware, part.layers)
        self.capped: dict[str, float] = {}  # phase -> the clock its power cap held a run to
        self.sampled_error: list[float | None] = []  # per run: see _sampled_error

    def __call__(self, step: Step) -> StepTime:
        hardware, runtime = self.hardware, self.runtime
        time = _with_communication(
            whole_model_step(self.part, step, self._run, self.exact, hardware.clock_hz),
            self.part,
            hardware,
            step,
        )
        if self.issue_cycles > time.cycles:  # the device ran out of issued work and waited
            time = _waited(time, "host", self.issue_cycles - time.cycles, hardware)
        if runtime is None:
            return time
        host_cycles = runtime.step_host_cycles(hardware, step.phase, self.part.layers)
        return _waited(time, "host", host_cycles, hardware) if host_cycles else time

    def _run(self, step: Step, layers: int) -> SimulationReport:
        try:
            report = simulate_cached(
                self.steps.workload(self.part, self.hardware, step, layers), sample=self.sample
            )
        except TooLargeError as exc:
            raise TooLargeError(
                f"{self.request}: {self.part.name}'s {step.phase} of "
                f"{step.batch} x {step.new_tokens:,} tokens, {layers} layer{'s' * (layers != 1)} "
                f"at a time, needs about {exc.instructions:,} instructions in one run, more "
                f"than the {MAX_INSTRUCTIONS:,} a run holds in memory; {self.advice}",
                exc.instructions,
            ) from None
        self.sampled_error.append(_sampled_error(report))
        if clock_scale(report, self.hardware.clock_hz) != 1.0:
            self.capped[step.phase] = report.clock_ghz * 1e9
        return report


def sampling_note(errors: list[float], instead: str) -> str:
    """What sampling did to the runs whose error estimates (shares of a run's time) are
    `errors`, and `instead`: how to simulate them all."""
    return (
        "matmul K chunks and blocks simulated in part, those between two measured windows "
        f"extrapolated from them (error estimate up to {100 * max(errors):.2g}% of a run's "
        f"time; {instead})"
    )


def capped_notes(capped: dict[str, float], hardware: Hardware) -> list[str]:
    """A line for each phase whose runs the power cap held to a lower clock (`capped`: the
    phase's clock in Hz)."""
    if hardware.energy is None:
        return []
    return [
        f"{phase} ran at {hz / 1e9:.3f} GHz, held there by {hardware.name}'s "
        f"{hardware.energy.cap_watts:,.0f} W power cap (its time is counted in cycles of the "
        f"full {hardware.clock_hz / 1e9:.3f} GHz)"
        for phase, hz in capped.items()
    ]


def _sampled_error(report: SimulationReport) -> float | None:
    """The share of a run's time its sampled kernels' error estimates add up to (None: no
    kernel was sampled)."""
    sampled = [k.sampled for k in report.kernels if k.sampled is not None]
    if not sampled:
        return None
    return sum(s.error_cycles for s in sampled) / max(report.cycles, 1)


def _then(steps: list[StepTime]) -> StepTime:
    """Steps run one after another, as one (the steps before the first token)."""
    first, *rest = steps
    for step in rest:
        first = replace(
            first,
            context=step.context,
            cycles=first.cycles + step.cycles,
            by_class_cycles=_added(first.by_class_cycles, step.by_class_cycles),
            hbm_bytes=first.hbm_bytes + step.hbm_bytes,
            layers_simulated=max(first.layers_simulated, step.layers_simulated),
            energy=None
            if first.energy is None or step.energy is None
            else _added(first.energy, step.energy),
        )
    return first


def _added(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    return {key: a.get(key, 0.0) + b.get(key, 0.0) for key in {**a, **b}}


def spread(low: int, high: int, points: int = DECODE_POINTS) -> tuple[int, ...]:
    """`points` values spread evenly from `low` to `high`, both included (every one, where
    there are no more): the contexts a request's decode steps, or a serving trace's, are
    simulated at."""
    if high - low + 1 <= points:
        return tuple(range(low, high + 1))
    return tuple(sorted({low + round(i * (high - low) / (points - 1)) for i in range(points)}))


@dataclass(frozen=True)
class StepOptions:
    """What every step of a request is generated with, beside its model, chip and shape."""

    fusion: str
    weights: str
    kv_cache: str

    def workload(self, model: ModelConfig, hardware: Hardware, step: Step, layers: int):
        return step_workload(
            model, hardware, step, layers, self.fusion, self.weights, self.kv_cache
        )


def hbm_footprint(
    model: ModelConfig, hardware: Hardware, prefill: Step, longest: int, steps: StepOptions
) -> Footprint:
    """From the generated prefill of a one-layer model: its layer's weights times the layers,
    plus the embedding and head; the KV cache in its dtype; every other tensor of that prefill
    that reaches HBM (one layer's activations: layers run one after another and reuse them;
    what a fused kernel keeps on chip, fused attention's scores among them, takes none)."""
    workload = steps.workload(model, hardware, prefill, 1)
    roles = tensor_roles(workload, plan_kernels(workload))
    all_experts = model.experts / expert_rows(model, prefill)[0]  # the step reads the active
    layer_weights = outside = activations = 0.0
    for tensor in workload.tensors.values():
        layer, role = layer_and_role(tensor.name)
        if tensor.kind != "weight":
            if roles.get(tensor.name, ("on_chip",))[0] in RESIDENT_ROLES:
                activations += tensor.nbytes
        elif layer is None:
            outside += tensor.nbytes
        else:
            layer_weights += tensor.nbytes * (all_experts if role.startswith(EXPERTS) else 1)
    return Footprint(
        round(layer_weights * model.layers + outside),
        kv_cache_bytes(model, prefill.batch * longest, DTYPE_BYTES[steps.kv_cache]),
        round(activations),
        hardware.memories["HBM"].capacity_bytes,
    )


def fewest_chips(
    model: ModelConfig,
    hardware: Hardware,
    prompt: int,
    generate: int,
    batch: int = 1,
    fusion: str = "auto",
    weights: str = "fp16",
    kv_cache: str = "fp16",
) -> int | None:
    """The fewest chips, in tensor parallel over the preset's links, whose shares of the
    model fit their HBM for this request (None: no group the links join), from footprints
    alone: nothing is simulated."""
    prefill = Step("prefill", batch, prompt, prompt)
    steps = StepOptions(fusion, weights, kv_cache)
    return _fewest_chips(model, hardware, prefill, prompt + generate, steps, 1)


def _fewest_chips(
    model: ModelConfig,
    hardware: Hardware,
    prefill: Step,
    longest: int,
    steps: StepOptions,
    start: int,
) -> int | None:
    for chips in range(start, MAX_CHIPS + 1):
        if chips > 1 and (hardware.link is None or hardware.link.refusal(chips) is not None):
            continue
        try:
            candidate = shard(model, chips)
        except ConfigError:
            continue
        need = hbm_footprint(candidate, hardware, prefill, longest, steps)
        if need.total_bytes <= need.hbm_capacity_bytes:
            return chips
    return None


def _refuse(
    model: ModelConfig,
    part: ModelConfig,
    hardware: Hardware,
    footprint: Footprint,
    prefill: Step,
    longest: int,
    steps: StepOptions,
) -> None:
    """A model that does not fit is refused with its footprint and, where the chip has a
    link, the fewest chips whose shares would fit (heads and MLP split evenly)."""
    where = f"{part.chips} x {hardware.name}" if part.chips > 1 else hardware.name
    message = (
        f"{part.name} does not fit in {where}'s {fmt_bytes(footprint.hbm_capacity_bytes)} of "
        f"HBM per chip: it needs {fmt_bytes(footprint.total_bytes)} (weights "
        f"{fmt_bytes(footprint.weight_bytes)}, KV cache {fmt_bytes(footprint.kv_cache_bytes)}, "
        f"activations {fmt_bytes(footprint.activation_bytes)})"
    )
    fits = _fewest_chips(model, hardware, prefill, longest, steps, part.chips + 1)
    smaller = [
        *(["int8 weights"] if steps.weights == "fp16" else []),
        *(  # where the cache weighs: a quarter of the need or more
            ["an fp8 KV cache"]
            if steps.kv_cache == "fp16" and 4 * footprint.kv_cache_bytes >= footprint.total_bytes
            else []
        ),
        "a shorter context or a smaller batch",
    ]
    advice = f"; it fits on {fits} chips: --chips {fits}" if fits else f"; try {', '.join(smaller)}"
    raise SimulatorError(message + advice)


def _with_communication(
    time: StepTime, part: ModelConfig, hardware: Hardware, step: Step
) -> StepTime:
    """A step's time with its tensor-parallel collectives: a ring all-reduce of the
    activations after each layer's attention and after its MLP, and an all-gather of the
    logits, timed by cost.all_reduce_cycles and all_gather_cycles (rings, hierarchical
    across groups of chips). The collectives are not overlapped with compute."""
    chips = part.chips
    if chips == 1:
        return time
    link = hardware.link
    if link is None:
        raise InvariantError(f"{chips} chips on {hardware.name}, which has no link")
    activations = step.tokens * part.hidden * ACTIVATION_BYTES
    logits = step.batch * part.head_vocab * chips * ACTIVATION_BYTES
    cycles = 2 * part.layers * all_reduce_cycles(link, chips, activations) + all_gather_cycles(
        link, chips, logits
    )
    return _waited(time, "communication", cycles, hardware)


def _waited(time: StepTime, time_class: str, cycles: float, hardware: Hardware) -> StepTime:
    """A step `cycles` longer, spent in `time_class` while the chip's units wait (on the
    link, or on the host) and it draws its static power."""
    by_class = dict(time.by_class_cycles)
    by_class[time_class] += cycles
    energy = time.energy
    if energy is not None and hardware.energy is not None:
        waited = hardware.energy.static_watts * cycles / hardware.clock_hz
        energy = {**energy, "static": energy.get("static", 0.0) + waited}
    return replace(time, cycles=time.cycles + cycles, by_class_cycles=by_class, energy=energy)
