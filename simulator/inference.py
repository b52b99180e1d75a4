"""Whole-model inference: a model config → time to first token, time per output token,
tokens per second, where the time goes and whether the model fits.

Every step is a generated workload (config/transformer.py) run through the one pipeline: the
prefill of `batch` prompts, then one decode step per generated token after the first (the
prefill's logits give the first). Two savings keep a 32-layer model quick; the report states
both, and `exact=True` turns them off:

- Layers: a step simulates the model cut to its first few layers (the final norm and LM
  head still run, on the last one's output). The first layer follows the embedding and the
  last meets the head, so it is the layers between that must repeat: when the two before
  the last take the same cycles and move the same HBM bytes, the layers not simulated are
  taken to repeat them; otherwise twice as many are simulated, up to all of them. A step
  whose first layers together are too large for a run (a long prompt) is simulated with one
  layer, and the rest repeat it unchecked (LLaMA-2-7B's 2048-token prefill on ascend910: one
  layer gives the four-layer run's time within 0.2%).
- Contexts: decode steps are simulated at `decode_points` contexts spread over the
  generation, first and last included, and steps between two of them interpolated linearly
  in the context (only attention changes with it, and its work grows linearly).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .config.hardware import Hardware, load_hardware
from .config.model import ModelConfig, kv_cache_bytes, load_model, shard
from .config.transformer import (
    EXPERTS,
    WEIGHT_DTYPES,
    Step,
    expert_rows,
    layer_and_role,
    routing,
    step_workload,
)
from .errors import ConfigError, InvariantError, SimulatorError, TooLargeError, check_count
from .pipeline import plan_kernels, simulate
from .report import SimulationReport
from .schedule.footprint import RESIDENT_ROLES, tensor_roles
from .units import format_bytes_decimal as fmt_bytes
from .version import __version__, format_mark

# The classes a step's time is broken down into: each kernel's time after its launch goes to
# the class of the work it does; the launch waits are their own class.
TIME_CLASSES = ("gemm", "attention", "norm", "other", "launch", "communication")
ATTENTION_OPS = ("qk", "softmax", "pv")
# simulated first: the first layer follows the embedding and the last meets the head (a
# fused kernel may span the two), so the two between are the first that can repeat
FIRST_LAYERS = 4
DECODE_POINTS = 3
PART_KEYS = ("cycles", "hbm_bytes", *TIME_CLASSES)  # summed per layer, with energy parts
ENERGY = "energy:"  # the prefix of a part's joules by where they went (EnergyRecord.parts)
MAX_CHIPS = 64  # the largest tensor-parallel group a refusal suggests
# A request runs this many simulated layer-steps without asking (the CLI's --yes lifts it):
# 2,000 is about 10 minutes at decode on a 2-core machine, while the default request (a
# prefill and three decode steps of four layers) is 16
WORK_LIMIT_LAYER_STEPS = 2_000
ACTIVATION_BYTES = 2  # fp16 activations cross the links


@dataclass(frozen=True)
class StepTime:
    """One step of the whole model: simulated, or (decode) interpolated between two that were."""

    phase: str
    context: int
    cycles: float
    by_class_cycles: Mapping[str, float]
    hbm_bytes: float
    layers_simulated: int  # 0: interpolated
    energy: Mapping[str, float] | None  # one chip's joules by where they went; None: no figures


@dataclass(frozen=True)
class Footprint:
    """HBM bytes the run needs on each chip: the weights, the KV cache at the longest context
    and the activations of the largest step's layer."""

    weight_bytes: int
    kv_cache_bytes: int
    activation_bytes: int
    hbm_capacity_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.kv_cache_bytes + self.activation_bytes

    def to_dict(self) -> dict[str, int]:
        return {
            "weight_bytes": self.weight_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "activation_bytes": self.activation_bytes,
            "total_bytes": self.total_bytes,
            "hbm_capacity_bytes": self.hbm_capacity_bytes,
        }


