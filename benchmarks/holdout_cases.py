"""The validation table's holdout rows: published silicon measurements that no preset figure
was set against. Each lands in a commit before any figure it could check changes, and no
figure may name one as a row it was fitted on (tests/test_figures.py checks), so their error
is the one a user should believe. Sources and conditions: benchmarks/validation_sources.md,
section 9 (the IDs are its rows).

These rows landed on 2026-12-05, with the figures as they were then; they include shapes,
chips and engines the calibration rows never covered (tensor parallel, batches, Llama 3,
mixtral, H200, a 24-core 910B, weight-streaming GEMVs on 910B, energy), chosen for being
stated clearly, not for agreeing with the model. The serving rows (SERVING) landed on
2026-12-07, the same way, with `serve`.
"""

from __future__ import annotations

from dataclasses import replace

from validation_cases import (
    Case,
    KernelsCase,
    RequestCase,
    ServingCase,
    attention_ops,
    catlass,
    from_time,
    norm_then_quantize,
)

# the 910B2 some sources ran: the 910B3 preset's AI core with 24 of them (pto-isa's cost
# model SOC_SPECS: 910B2 24 AIC at 1.8 GHz; npu-smi in GroundUpScale's logs: 64 GB HBM)
B2 = (("cores", 24),)


def h100(id: str, dtype: str, m: int, n: int, k: int, tflops: float, source: str) -> Case:
    return Case(id, "h100", dtype, m, n, k, tflops, source)


GEMMS = (
    h100("G6b", "bf16", 6144, 6144, 6144, 741.1, "fast.cu README, cuBLAS kernel"),
    h100("G7b", "fp16", 8192, 8192, 8192, 736.19, "torch-performance-test-data #79, torch.mm"),
    h100("G7c", "fp16", 2048, 2048, 2048, 645.1, "torch-performance-test-data #79, torch.mm"),
    h100("G7d", "fp16", 1024, 1024, 1024, 179.1, "torch-performance-test-data #79, torch.mm"),
    h100("G11d", "fp16", 2048, 512, 512, 102.6, "triton #2339, cuBLAS"),
    h100("G11e", "fp16", 2048, 1024, 1024, 243.1, "triton #2339, cuBLAS"),
    h100("G12c", "fp16", 2560, 2560, 2560, 533.4, "triton #3672, cuBLAS"),
    h100("G12d", "fp16", 2688, 2688, 2688, 433.4, "triton #3672, cuBLAS (its dip)"),
    h100("V3d", "bf16", 16, 43008, 5376, 48.33, "vllm PR #49363, F.linear"),
    h100("X1", "bf16", 4096, 4096, 4096, 783.3, "XLA sm_90 matmul table"),
    h100("X4", "bf16", 1024, 4096, 4096, 738.5, "XLA sm_90 matmul table"),
    h100("X5", "bf16", 256, 4096, 4096, 412.0, "XLA sm_90 matmul table"),
    h100("X7", "bf16", 4096, 4096, 512, 543.1, "XLA sm_90 matmul table"),
    h100("X9", "bf16", 512, 256, 256, 11.46, "XLA sm_90 matmul table"),
    Case("C1", "a100", "fp16", 3456, 4096, 8192, 235.1, "CUTLASS profiler doc, 256x128x32 x3"),
    Case("HH1", "a100", "fp16", 8192, 8192, 8192, 258.0, "thonking.ai (H. He), cuBLAS, randn"),
    catlass(
        "K1",
        20,
        6144,
        16384,
        181.4,
        ", default L1 tile (m to 32), B zN",
        (32, 256, 256),
        64,
        b_layout="nz",
    ),
    catlass(
        "K2", 20, 6144, 16384, 238.8, ", default L1 tile (m to 32), B row-major", (32, 256, 256), 64
    ),
    *(
        Case(
            f"K{3 + i}",
            "ascend910b",
            "fp16",
            size,
            size,
            size,
            tflops,
            "torch-performance-test-data, 910B2 torch.mm (24 AIC)",
            overrides=B2,
        )
        for i, (size, tflops) in enumerate(
            ((1024, 98.1), (2048, 251.0), (4096, 314.5), (8192, 305.5))
        )
    ),
    Case(
        "K7",
        "ascend910b",
        "fp16",
        5416,
        1408,
        6144,
        from_time(5416, 1408, 6144, 368.1),
        "pto-isa gemm_ar README, 368.1 us on 24 AIC, base 128x256x64, step k 4",
        {"base": {"m": 128, "n": 256, "k": 64}, "step": {"k": 4}, "acc_buffers": 1},
        transpose_b=True,
        overrides=B2,
    ),
    Case(
        "Q1",
        "ascend910b",
        "bf16",
        1,
        13824,
        5120,
        from_time(1, 13824, 5120, 110.0),
        "vllm-ascend #4167, decode gate_up MatMulV2, ~110 us",
        transpose_b=True,
    ),
    Case(
        "Q2",
        "ascend910b",
        "bf16",
        1,
        5120,
        6912,
        from_time(1, 5120, 6912, 60.0),
        "vllm-ascend #4167, decode down MatMulV2, ~60 us",
        transpose_b=True,
    ),
)


