"""A kernel that copies an earlier one is renamed, not lowered again (schedule/copies.py): the
renamed programs must be the ones lowering gives afresh, field for field."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from simulator.config.hardware import load_hardware
from simulator.config.model import load_model
from simulator.config.transformer import Step, step_workload
from simulator.config.workload import load_workload
from simulator.engine.world import simulate_program
from simulator.schedule.attention import lower_attention
from simulator.schedule.fusion import plan_kernels
from simulator.schedule.lower import lower, lower_matmul
from simulator.schedule.vector_kernel import lower_vector


def _fields(value, seen=None):
    """A value with every instruction (compared by identity) spelled out field by field; an
    object met before (instructions recur) is spelled out once."""
    seen = {} if seen is None else seen
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        spelled = seen.get(id(value))
        if spelled is None:
            spelled = seen[id(value)] = (
                type(value).__name__,
                *(
                    _fields(getattr(value, f.name), seen)
                    for f in dataclasses.fields(value)
                    if f.compare  # not what it is a copy of
                ),
            )
        return spelled
    if isinstance(value, dict):
        return tuple((k, _fields(v, seen)) for k, v in value.items())
    if isinstance(value, Sequence) and not isinstance(value, str):  # a copy's lazy cores too
        return tuple(_fields(v, seen) for v in value)
    return value


def _afresh(workload, sample):
    """Every kernel of the workload lowered on its own, nothing reused."""
    hw, programs = workload.hardware, []
    for kernel in plan_kernels(workload).kernels:
        if kernel.attention:
            programs += lower_attention(kernel, workload, hw)
        elif kernel.gemms:
            programs.append(lower_matmul(kernel, workload, hw, {}, sample))
        else:
            programs.append(lower_vector(kernel, workload, hw))
    return programs


def slow(*values):
    """A case of several seconds on two cores: CI runs it, -m "not slow" does not."""
    return pytest.param(*values, marks=pytest.mark.slow)


def _step(model, hardware, phase, tokens, context, layers=2, weights="fp16", kv="fp16", **more):
    batch, fusion = more.get("batch", 1), more.get("fusion", "auto")
    return step_workload(
        load_model(model),
        hardware,
        Step(phase, batch, tokens, context),
        layers,
        fusion,
        weights,
        kv,
    )


@pytest.mark.parametrize(
    "chip, model, phase, tokens, context, layers, weights, sample, more",
    [
        ("ascend910", "llama2-7b", "prefill", 64, 64, 2, "fp16", False, {}),
        slow("ascend910", "llama2-7b", "prefill", 512, 512, 2, "fp16", True, {}),
        slow("h100", "llama2-7b", "decode", 1, 4000, 2, "fp16", False, {}),  # split attention
        slow("h100", "mixtral-8x7b", "prefill", 32, 32, 1, "int8", False, {}),  # experts; int8 B
        # grouped-query attention, int8 K and V converted on chip, weights converted in L0B
        slow("h100", "llama3-8b", "decode", 1, 600, 2, "w8a16", False, {"kv": "int8", "batch": 2}),
        slow("ascend910", "qwen2-7b", "prefill", 48, 48, 2, "fp16", False, {"fusion": "none"}),
    ],
)
def test_a_copied_kernel_is_the_kernel_lowered_afresh(
    chip, model, phase, tokens, context, layers, weights, sample, more
):
    hardware = load_hardware(chip)
    workload = _step(model, hardware, phase, tokens, context, layers, weights, **more)
    lowered = lower(workload, plan_kernels(workload), sample)
    afresh = _afresh(workload, sample)
    assert [k.name for k in lowered.kernels] == [k.name for k in afresh]
    for kernel, fresh in zip(lowered.kernels, afresh):
        assert kernel.touched_tensors == fresh.touched_tensors, kernel.name  # a copy's: given
        assert kernel.instruction_count == fresh.instruction_count, kernel.name
        assert _fields(kernel) == _fields(fresh), kernel.name
    assert any(k.copy_of is not None for k in lowered.kernels)  # some were renamed
    if sample:
        assert any(k.sampling is not None for k in lowered.kernels)


def test_the_next_step_on_the_same_chip_reuses_the_last_steps_kernels():
    hardware = load_hardware("ascend910")
    first = lower(*_planned(_step("llama2-7b", hardware, "decode", 1, 300)))
    workload = _step("llama2-7b", hardware, "decode", 1, 400)
    second = lower(*_planned(workload))
    shared = [k for k in second.kernels if any(k is f for f in first.kernels)]
    assert shared and len(shared) < len(second.kernels)  # the GEMMs, not attention
    for kernel, fresh in zip(second.kernels, _afresh(workload, False)):
        assert _fields(kernel) == _fields(fresh), kernel.name


def test_a_replayed_copy_is_never_renamed():
    workload = _step("llama2-7b", load_hardware("ascend910"), "decode", 1, 300, layers=3)
    program = lower(*_planned(workload))
    trace = simulate_program(program, workload.hardware, 10**9)
    replayed = [program.kernels[span.index] for span in trace.kernels if span.replayed is not None]
    assert replayed and all(k.copy_of is not None for k in replayed)
    assert all(core is None for k in replayed for core in k.cores._renamed)
    last = trace.kernels[-1 - [s.replayed is not None for s in reversed(trace.kernels)].index(True)]
    tensors = {  # asked for, its records name its own tensors
        record.tensor for log in trace.pipes if log.kernel == last.index for record in log.records()
    }
    assert tensors - {None} == set(program.kernels[last.index].touched_tensors)


def test_a_workload_file_lowers_as_its_kernels_do_alone():
    workload = load_workload("workloads/llama7b_decode_layer.yaml")
    lowered = lower(*_planned(workload))
    assert _fields(lowered.kernels) == _fields(tuple(_afresh(workload, False)))


def _planned(workload):
    return workload, plan_kernels(workload)


TWO_MATMULS = """
name: names
hardware: ascend910
params: {{m: 64, k: 256, n: 256}}
dtype: fp16
tensors:
{tensors}
ops:
  - {{name: m1, op: matmul, inputs: [{first}], output: o1}}
  - {{name: m2, op: matmul, inputs: [{second}], output: o2}}
schedule:
  fusion: none
"""


@pytest.mark.parametrize(
    "activations, weights, first, second",
    [
        (["x", "x2"], ['"w x"'], 'x, "w x"', 'x2, "w x"'),  # `x`, renamed, ends `w x`
        (["a", "b"], ["a.partials", "c"], "a, a.partials", "b, c"),  # like a workspace
    ],
)
def test_a_copy_renames_whole_names_only(tmp_path, activations, weights, first, second):
    tensors = [f"  {name}: {{shape: [m, k]}}" for name in activations]
    tensors += [f"  {name}: {{shape: [k, n], kind: weight}}" for name in weights]
    path = tmp_path / "names.yaml"
    path.write_text(TWO_MATMULS.format(tensors="\n".join(tensors), first=first, second=second))
    workload = load_workload(str(path))
    lowered = lower(*_planned(workload))
    assert lowered.kernels[1].copy_of is lowered.kernels[0]
    assert _fields(lowered.kernels) == _fields(tuple(_afresh(workload, False)))