@dataclass(frozen=True)
class InferenceReport:
    """A request's time, end to end. Times in µs, from the simulated cycles."""

    model: str
    hardware: str
    clock_ghz: float
    batch: int
    prompt: int
    generate: int
    fusion: str
    weights: str
    chips: int  # in tensor parallel; times are the group's, the footprint one chip's
    prefill: StepTime
    # the decode steps simulated, by context: the first and the last of the request's, and
    # (unless every one is) some between; the steps between two are taken on the line
    # between them (decode_sum), so a long generation holds no record per step
    decode: tuple[StepTime, ...]
    footprint: Footprint
    method: str  # how much was simulated, and what was reused or interpolated
    notes: tuple[str, ...] = field(default=())  # what a reader must know to trust the figures
    provenance: Mapping[str, Any] = field(default_factory=dict)  # what produced it: enough to rerun

    def us(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e3)

    @property
    def ttft_us(self) -> float:
        return self.us(self.prefill.cycles)

    @property
    def decode_steps(self) -> int:
        """Decode steps in the request: one per generated token after the first."""
        return self.decode[-1].context - self.decode[0].context + 1 if self.decode else 0

    def decode_sum(self, value: Callable[[StepTime], float]) -> float:
        """`value` summed over every decode step, those between two simulated steps taken on
        the line between them: a stretch of n steps from a (included) to b (not) sums to
        n·a + (b − a)(n − 1)/2."""
        total = 0.0
        for a, b in zip(self.decode, self.decode[1:]):
            n, first, after = b.context - a.context, value(a), value(b)
            total += n * first + (after - first) * (n - 1) / 2
        return total + (value(self.decode[-1]) if self.decode else 0.0)

    @property
    def tpot_us(self) -> dict[str, float] | None:
        """Time per output token after the first: first, last and mean decode step (None: no
        decode step, see `undefined`)."""
        if not self.decode:
            return None
        return {
            "first": self.us(self.decode[0].cycles),
            "last": self.us(self.decode[-1].cycles),
            "mean": self.us(self.decode_sum(lambda s: s.cycles) / self.decode_steps),
        }

    @property
    def undefined(self) -> dict[str, str]:
        """The figures this request does not define (null in the JSON), each with why."""
        if self.decode:
            return {}
        why = f"no decode step: generate {self.generate} is the prefill alone"
        return {"tpot_us": why, "tokens_per_s": why, "energy_j.per_token": why}

    @property
    def e2e_us(self) -> float:
        return self.ttft_us + self.us(self.decode_sum(lambda s: s.cycles))

    def energy_j(self) -> dict[str, Any] | None:
        """Joules of the whole group: the prefill, all decode steps, and per output token
        (a decode step's over the sequences it serves), that last also by where it went."""
        if self.prefill.energy is None or any(s.energy is None for s in self.decode):
            return None
        parts = self.decode[0].energy or {} if self.decode else {}
        per_token = {  # every step's joules of the group, per sequence it serves
            part: self.decode_sum(_energy_part(part)) * self.chips / self.batch for part in parts
        }
        steps = self.decode_steps
        return {
            "prefill": sum(self.prefill.energy.values()) * self.chips,
            "decode": sum(per_token.values()) * self.batch,
            "per_token": sum(per_token.values()) / steps if steps else None,
            "per_token_by_part": {part: j / steps for part, j in per_token.items()}
            if steps
            else None,
        }

    def summary(self) -> str:
        from .viz.inference import render_inference

        return render_inference(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        decode_cycles = self.decode_sum(lambda s: s.cycles)
        tpot = self.tpot_us
        return {
            "format": format_mark("inference"),
            "model": self.model,
            "hardware": self.hardware,
            "batch": self.batch,
            "prompt": self.prompt,
            "generate": self.generate,
            "fusion": self.fusion,
            "weights": self.weights,
            "chips": self.chips,
            "ttft_us": self.ttft_us,
            "tpot_us": tpot,
            "tokens_per_s": None if tpot is None else self.batch * 1e6 / tpot["mean"],
            "e2e_us": self.e2e_us,
            "breakdown_us": {
                "prefill": {c: self.us(v) for c, v in self.prefill.by_class_cycles.items()},
                "decode": {c: self.us(self.decode_sum(_class_cycles(c))) for c in TIME_CLASSES},
            },
            "hbm_bytes_per_token": self.chips  # every chip of the group reads its share
            * (
                self.decode_sum(lambda s: s.hbm_bytes) / self.decode_steps / self.batch
                if self.decode
                else self.prefill.hbm_bytes / (self.batch * self.prompt)
            ),
            "memory_footprint": self.footprint.to_dict(),
            "energy_j": self.energy_j(),
            "decode_cycles": decode_cycles,
            "steps": [
                {
                    "phase": s.phase,
                    "context": s.context,
                    "time_us": self.us(s.cycles),
                    "layers_simulated": s.layers_simulated,
                }
                for s in (self.prefill, *self.decode)
                if s.layers_simulated
            ],
            "method": self.method,
            "notes": list(self.notes),
            "undefined": self.undefined,
            "provenance": dict(self.provenance),
        }


def _class_cycles(name: str) -> Callable[[StepTime], float]:
    return lambda step: step.by_class_cycles[name]


def _energy_part(name: str) -> Callable[[StepTime], float]:
    return lambda step: (step.energy or {})[name]


def infer(
    model: ModelConfig | str,
    hardware: Hardware | str = "ascend910",
    batch: int = 1,
    prompt: int = 128,
    generate: int = 128,
    fusion: str = "auto",
    weights: str = "fp16",
    chips: int = 1,
    exact: bool = False,
    decode_points: int = DECODE_POINTS,
    on_step: Callable[[str, int, int], None] | None = None,
    work_limit: int | None = WORK_LIMIT_LAYER_STEPS,
) -> InferenceReport:
    """Simulate one request of `batch` prompts of `prompt` tokens generating `generate`
    tokens each, on `chips` chips in tensor parallel. `model` and `hardware` are loaded
    configs, or names (or paths) to load; `decode_points` is how many decode contexts are
    simulated (at least the first and the last). `on_step(what, step, steps)` hears of each
    step as its simulation starts (for a progress bar). A request of more than `work_limit`
    layer-steps (layers simulated x steps; None: no limit) is refused before it starts."""
    if isinstance(model, str):
        model = load_model(model)
    if isinstance(hardware, str):
        hardware = load_hardware(hardware)
    if not isinstance(model, ModelConfig) or not isinstance(hardware, Hardware):
        raise TypeError(
            "infer() takes a model (load_model(name) or its name) and hardware "
            f"(load_hardware(name) or its name), got {type(model).__name__} and "
            f"{type(hardware).__name__}"
        )
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
    if chips > 1 and hardware.link is None:
        raise SimulatorError(
            f"{hardware.name} names no link to other chips (link: in its preset), so tensor "
            f"parallelism over {chips} chips cannot be modelled"
        )
    if isinstance(generate, bool) or not isinstance(generate, int) or generate < 0:
        raise SimulatorError(f"generate must be a whole number of tokens, got {generate!r}")
    if fusion not in ("none", "auto"):
        raise SimulatorError(f"fusion must be none or auto, got {fusion!r}")
    if weights not in WEIGHT_DTYPES:
        raise SimulatorError(f"weights must be one of {', '.join(WEIGHT_DTYPES)}, got {weights!r}")
    if prompt + generate > model.max_context:
        raise SimulatorError(
            f"{model.name} attends over at most {model.max_context:,} positions "
            f"(max_position_embeddings), but prompt {prompt:,} + generate {generate:,} "
            f"is {prompt + generate:,}"
        )

    part = shard(model, chips)

    def run(step: Step, layers: int) -> SimulationReport:
        try:
            return simulate(step_workload(part, hardware, step, layers, fusion, weights))
        except TooLargeError as exc:
            raise TooLargeError(
                f"{exc}\n{model.name}'s {step.phase} of {batch} x {step.new_tokens} tokens is "
                f"simulated {layers} layer{'s' * (layers != 1)} at a time, which is too "
                "large for one run: use a shorter --prompt or a smaller --batch"
            ) from None

    def whole(step: Step, index: int, planned: int) -> StepTime:
        if on_step:
            on_step(f"{step.phase} @ {step.context}", index, planned)
        return _with_communication(_whole_model_step(part, step, run, exact), part, hardware, step)

    prefill_step = Step("prefill", batch, prompt, prompt)
    footprint = _footprint(part, hardware, prefill_step, prompt + generate, fusion, weights)
    if footprint.total_bytes > footprint.hbm_capacity_bytes:
        _refuse(model, part, hardware, footprint, prefill_step, prompt + generate, fusion, weights)
    contexts = range(prompt + 1, prompt + generate)
    sampled = list(contexts) if exact else _spread(contexts, decode_points)
    planned = 1 + len(sampled)
    layer_steps = planned * (model.layers if exact else min(model.layers, FIRST_LAYERS))
    if work_limit is not None and layer_steps > work_limit:
        raise SimulatorError(
            f"this request simulates about {layer_steps:,} layer-steps ({planned:,} steps of "
            f"{layer_steps // planned} layers), more than the {work_limit:,} a request runs "
            "without asking (each takes from a fraction of a second to seconds); pass --yes "
            "to run it"
            + ("" if not exact else ", or drop --exact (a few layers at a few contexts)")
        )
    prefill = whole(prefill_step, 1, planned)
    decode = tuple(
        whole(Step("decode", batch, 1, c), 2 + i, planned) for i, c in enumerate(sampled)
    )
    layers = sorted({s.layers_simulated for s in (prefill, *decode)})
    every = len(sampled) == len(contexts)
    method = (
        "every layer of every step simulated"
        if exact or (layers == [model.layers] and every)
        else (
            f"layers simulated per step: {', '.join(map(str, layers))} of {model.layers} "
            "(the rest repeat the one before the last, which took the same cycles and bytes "
            "as the one before it"
            + (
                "; 1: more layers at once are too large for a run, so the rest repeat that "
                "one unchecked"
                if 1 in layers and model.layers > 1
                else ""
            )
            + (
                f"); decode simulated at each of its {len(contexts)} contexts"
                if every
                else f"); decode simulated at {len(sampled)} of {len(contexts):,} contexts "
                f"({', '.join(map(str, sampled))}), interpolated between them"
            )
        )
    )
    notes = []
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
        {
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
                "chips": chips,
                "exact": exact,
                "decode_points": decode_points,
            },
        },
    )


