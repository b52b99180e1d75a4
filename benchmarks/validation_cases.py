"""The validation table's rows that informed the presets: each a published silicon measurement
(its ID a row of benchmarks/validation_sources.md, with the source and its conditions) and the
case types every row is written in.

These rows are `calibration`: presets' figures were chosen, or checked, while they were in
view, and a figure fitted to some of them names them (`python -m simulator figures --class
fitted`). The rows no figure was set against are in holdout_cases.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    id: str  # the row of benchmarks/validation_sources.md
    hardware: str
    dtype: str
    m: int
    n: int
    k: int
    measured_tflops: float
    source: str
    tiling: dict | None = None  # the tile shape the source measured, where it says
    transpose_b: bool = False  # B stored column-major (N x K)
    b_layout: str = "nd"  # "nz": B stored in Ascend's fractal layout (CATLASS zN)
    # the chip as the source ran it where the preset differs: (field, value) pairs
    overrides: tuple[tuple[str, object], ...] = ()
    # what the source timed: "call", the time a call takes, its launch included (the default,
    # where a source does not say); "kernel", a profiler's kernel time, which starts after
    # the launch the simulator waits on
    timed: str = "call"


def from_time(m: int, n: int, k: int, microseconds: float) -> float:
    """The TFLOPS of an M x N x K GEMM that took `microseconds`."""
    return 2 * m * n * k / (microseconds * 1e-6) / 1e12


def catlass_tile(l1: tuple[int, int, int], l0_k: int, acc_buffers: int = 2) -> dict:
    """A CATLASS L1TileShape <m, n, k> with its L0 k, as this simulator's tiling: its blocks
    dealt to the cores in turn, as CATLASS's block scheduler does (a tile whose accumulator
    fills L0C has one accumulator)."""
    m, n, k = l1
    return {
        "base": {"m": m, "n": n, "k": l0_k},
        "step": {"k": k // l0_k},
        "acc_buffers": acc_buffers,
        "split": "blocks",
    }


def catlass(
    id: str,
    m: int,
    n: int,
    k: int,
    microseconds: float,
    detail: str,
    l1: tuple[int, int, int],
    l0_k: int,
    acc_buffers: int = 2,
    **layout,
) -> Case:
    """A row of CATLASS's tuning guide (Atlas A2, 20 AIC, fp16): the time it measured with
    the tile it states."""
    return Case(
        id,
        "ascend910b",
        "fp16",
        m,
        n,
        k,
        from_time(m, n, k, microseconds),
        f"catlass matmul_fast_tuning, {microseconds} us{detail}",
        catlass_tile(l1, l0_k, acc_buffers),
        **layout,
    )


CASES = (
    Case(
        "G1",
        "a100",
        "bf16",
        1024,
        10240,
        5120,
        271.2,
        "ml-engineering MAMF table, cuBLAS via torch 2.6",
    ),
    Case(
        "G2",
        "h100",
        "bf16",
        2048,
        2048,
        13312,
        794.5,
        "ml-engineering MAMF table, cuBLAS via torch 2.7",
    ),
    Case("G6", "h100", "bf16", 8192, 8192, 8192, 797.8, "fast.cu README, cuBLAS kernel"),
    Case(
        "G7", "h100", "fp16", 4096, 4096, 4096, 760.04, "torch-performance-test-data #79, torch.mm"
    ),
    Case("G11a", "h100", "fp16", 2048, 2048, 2048, 515.2, "triton #2339, cuBLAS"),
    Case("G11b", "h100", "fp16", 2048, 8192, 8192, 721.6, "triton #2339, cuBLAS"),
    Case("V1", "h100", "bf16", 1, 43008, 5376, 3.072, "vllm PR #49363, F.linear GEMV"),
    Case("V2", "h100", "bf16", 1, 12288, 5376, 2.870, "vllm PR #49363, F.linear GEMV"),
    Case("V3a", "h100", "bf16", 128, 43008, 5376, 364.75, "vllm PR #49363, F.linear"),
    Case("V3b", "h100", "bf16", 256, 43008, 5376, 593.26, "vllm PR #49363, F.linear"),
    Case("V3c", "h100", "bf16", 64, 43008, 5376, 187.99, "vllm PR #49363, F.linear"),
    Case("G11c", "h100", "fp16", 2048, 4096, 4096, 613.7, "triton #2339, cuBLAS"),
    Case("G12", "h100", "fp16", 3072, 3072, 3072, 584.7, "triton #3672, cuBLAS"),
    catlass(
        "A2a",
        1024,
        576,
        6144,
        72.5,
        ", L1 tile 128x256x256",
        (128, 256, 256),
        64,
        1,
        transpose_b=True,
    ),
    catlass(
        "A2b",
        1024,
        576,
        6144,
        48.6,
        ", L1 tile 256x128x256",
        (256, 128, 256),
        64,
        1,
        transpose_b=True,
    ),
    catlass(
        "A3",
        20,
        6144,
        16384,
        139.6,
        ", L1 tile 32x320x128, B zN",
        (32, 320, 128),
        32,
        b_layout="nz",
    ),
    catlass(
        "A3nd", 20, 6144, 16384, 252.4, ", L1 tile 32x320x128, B row-major", (32, 320, 128), 32
    ),
    # swizzle <3,1>, not the guide's faster <4,1>: dealing blocks to cores in turn, as here,
    # gives the busiest core the same blocks (128 + 128 + 32 rows) as <3,1> does
    catlass(
        "A4",
        160,
        6144,
        2048,
        40.6,
        " (swizzle 3,1), L1 tile 128x256x256, B zN",
        (128, 256, 256),
        64,
        1,
        b_layout="nz",
    ),
)


@dataclass(frozen=True)
class KernelsCase:
    """Kernels other than one GEMM, and the time the source measured for them all; or, with
    `timed: last`, for the last of them alone, as a benchmark times one call of a kernel run
    back to back (the ops' time less the time of all but the last)."""

    id: str
    hardware: str
    dtype: str
    shape: str
    measured_us: float
    source: str
    tensors: dict
    ops: list
    fusion: str = "none"
    timed: str = "all"  # or "last"
    runtime: str | None = None  # the profile whose launch figures the kernels run with


def norm_then_quantize(tokens: int, microseconds: float) -> KernelsCase:
    """RMSNorm, then a static 8-bit quantisation, as two kernels (an fp8 output modelled as
    int8: the same bytes)."""
    return KernelsCase(
        f"E5.{tokens}",
        "h100",
        "bf16",
        f"{tokens} x 4096",
        microseconds,
        "sglang #32994, RMSNorm then FP8 quant, unfused",
        {
            "x": {"shape": [tokens, 4096]},
            "g": {"shape": [4096], "kind": "weight"},
            "s": {"shape": [1], "kind": "weight"},
        },
        [
            {"name": "norm", "op": "rmsnorm", "inputs": ["x", "g"], "output": "y"},
            {"name": "q", "op": "quantize", "inputs": ["y", "s"], "output": "z"},
        ],
    )


def flash_attention(seqlen: int, causal: bool, tflops: float) -> KernelsCase:
    """FlashAttention-3's forward pass on an H100 SXM5 at head dim 128, as its paper measured
    it: batch x seqlen = 16k tokens, 16 heads (hidden 2048), TFLOPS counting 4·s²·d a head
    (half of it when causal). Fused here as FlashAttention (QK^T, softmax, PV, one kernel)."""
    batch, heads, head_dim = 16384 // seqlen, 16, 128
    flops = 4 * batch * heads * seqlen**2 * head_dim / (2 if causal else 1)
    kind = "causal" if causal else "non-causal"
    shape = [batch * heads, seqlen, head_dim]
    return KernelsCase(
        f"F{seqlen}{kind[0]}",
        "h100",
        "bf16",
        f"{batch}x{heads}x{seqlen}x{head_dim}",
        flops / (tflops * 1e12) * 1e6,
        f"FlashAttention-3 paper fig. 5, {kind} fwd, {tflops:.0f} TFLOPS",
        {"q": {"shape": shape}, "k": {"shape": shape}, "v": {"shape": shape}},
        attention_ops(causal),
        fusion="auto",
    )


def attention_ops(causal: bool) -> list[dict]:
    """Attention as a workload file writes it: o = softmax(q kᵀ) v over tensors q, k, v
    (batch x rows x head_dim), which fusion: auto forms into one FlashAttention kernel."""
    return [
        {
            "name": "qk",
            "op": "batch_matmul",
            "inputs": ["q", "k"],
            "output": "s",
            "attrs": {"transpose_b": True},
        },
        {
            "name": "softmax",
            "op": "softmax",
            "inputs": ["s"],
            "output": "p",
            "attrs": {"causal": causal},
        },
        {"name": "pv", "op": "batch_matmul", "inputs": ["p", "v"], "output": "o"},
    ]


KERNEL_CASES = (
    norm_then_quantize(2048, 22.27),
    norm_then_quantize(8192, 110.16),
    norm_then_quantize(16384, 217.1),
    *(
        flash_attention(seqlen, causal, tflops)
        for causal, row in ((False, (467, 565, 625, 638)), (True, (292, 423, 521, 579)))
        for seqlen, tflops in zip((512, 1024, 2048, 4096), row)
    ),
)


# what a request row measured, and its unit
REQUEST_METRICS = {
    "ttft": "ms",  # time to the first token (the prefill)
    "tpot": "ms",  # mean time per output token after the first
    "e2e": "ms",  # the whole request
    "energy": "J",  # joules per output token (decode), the whole group of chips
}


@dataclass(frozen=True)
class RequestCase:
    """A whole model's request (`infer`) and what the source measured of it: a time, or the
    energy per output token."""

    id: str
    hardware: str
    model: str
    prompt: int
    generate: int
    metric: str  # a key of REQUEST_METRICS
    measured: float  # in the metric's unit
    source: str
    dtype: str = "fp16"  # infer's weights (bf16: fp16's bytes; int8: W8A8; w8a16: weight-only)
    batch: int = 1
    chips: int = 1  # in tensor parallel
    overrides: tuple[tuple[str, object], ...] = ()  # as Case's
    # the runtime profile of the engine the source ran (hw_models/runtimes; None: the
    # hardware file's own launch figures, for an engine no profile describes)
    runtime: str | None = None

    @property
    def shape(self) -> str:
        group = f" x{self.chips}" if self.chips > 1 else ""
        batch = f" b{self.batch}" if self.batch > 1 else ""
        return f"{self.model} {self.prompt}/{self.generate}{batch}{group}"


REQUEST_CASES = (
    RequestCase(
        "D1",
        "a100",
        "llama2-7b",
        5,
        200,
        "tpot",
        1e3 / 104.9,
        "gpt-fast README, bf16, bs 1",
        runtime="cuda-graphs",
    ),
    RequestCase(
        "D5a",
        "a100",
        "llama2-7b",
        128,
        0,
        "ttft",
        16.0,
        "TensorRT-LLM v0.5 performance.md, fp16, bs 1",
        runtime="trtllm-session",
    ),
    RequestCase(
        "D5b",
        "a100",
        "llama2-7b",
        2048,
        0,
        "ttft",
        133.0,
        "TensorRT-LLM v0.5 performance.md, fp16, bs 1",
        runtime="trtllm-session",
    ),
)

CALIBRATION: tuple = CASES + KERNEL_CASES + REQUEST_CASES


# what a serving row measured, and its unit (the mean over the steady state's requests)
SERVING_METRICS = {
    "ttft": "ms",  # time to the first token, queueing included
    "itl": "ms",  # time per output token after the first
    "tput": "t/s",  # output tokens a second, the whole deployment's
}


@dataclass(frozen=True)
class ServingCase:
    """A deployment serving a closed loop of clients (`serve --concurrency`: each sends its
    next request, of fixed lengths, when its last one ends) and a mean the source measured
    over its steady state. Rows of one deployment are served together, one run a
    concurrency."""

    id: str
    hardware: str
    model: str
    prompt: int
    generate: int
    concurrency: int
    metric: str  # a key of SERVING_METRICS
    measured: float  # in the metric's unit
    source: str
    chips: int = 1  # in tensor parallel
    dtype: str = "fp16"  # the weights, as infer's
    kv_cache: str = "fp16"
    policy: str = "continuous"
    max_step_tokens: int | None = None
    runtime: str | None = None

    @property
    def shape(self) -> str:
        group = f" x{self.chips}" if self.chips > 1 else ""
        return f"{self.model} {self.prompt}/{self.generate} c{self.concurrency}{group}"

    @property
    def deployment(self) -> tuple:
        """What rows served together share."""
        return (
            self.hardware,
            self.model,
            self.prompt,
            self.generate,
            self.chips,
            self.dtype,
            self.kv_cache,
            self.policy,
            self.max_step_tokens,
            self.runtime,
        )