# DeepGEMM's dense FP8 GEMMs, DG1-DG18 in its table's order (README at 55ab91f, 2025-03-25:
# H800 SXM5, NVCC 12.8): fp8 e4m3 in, bf16 out, B stored N x K; run on the h100 preset,
# whose SMs, clock and HBM3 the H800 SXM5 shares (it differs in NVLink). Its fine-grained
# scaling (per 1 x 128 of A and 128 x 128 of B, promoted in the CUDA cores) is DeepGEMM's
# own; the table is taken whole. Its tests time the kernel alone (`bench_kineto`: the torch
# profiler's time of the fp8_gemm kernel, L2 flushed between runs), so the launch is not in it.
DEEPGEMM_NK = ((2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048))
DEEPGEMM_TFLOPS = {  # M: TFLOPS at each N x K above
    64: (206, 289, 219, 336, 287, 295),
    128: (352, 535, 358, 645, 533, 510),
    4096: (1009, 1125, 751, 1426, 1265, 1168),
}
DEEPGEMM = tuple(
    Case(
        f"DG{i + 1}",
        "h100",
        "fp8",
        m,
        n,
        k,
        tflops,
        "DeepGEMM README (55ab91f), H800 SXM5, FP8, kernel time",
        transpose_b=True,
        timed="kernel",
    )
    for i, (m, (n, k), tflops) in enumerate(
        (m, nk, tflops)
        for m, row in DEEPGEMM_TFLOPS.items()
        for nk, tflops in zip(DEEPGEMM_NK, row)
    )
)


def paged_decode(context: int, microseconds: float) -> KernelsCase:
    """FlashAttention-3's decode over a KV cache on an H100: batch 16, 32 heads of 128, one
    query each, as a fused attention over the cached keys and values."""
    query, cache = [16 * 32, 1, 128], {"shape": [16 * 32, context, 128], "kind": "cache"}
    return KernelsCase(
        f"FD{context}",
        "h100",
        "bf16",
        f"16x32x1x{context}x128",
        microseconds,
        "flash-attention #1572, FA3 paged decode",
        {"q": {"shape": query}, "k": cache, "v": cache},
        attention_ops(causal=False),
        fusion="auto",
    )


def repeated_scale(id: str, chip: str, doubles: int, microseconds: float) -> KernelsCase:
    """gpu-benches' repeated small kernels: a scale (B = A x 0.25) of `doubles` doubles,
    called 10,000 times back to back in one CUDA graph (A to B, then B to A), timed per call,
    the fastest of its block sizes. Modelled as an elementwise kernel over fp16 of the same
    bytes, the last of two in a chain (its input the first's output, as each call's is the
    call before's), launched as in a CUDA graph: the time the second adds."""
    chain = [
        {"name": "first", "op": "relu", "inputs": ["a"], "output": "b"},
        {"name": "second", "op": "relu", "inputs": ["b"], "output": "c"},
    ]
    file = {"a100": "a100_80_graph", "h200": "h200_graph"}[chip]
    return KernelsCase(
        id,
        chip,
        "fp16",
        f"scale {doubles * 16 / 1e6:.2f} MB",
        microseconds,
        f"gpu-benches gpu-small-kernels/{file}.txt, {doubles:,} doubles, CUDA graph",
        {"a": {"shape": [doubles, 4]}},
        chain,
        timed="last",
        runtime="cuda-graphs",
    )