def _whole_model_step(
    model: ModelConfig, step: Step, run: Callable[[Step, int], SimulationReport], exact: bool
) -> StepTime:
    """A step of the whole model from runs of its first layers (see the module docstring)."""
    first = model.layers if exact else min(model.layers, FIRST_LAYERS)
    count = first
    while True:
        try:
            report = run(step, count)
        except TooLargeError:
            if exact or count != first or count == 1:
                raise
            count = 1  # the first layers at once are too large for a run: one, and its repeats
            continue
        parts = _parts(report)
        if count in (1, model.layers):
            break
        middle, before = parts.get(count - 2), parts.get(count - 3)
        if middle is not None and before is not None and _repeats(middle, before):
            break
        count = min(model.layers, 2 * count)
    total: dict[str, float] = {}
    repeat = parts[max(0, count - 2)]  # the layers not simulated sit before the last
    for part, times in [*((p, 1) for p in parts.values()), (repeat, model.layers - count)]:
        for key, value in part.items():
            total[key] = total.get(key, 0.0) + times * value
    by_class = {c: total[c] for c in TIME_CLASSES}
    energy = {k[len(ENERGY) :]: v for k, v in total.items() if k.startswith(ENERGY)}
    return StepTime(
        step.phase,
        step.context,
        total["cycles"],
        by_class,
        total["hbm_bytes"],
        count,
        None if report.energy is None else energy,
    )


