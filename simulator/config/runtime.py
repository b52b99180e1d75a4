"""Runtime profiles (hw_models/runtimes/*.yaml): how the host drives the chip.

The same chip serves a request at very different speeds depending on the software above it:
an eager framework issues every kernel from Python, a captured CUDA graph replays a whole
step with one launch, and a serving engine spends host time on every step (scheduling,
preparing inputs, sampling, processing outputs) while the device waits. A profile states
those costs, each figure classed and cited as a hardware file's are (config/figures.py):

    name: cuda-graphs
    about: one CUDA graph per step, replayed with one launch
    launch: graph           # or a time: the host's cost to issue each kernel on a stream
    launch_overhead: 4us    # issuing the first kernel (a graph: the one launch)
    kernel_gap: 1.3us       # the device idles this long between dependent kernels
    step_host: 0us          # host time per engine step that the device waits for
    layer_host: 0us         # host time to issue one layer's ops (an eager framework)
    prefill_layer_host: 0us # host time per layer before each prefill, that the device waits for
    first_token: prefill    # or decode: the prefill stops a token short, a decode step runs it

`infer --runtime NAME` puts its launch figures in place of the hardware file's (which stay
what `run` uses, and what infer uses without --runtime) and adds `step_host` to every step,
prefill and decode, as its own time class. An eager framework runs Python and its dispatcher
for every op of every layer while the device runs behind it: a step takes the longer of its
device time and `layer_host` times the model's layers, the difference in the same class.
An engine that prepares each prefill layer by layer before the device starts (a TensorRT
engine re-infers its network's shapes when they change) adds `prefill_layer_host` times
the layers to the prefill. An engine whose prefill leaves the prompt's last token to its
first decode step (`first_token: decode`) gives its first token after both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import ConfigError, Problems, quote
from ..units import parse_time
from .figures import Figure, parse_figures
from .hardware import PRESET_DIR, Hardware
from .strict import Fields, as_name, read_yaml, shipped_name

RUNTIME_DIR = PRESET_DIR / "runtimes"
MAX_LAUNCH_S = 10e-3  # issuing one kernel (or a graph)
MAX_STEP_HOST_S = 1.0  # the host's own work on one engine step
MAX_LAYER_HOST_S = 0.1  # issuing one layer's ops
GRAPH = "graph"
PREFILL, DECODE = "prefill", "decode"


@dataclass(frozen=True)
class Runtime:
    """A runtime profile, its times in nanoseconds (they become cycles of a chip's clock)."""

    name: str
    source: str
    about: str
    graph: bool  # one launch per step (a captured graph) rather than one per kernel
    launch_overhead_ns: int  # host cost to issue a kernel, or the graph's one launch
    kernel_gap_ns: int  # device idle between a kernel and the next that waits on it
    step_host_ns: int  # host time per engine step the device waits for
    layer_host_ns: int = 0  # host time to issue one layer's ops, overlapping the device
    prefill_layer_host_ns: int = 0  # host time per layer before a prefill, not overlapped
    first_token: str = PREFILL  # the step whose logits give it: prefill, or DECODE (see above)
    figures: tuple[Figure, ...] = ()

    def on(self, hardware: Hardware) -> Hardware:
        """`hardware` as driven by this runtime: its launch figures replaced by ours."""
        return replace(
            hardware,
            launch_overhead_cycles=_cycles(self.launch_overhead_ns, hardware),
            kernel_gap_cycles=_cycles(self.kernel_gap_ns, hardware),
            graph_launch=self.graph,
        )

    def step_host_cycles(self, hardware: Hardware, phase: str, layers: int) -> int:
        """The host's time on a step of `phase` that the device waits for."""
        per_layer = self.prefill_layer_host_ns if phase == PREFILL else 0
        return _cycles(self.step_host_ns + per_layer * layers, hardware)

    def issue_cycles(self, hardware: Hardware, layers: int) -> int:
        """The host's time to issue a step of `layers` layers, which the device runs behind."""
        return _cycles(self.layer_host_ns * layers, hardware)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "file": self.source,
            "launch": GRAPH if self.graph else "stream",
            "launch_overhead_ns": self.launch_overhead_ns,
            "kernel_gap_ns": self.kernel_gap_ns,
            "step_host_ns": self.step_host_ns,
            "layer_host_ns": self.layer_host_ns,
            "prefill_layer_host_ns": self.prefill_layer_host_ns,
            "first_token": self.first_token,
        }


def _cycles(ns: int, hardware: Hardware) -> int:
    return math.ceil(round(ns * hardware.clock_hz / 1e9, 6))


def runtime_names() -> list[str]:
    return sorted(p.stem for p in RUNTIME_DIR.glob("*.yaml"))


def load_runtime(name_or_path: str) -> Runtime:
    """A shipped profile by name, or a runtime file by its path (ending in .yaml)."""
    text = str(name_or_path)
    if Path(text).suffix in (".yaml", ".yml"):
        path = Path(text)
        if not path.exists():
            raise ConfigError(text, [f"{quote(text)}: no such file"])
    elif shipped := shipped_name(text, runtime_names()):
        path = RUNTIME_DIR / f"{shipped}.yaml"
    else:
        raise ConfigError(
            text,
            [
                f"no runtime named {quote(text)} (runtimes: {', '.join(runtime_names())}; "
                "a runtime file's path ends in .yaml)"
            ],
        )
    return parse_runtime(read_yaml(path), str(path))


def parse_runtime(raw: dict, source: str) -> Runtime:
    problems = Problems(source)
    top = Fields(raw, "", problems)
    name = top.get("name", as_name)
    about = top.get("about", _text)
    graph = top.get("launch", _launch)
    launch = top.get("launch_overhead", _ns(MAX_LAUNCH_S))
    gap = top.get("kernel_gap", _ns(MAX_LAUNCH_S))
    step = top.get("step_host", _ns(MAX_STEP_HOST_S))
    layer = top.get("layer_host", _ns(MAX_LAYER_HOST_S), default=0)
    prefill = top.get("prefill_layer_host", _ns(MAX_LAYER_HOST_S), default=0)
    first = top.get("first_token", _first_token, default=PREFILL)
    top.used.update(("references", "figures"))  # read by parse_figures, as a preset's
    top.finish()
    figures = parse_figures({k: v for k, v in raw.items() if k != "about"}, problems, {})
    problems.raise_if_any()
    return Runtime(name, source, about, graph, launch, gap, step, layer, prefill, first, figures)


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a sentence saying which software this profile describes")
    return " ".join(value.split())


def _launch(value: object) -> bool:
    """`graph` (one launch replays the step) or `stream` (the host issues every kernel)."""
    if value not in (GRAPH, "stream"):
        raise ValueError(f"{quote(value)} must be graph or stream")
    return value == GRAPH


def _first_token(value: object) -> str:
    """`prefill` (its logits give the first token) or `decode` (the prompt's last token waits
    for the first decode step)."""
    if value not in (PREFILL, DECODE):
        raise ValueError(f"{quote(value)} must be {PREFILL} or {DECODE}")
    return str(value)


def _ns(maximum_s: float):
    def parse(value: object) -> int:
        if str(value).strip().endswith("cycles"):
            raise ValueError(f"{quote(value)}: a runtime has no clock; give a time, e.g. 3us")
        ns = parse_time(value, 1e9)
        if ns > maximum_s * 1e9:
            raise ValueError(
                f"{quote(value)} is beyond the {maximum_s * 1e3:g} ms this can sensibly take "
                "(is the unit right?)"
            )
        return ns

    return parse