KERNELS = (
    KernelsCase(
        "E3",
        "h200",
        "bf16",
        "512 x 12288 x 3072",
        65.505,
        "sglang #34350, FLUX up-proj + GELU, cuBLASLt epilogue",
        {
            "x": {"shape": [512, 3072]},
            "w": {"shape": [3072, 12288], "kind": "weight"},
            "b": {"shape": [12288], "kind": "weight"},
        },
        [
            {"name": "mm", "op": "matmul", "inputs": ["x", "w"], "output": "y"},
            {"name": "bias", "op": "bias_add", "inputs": ["y", "b"], "output": "yb"},
            {"name": "act", "op": "gelu", "inputs": ["yb"], "output": "z"},
        ],
        fusion="auto",
    ),
    replace(
        norm_then_quantize(8192, 49.283),
        id="E5f.8192",
        source="sglang #32994, RMSNorm + FP8 quant, fused",
        fusion="auto",
    ),
    paged_decode(2000, 292.0),
    paged_decode(4000, 567.2),
    # each file's smallest size, the size its bandwidth peaks at (both buffers in L2) and
    # its largest; the files give GB/s in whole numbers (the smallest sizes' times +-1%)
    repeated_scale("SK1", "a100", 4096, 1.337),
    repeated_scale("SK2", "a100", 1418925, 7.278),
    repeated_scale("SK3", "a100", 38831060, 357.9),
    repeated_scale("SK4", "h200", 4096, 1.260),
    repeated_scale("SK5", "h200", 2210918, 6.994),
    repeated_scale("SK6", "h200", 77308797, 363.9),
)


def gpt_fast(
    id: str, model: str, chips: int, tokens_per_s: float, weights: str = "bf16", note: str = ""
) -> RequestCase:
    """gpt-fast's README: A100-80GB SXM at 330 W, bf16, batch 1, a 5-token prompt, 200
    tokens (its default); its tokens/s over the whole generation, as a time per token. Its
    8-bit rows quantize the weights alone, per channel (W8A16: `--weights w8a16`); they
    landed run as W8A8, before weight-only quantization was modelled."""
    return RequestCase(
        id,
        "a100",
        model,
        5,
        200,
        "tpot",
        1e3 / tokens_per_s,
        f"gpt-fast README, {tokens_per_s} tok/s, 330 W{note}",
        weights,
        chips=chips,
        runtime="cuda-graphs",
    )


def lmdeploy(id: str, model: str, batch: int, prompt: int, metric: str, ms: float, chips: int = 1):
    """LMDeploy TurboMind's A100-80G static-batch table (v0.1.0a1, fp16, 128 tokens out):
    first-token latency at batch 1, the median per-token latency at any batch, on the
    profile of that engine (its first token comes out of a decode step)."""
    what = "first token" if metric == "ttft" else "p50 per token"
    return RequestCase(
        id,
        "a100",
        model,
        prompt,
        128,
        metric,
        ms,
        f"LMDeploy a100_fp16.md, {what}",
        batch=batch,
        chips=chips,
        runtime="turbomind-v01a1",
    )


def trt_ttft(id: str, model: str, prompt: int, ms: float, chips: int = 1) -> RequestCase:
    """TensorRT-LLM v0.8.0 performance.md, A100 fp16, batch 1: the first token's latency, on
    the profile of the C++ GptSession its gptSessionBenchmark ran."""
    return RequestCase(
        id,
        "a100",
        model,
        prompt,
        1,
        "ttft",
        ms,
        "TensorRT-LLM v0.8.0, first token",
        chips=chips,
        runtime="trtllm-session",
    )


def vllm(
    id, hardware, model, batch, prompt, generate, ms, source, chips=1, runtime=None
) -> RequestCase:
    """vLLM's benchmark_latency: one generate() over a batch, end to end, on the runtime
    profile of the source's vLLM version (None: a version no profile describes)."""
    return RequestCase(
        id,
        hardware,
        model,
        prompt,
        generate,
        "e2e",
        ms,
        source,
        "bf16",
        batch,
        chips,
        runtime=runtime,
    )