def _repeats(layer: Mapping[str, float], before: Mapping[str, float]) -> bool:
    """A layer repeats the one before when it takes the same cycles, in each class, and moves
    the same HBM bytes (its joules may differ by what L2 happened to serve on chip)."""
    return all(layer[key] == before[key] for key in PART_KEYS)


def _parts(report: SimulationReport) -> dict[int | None, dict[str, float]]:
    """Cycles, HBM bytes, joules and time per class of each layer's kernels (key: the layer
    index; None: the embedding and the head)."""
    parts: dict[int | None, dict[str, float]] = {}
    for kernel in report.kernels:
        layer, _ = layer_and_role(kernel.ops[0])
        part = parts.setdefault(layer, dict.fromkeys(PART_KEYS, 0.0))
        hbm = kernel.traffic["HBM"]
        part["cycles"] += kernel.cycles
        part["hbm_bytes"] += hbm.read_bytes + hbm.write_bytes
        for where, joules in (kernel.energy.parts() if kernel.energy else {}).items():
            part[ENERGY + where] = part.get(ENERGY + where, 0.0) + joules
        part["launch"] += kernel.launch_cycles
        part[_time_class(kernel.ops)] += kernel.cycles - kernel.launch_cycles
    return parts


def _time_class(ops: tuple[str, ...]) -> str:
    """The class of a generated kernel's work, from its ops' roles (an expert's ops are
    named for their slot: slot0_gate)."""
    roles = {layer_and_role(name)[1].rsplit("_", 1)[-1] for name in ops}
    if roles & set(ATTENTION_OPS):
        return "attention"
    if roles & {"proj", "gate", "up", "down", "head", "router"}:
        return "gemm"
    if roles & {"norm"}:
        return "norm"
    return "other"


