"""A step of the whole model from runs of its first layers (inference.py's first saving).

The first layer follows the embedding and the last meets the head (a fused kernel may span
the two), so it is the layers between that must repeat. Three layers prove it when the
third begins with the L2 holding what the second began with, tensor for tensor a layer on
(the engine records it as each kernel starts: L2Cache.entry_state), and the host's launches
are no later: each layer between then begins as the second did and runs as it did, so they
are counted as its repeats, exactly. Otherwise (an L2 that holds more than a layer) four
are simulated, and when the two before the last take the same cycles and move the same HBM
bytes, the layers not simulated are taken to repeat them; if not, twice as many, up to all
of them. A step whose first layers together are too large for a run (a long prompt) is
simulated with one layer, and the rest repeat it unchecked (LLaMA-2-7B's 2048-token prefill
on ascend910: one layer gives the four-layer run's time within 0.2%).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..config.model import ModelConfig
from ..config.transformer import Step, layer_and_role
from ..errors import TooLargeError
from ..report import SimulationReport
from .inference_report import TIME_CLASSES, StepTime

ATTENTION_OPS = ("qk", "softmax", "pv")
# simulated first: the first layer, the second and the last, enough to prove (not only
# check) that the layers between repeat the second
PROVEN_LAYERS = 3
# simulated when three prove nothing: the two between the first and the last are the first
# that can be compared
FIRST_LAYERS = 4
PART_KEYS = ("cycles", "hbm_bytes", *TIME_CLASSES)  # summed per layer, with energy parts
ENERGY = "energy:"  # the prefix of a part's joules by where they went (EnergyRecord.parts)


def whole_model_step(
    model: ModelConfig,
    step: Step,
    run: Callable[[Step, int], SimulationReport],
    exact: bool,
    clock_hz: float,
) -> StepTime:
    """A step of the whole model from runs of its first layers (see the module docstring),
    in cycles of `clock_hz`."""
    first = model.layers if exact else min(model.layers, FIRST_LAYERS)
    count = first
    if not exact and model.layers > PROVEN_LAYERS:
        try:
            report = run(step, PROVEN_LAYERS)
        except TooLargeError:
            count = 1  # three layers at once are too large for a run: one, and its repeats
        else:
            if _second_repeats(report):
                return _step_time(step, report, clock_hz, PROVEN_LAYERS, 1, model.layers)
    while True:
        try:
            report = run(step, count)
        except TooLargeError:
            if exact or count != first or count == 1:
                raise
            count = 1  # the first layers at once are too large for a run: one, and its repeats
            continue
        parts = _parts(report, clock_hz)
        if count in (1, model.layers):
            break
        middle, before = parts.get(count - 2), parts.get(count - 3)
        if middle is not None and before is not None and _repeats(middle, before):
            break
        count = min(model.layers, 2 * count)
    # the layers not simulated sit before the last
    return _step_time(step, report, clock_hz, count, max(0, count - 2), model.layers)


def layers_method(counts: list[int], layers: int) -> str:
    """How the steps' layers were simulated, by the counts of layers their runs took."""
    why = {
        PROVEN_LAYERS: "the first, the second and the last: the last began with the L2 holding "
        "what the second began with, a layer on, so every layer between repeats the second "
        "exactly",
        1: "more layers at once are too large for a run, so the rest repeat that one unchecked",
        layers: "all of them",
    }
    checked = (
        "the rest repeat the one before the last, which took the same cycles and bytes as the "
        "one before it"
    )
    return f"{counts[0]} of {layers} ({why.get(counts[0], checked)})" + "".join(
        f", {count} ({why.get(count, checked)})" for count in counts[1:]
    )


def _second_repeats(report: SimulationReport) -> bool:
    """Whether a run of the first PROVEN_LAYERS layers proves that every layer between the
    first and the last repeats the second exactly: the third (the last) began with the L2
    holding what the second began with, tensor for tensor a layer on (L2Cache.entry_state),
    and the host's launches, never late from the second layer on, were no less ahead of the
    device (a layer that began so runs as the second did, and leaves the next the same)."""
    layers = [layer_and_role(kernel.ops[0])[0] for kernel in report.kernels]
    second, third = layers.index(1), layers.index(2)
    entries = report.kernel_entries
    leads = [lead for _, lead in entries[second:]]
    return (
        entries[second][0] == entries[third][0]
        and min(leads) >= 0
        and entries[third][1] >= entries[second][1]
    )


def _step_time(
    step: Step,
    report: SimulationReport,
    clock_hz: float,
    count: int,
    repeat: int,
    layers: int,
) -> StepTime:
    """A step of a model of `layers` layers from a run of its first `count` (the last meets
    the head), the layers not simulated taken to repeat layer `repeat` of the run."""
    parts = _parts(report, clock_hz)
    total: dict[str, float] = {}
    for part, times in [*((p, 1) for p in parts.values()), (parts[repeat], layers - count)]:
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


def _parts(report: SimulationReport, clock_hz: float) -> dict[int | None, dict[str, float]]:
    """Cycles (of `clock_hz`, the chip's full clock, whatever clock a power cap held the run
    to), HBM bytes, joules and time per class of each layer's kernels (key: the layer index;
    None: the embedding and the head)."""
    parts: dict[int | None, dict[str, float]] = {}
    scale = clock_scale(report, clock_hz)
    for kernel in report.kernels:
        layer, _ = layer_and_role(kernel.ops[0])
        part = parts.setdefault(layer, dict.fromkeys(PART_KEYS, 0.0))
        hbm = kernel.traffic["HBM"]
        part["cycles"] += kernel.cycles * scale
        part["hbm_bytes"] += hbm.read_bytes + hbm.write_bytes
        for where, joules in (kernel.energy.parts() if kernel.energy else {}).items():
            part[ENERGY + where] = part.get(ENERGY + where, 0.0) + joules
        part["launch"] += kernel.launch_cycles * scale
        part[_time_class(kernel.ops)] += (kernel.cycles - kernel.launch_cycles) * scale
    return parts


def clock_scale(report: SimulationReport, clock_hz: float) -> float:
    """Cycles of `clock_hz` per cycle of the report's run: 1 exactly unless a power cap held
    the run to a lower clock (the report writes its clock as clock_hz / 1e9)."""
    full_ghz = clock_hz / 1e9
    return 1.0 if report.clock_ghz == full_ghz else full_ghz / report.clock_ghz


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