REQUESTS = (
    gpt_fast("R1", "llama2-7b", 4, 254.02),
    gpt_fast("R2", "llama2-7b", 8, 328.43),
    gpt_fast("R3", "llama2-70b", 2, 21.32),
    gpt_fast("R4", "llama2-70b", 8, 62.50),
    gpt_fast("R5", "mixtral-8x7b", 2, 96.67),
    gpt_fast("R6", "mixtral-8x7b", 8, 227.82),
    gpt_fast("R7", "llama3-8b", 1, 93.89, note=", Llama-3.1-8B (llama3-8b's shapes)"),
    gpt_fast("W1", "llama2-7b", 1, 155.58, "w8a16", ", 8-bit weight-only"),
    gpt_fast("W2", "llama2-70b", 1, 19.13, "w8a16", ", 8-bit weight-only"),
    gpt_fast("W3", "llama3-8b", 1, 137.64, "w8a16", ", Llama-3.1-8B 8-bit weight-only"),
    lmdeploy("L1", "llama2-7b", 1, 2048, "ttft", 139.0),
    lmdeploy("L2", "llama2-13b", 1, 128, "ttft", 40.0),
    lmdeploy("L3", "llama2-13b", 1, 128, "tpot", 17.0),
    lmdeploy("L4", "llama2-13b", 1, 2048, "ttft", 242.0),
    lmdeploy("L5", "llama2-70b", 1, 128, "ttft", 74.0, chips=4),
    lmdeploy("L6", "llama2-70b", 1, 128, "tpot", 29.0, chips=4),
    trt_ttft("T1", "mistral-7b", 128, 16.4),
    trt_ttft("T2", "mistral-7b", 2048, 128.7),
    trt_ttft("T3", "llama2-70b", 128, 35.6, chips=8),
    trt_ttft("T4", "llama2-70b", 2048, 235.1, chips=8),
    vllm("N1", "h200", "llama3-8b", 8, 32, 128, 833.4, "vLLM nightly CI build 9515", 1, "vllm-v06"),
    vllm(
        "N2", "h200", "llama3-70b", 8, 32, 128, 2077.5, "vLLM nightly CI build 9515", 4, "vllm-v06"
    ),
    vllm(
        "N3",
        "h200",
        "mixtral-8x7b",
        8,
        32,
        128,
        1917.4,
        "vLLM nightly CI build 9515",
        2,
        "vllm-v06",
    ),
    vllm("P1", "h100", "mixtral-8x7b", 1, 1000, 50, 459.0, "vLLM PR #2542", 8, "vllm-v0"),
    vllm("P3", "a100", "mixtral-8x7b", 1, 1000, 50, 762.1, "vLLM PR #3240", 2, "vllm-v0"),
    vllm("P5", "h100", "llama3-8b", 1, 256, 32, 236.0, "vLLM PR #23197", runtime="vllm-v1"),
    RequestCase(
        "J1",
        "a100",
        "llama2-7b",
        128,
        420,
        "energy",
        1828.77 / 420.07,
        "ML.ENERGY v1, FastChat fp16, batch 1, 1828.77 J / 420.07 tokens",
        runtime="eager",
    ),
    RequestCase(
        "J2",
        "a100",
        "llama2-13b",
        128,
        379,
        "energy",
        3050.13 / 379.49,
        "ML.ENERGY v1, FastChat fp16, batch 1, 3050.13 J / 379.49 tokens",
        runtime="eager",
    ),
    # the same runs' times: a response's latency over its mean 420.07 and 379.49 tokens
    RequestCase(
        "J1t",
        "a100",
        "llama2-7b",
        128,
        420,
        "e2e",
        9442.1,
        "ML.ENERGY v1, FastChat fp16, batch 1, 9.4421 s per response",
        runtime="eager",
    ),
    RequestCase(
        "J2t",
        "a100",
        "llama2-13b",
        128,
        379,
        "e2e",
        12984.2,
        "ML.ENERGY v1, FastChat fp16, batch 1, 12.9842 s per response",
        runtime="eager",
    ),
)


def nim(concurrency: int, ttft_ms: float, itl_ms: float, tokens_per_s: float) -> tuple:
    """NVIDIA NIM 1.8.0's Llama-3.3-70B-Instruct, fp8 TP2 on 2 x H100 80G, 5,000 tokens in
    and 500 out at a fixed concurrency: its mean TTFT, ITL and output tokens a second. Run as
    TensorRT-LLM's in-flight batching (prompts and decodes in one step: `chunked`, at its
    default 8,192 tokens a step), with ModelOpt's FP8 checkpoint's fp8 KV cache and CUDA
    graphs; llama3-70b has Llama 3.3's shapes."""
    source = f"NIM 1.8.0 benchmarks, fp8 TP2, concurrency {concurrency}"
    deployment = dict(
        chips=2,
        dtype="fp8",
        kv_cache="fp8",
        policy="chunked",
        max_step_tokens=8192,
        runtime="cuda-graphs",
    )
    return tuple(
        ServingCase(
            f"S{concurrency}-{metric}",
            "h100",
            "llama3-70b",
            5000,
            500,
            concurrency,
            metric,
            measured,
            source,
            **deployment,
        )
        for metric, measured in (("ttft", ttft_ms), ("itl", itl_ms), ("tput", tokens_per_s))
    )


SERVING = (
    *nim(1, 406.77, 18.58, 51.67),
    *nim(5, 546.7, 21.83, 218.48),
    *nim(25, 688.69, 38.75, 623.4),
    *nim(50, 834.51, 59.73, 814.37),
)

HOLDOUT: tuple = GEMMS + DEEPGEMM + KERNELS + REQUESTS + SERVING

# Held out too, but not run yet: their prefills (4,096 to 32,000 tokens in one batch) take
# more than 20 GB of memory today, more than a 24 GB machine can spare (issue 23 bounds it).
# They join the table with bounded memory, if no figure they check has changed by then.
WAITING = ("L7", "L8", "L9", "T5", "P2", "P4", "P6")