def _spread(contexts: range, points: int) -> list[int]:
    """`points` contexts spread evenly over the range, its first and last among them."""
    if len(contexts) <= points:
        return list(contexts)
    return sorted({contexts[round(i * (len(contexts) - 1) / (points - 1))] for i in range(points)})


def _footprint(
    model: ModelConfig, hardware: Hardware, prefill: Step, longest: int, fusion: str, weights: str
) -> Footprint:
    """From the generated prefill of a one-layer model: its layer's weights times the layers,
    plus the embedding and head; the KV cache in fp16; every other tensor of that prefill
    that reaches HBM (one layer's activations: layers run one after another and reuse them;
    what a fused kernel keeps on chip, fused attention's scores among them, takes none)."""
    workload = step_workload(model, hardware, prefill, 1, fusion, weights)
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
        kv_cache_bytes(model, prefill.batch * longest, 2),
        round(activations),
        hardware.memories["HBM"].capacity_bytes,
    )


def _refuse(
    model: ModelConfig,
    part: ModelConfig,
    hardware: Hardware,
    footprint: Footprint,
    prefill: Step,
    longest: int,
    fusion: str,
    weights: str,
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
    fits = None
    if hardware.link is not None:
        for chips in range(part.chips + 1, MAX_CHIPS + 1):
            try:
                candidate = shard(model, chips)
            except ConfigError:
                continue
            need = _footprint(candidate, hardware, prefill, longest, fusion, weights)
            if need.total_bytes <= need.hbm_capacity_bytes:
                fits = chips
                break
    advice = (
        f"; it fits on {fits} chips: --chips {fits}"
        if fits
        else ("; try int8 weights, a shorter context or a smaller batch")
    )
    raise SimulatorError(message + advice)


def _with_communication(
    time: StepTime, part: ModelConfig, hardware: Hardware, step: Step
) -> StepTime:
    """A step's time with its tensor-parallel collectives: a ring all-reduce of the
    activations after each layer's attention and after its MLP, and an all-gather of the
    logits. A collective costs the link's start-up once, then its ring's bytes at the link's
    rate: an all-reduce of S bytes over N chips sends 2(N - 1) shares of S/N, an all-gather
    N - 1. The collectives are not overlapped with compute."""
    chips = part.chips
    if chips == 1:
        return time
    link = hardware.link
    if link is None:
        raise InvariantError(f"{chips} chips on {hardware.name}, which has no link")

    def ring(steps: int, nbytes: int) -> float:
        return link.latency_cycles + steps * nbytes / chips / link.bytes_per_cycle

    activations = step.tokens * part.hidden * ACTIVATION_BYTES
    logits = step.batch * part.head_vocab * chips * ACTIVATION_BYTES
    cycles = 2 * part.layers * ring(2 * (chips - 1), activations) + ring(chips - 1, logits)
    by_class = dict(time.by_class_cycles)
    by_class["communication"] += cycles
    energy = time.energy  # the chip draws its static power while it waits on the link
    if energy is not None and hardware.energy is not None:
        waited = hardware.energy.static_watts * cycles / hardware.clock_hz
        energy = {**energy, "static": energy.get("static", 0.0) + waited}
    return replace(time, cycles=time.cycles + cycles, by_class_cycles=by_class, energy=energy)
