"""A model config → the workload of one forward step through its first layers, written in
the workload file's own vocabulary and checked by the same loader, so a generated layer obeys
every rule a hand-written one does (`python -m simulator infer` runs them).

A step: the embedding gather of its new tokens; each decoder layer; the final norm and the
LM head (at prefill, on each sequence's last token only, as serving engines do). A layer:

    RMSNorm → Q, K, V projections (+ bias where the model has one) → RoPE on Q and K
    → attention: QK^T, softmax, PV. Grouped-query attention runs as one batch per key/value
      head, the query heads that share it stacked along M, so each K and V block is read once
      for its whole group. Decode reads the cache of the positions attended to; prefill
      attends over the prompt's own K and V and computes the whole causal score matrix (the
      mask is applied in the softmax, as an unfused kernel does).
    → O projection, + residual → RMSNorm → MLP (SwiGLU: gate, up, SiLU · up, down; or up,
      GELU, down), + residual.

K and V of the new tokens are written to HBM: that is the cache write. With int8 weights
each projection runs W8A8, as workloads/ffn_decode_int8.yaml: the activation is quantized
once per input, the Cube multiplies int8, each output channel is dequantized with its scale.
With w8a16 weights (weight-only) the activation stays fp16: the int8 weight is converted to
fp16 as each block reaches the Cube, and each output channel is multiplied by its scale. With
fp8 weights each projection runs W8A8 in fp8 (e4m3), where the Cube has an fp8 mode: the
activation is quantized to fp8 once per input, the Cube multiplies fp8 into fp16, and each
output channel is multiplied by its scale.

An int8 or fp8 KV cache holds K and V in that dtype with one scale per tensor (folded into
the softmax's scale and the output, so it costs nothing to apply): each new K and V row is
quantized as it is written, and decode's attention reads the cached blocks narrow and
converts them to fp16 on chip before the matrix unit, on any chip (vLLM's fp8 cache on an
A100 does the same). A prefill attends over its own fp16 K and V and writes the quantized
copies to the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .hardware import Hardware
from .model import ModelConfig
from .workload import Workload, parse_workload

WEIGHT_DTYPES = ("fp16", "int8", "w8a16", "fp8")  # int8: W8A8; w8a16: int8 weights alone
WEIGHT_DTYPE = {"int8": "int8", "w8a16": "int8", "fp8": "fp8"}  # the weights' dtype
KV_CACHE_DTYPES = ("fp16", "fp8", "int8")
EXPERTS = "experts_"  # names of a mixture of experts' ops and weights: l0_experts_gate...


def expert_rows(model: ModelConfig, step: Step) -> tuple[int, int]:
    """With routing taken as even (see _Builder.experts): the experts a step's tokens reach,
    and the rows each runs, the most any of them serves."""
    choices = step.tokens * model.experts_per_token
    active = min(model.experts, choices)
    return active, -(-choices // active)


def routing(model: ModelConfig, step: Step) -> str:
    """How a step's tokens are taken to reach the experts, for the report."""
    choices = step.tokens * model.experts_per_token
    active, rows = expert_rows(model, step)
    fewest = choices // active
    share = f"{rows} token{'s' * (rows != 1)}"
    if fewest != rows:
        share = f"{fewest}-{rows} tokens (padded to {rows})"
    return (
        f"{step.phase}: {step.tokens:,} token{'s' * (step.tokens != 1)} x "
        f"{model.experts_per_token} choices reach {active} of {model.experts} experts, "
        f"{share} each"
    )


@dataclass(frozen=True)
class Step:
    """One forward pass: `batch` sequences each adding `new_tokens` (the prompt at prefill,
    one at decode), the last of them at position `context`."""

    phase: str  # prefill or decode
    batch: int
    new_tokens: int
    context: int

    @property
    def tokens(self) -> int:
        return self.batch * self.new_tokens


def step_workload(
    model: ModelConfig,
    hardware: Hardware,
    step: Step,
    layers: int,
    fusion: str = "none",
    weights: str = "fp16",
    kv_cache: str = "fp16",
) -> Workload:
    """The workload of `step` through the model's first `layers` decoder layers, then the
    final norm and the LM head, its weights and its KV cache in the dtypes given."""
    builder = _Builder(model, step, weights, kv_cache)
    x = builder.embedding()
    for layer in range(layers):
        x = builder.layer(layer, x)
    builder.head(x)
    raw = {
        "name": f"{model.name}-{step.phase}@{step.context}",
        "hardware": hardware.name,
        "dtype": "fp16",
        "tensors": builder.tensors,
        "ops": builder.ops,
        "schedule": {"fusion": fusion},
    }
    return parse_workload(raw, f"{model.source} ({step.phase}, context {step.context})", hardware)


def layer_and_role(op_name: str) -> tuple[int | None, str]:
    """Which layer a generated op belongs to (None: the embedding or the head) and its role
    there ('q_proj', 'qk'...)."""
    head, _, role = op_name.partition("_")
    if head[:1] == "l" and head[1:].isdigit() and role:
        return int(head[1:]), role
    return None, op_name


class _Builder:
    """Tensors and ops in the workload file's form, named per layer (l0_q_proj...)."""

    def __init__(self, model: ModelConfig, step: Step, weights: str, kv_cache: str):
        self.model, self.step, self.weights, self.kv_cache = model, step, weights, kv_cache
        self.tensors: dict[str, dict[str, Any]] = {}
        self.ops: list[dict[str, Any]] = []
        self.quantized: dict[str, str] = {}  # activation -> its int8 copy (W8A8)

    def tensor(self, name: str, shape: list[int], **fields: Any) -> str:
        self.tensors[name] = {"shape": shape, **fields}
        return name

    def op(self, name: str, op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        entry: dict[str, Any] = {"name": name, "op": op, "inputs": inputs, "output": output}
        if attrs:
            entry["attrs"] = attrs
        self.ops.append(entry)
        return output

    def embedding(self) -> str:
        m = self.model
        table = self.tensor("embed", [m.vocab, m.hidden], kind="weight")
        return self.op("embed_lookup", "gather", [table], "x0", rows=self.step.tokens)

    def linear(
        self, name: str, x: str, rows: int, cols: int, bias: bool = False, experts: int = 0
    ) -> str:
        """x · W (+ b), W stored in the fractal layout deployed models use; with `experts`,
        x is [experts, tokens, rows] and W one matrix per expert, stacked."""
        shape, op = ([experts, rows, cols], "batch_matmul") if experts else ([rows, cols], "matmul")
        if self.weights == "fp16":
            w = self.tensor(f"{name}_w", shape, kind="weight", layout="nz")
            return self._bias(name, self.op(name, op, [x, w], f"{name}_out"), cols, bias)
        dtype = WEIGHT_DTYPE[self.weights]
        w = self.tensor(f"{name}_w", shape, kind="weight", dtype=dtype, layout="nz")
        scale = self.tensor(f"{name}_scale", [cols], kind="weight")
        if self.weights == "w8a16":  # weight-only: the fp16 activation meets the int8 weight
            acc = self.op(name, op, [x, w], f"{name}_acc")
            y = self.op(f"{name}_scaled", "mul", [acc, scale], f"{name}_out")
        else:  # W8A8: each input quantized once, for every projection that reads it
            if x not in self.quantized:
                to = {} if dtype == "int8" else {"to": dtype}
                self.quantized[x] = self.op(f"{name}_quant", "quantize", [x], f"{x}_q", **to)
            if dtype == "int8":  # int8 by int8 into int32, dequantized per channel
                acc = self.op(name, op, [self.quantized[x], w], f"{name}_acc")
                y = self.op(f"{name}_dequant", "dequantize", [acc, scale], f"{name}_out")
            else:  # fp8 by fp8 into fp16, scaled per channel
                acc = self.op(name, op, [self.quantized[x], w], f"{name}_acc", to="fp16")
                y = self.op(f"{name}_scaled", "mul", [acc, scale], f"{name}_out")
        return self._bias(name, y, cols, bias)

    def _bias(self, name: str, y: str, cols: int, bias: bool) -> str:
        if not bias:
            return y
        b = self.tensor(f"{name}_bias", [cols], kind="weight")
        return self.op(f"{name}_add_bias", "bias_add", [y, b], f"{name}_biased")

    def norm(self, name: str, x: str) -> str:
        gain = self.tensor(f"{name}_gain", [self.model.hidden], kind="weight")
        return self.op(name, "rmsnorm", [x, gain], f"{name}_out")

    def layer(self, index: int, x: str) -> str:
        m, s = self.model, self.step
        p = f"l{index}_"
        group, kv, hd = m.heads // m.kv_heads, m.kv_heads, m.head_dim
        xn = self.norm(f"{p}attn_norm", x)
        # at decode nothing in the step reads the new K and V rows: they are outputs, written
        # to HBM (the cache write); at prefill the attention reads them back too
        q = self.linear(f"{p}q_proj", xn, m.hidden, m.heads * hd, m.qkv_bias)
        q = self.op(f"{p}q_rope", "rope", [q], f"{p}q")
        k = self.linear(f"{p}k_proj", xn, m.hidden, kv * hd, m.qkv_bias)
        k = self.op(f"{p}k_rope", "rope", [k], f"{p}k")
        v = self.linear(f"{p}v_proj", xn, m.hidden, kv * hd, m.qkv_bias)
        if self.kv_cache != "fp16":  # the rows written to the cache are quantized ones
            self.op(f"{p}k_quant", "quantize", [k], f"{p}k_cached", to=self.kv_cache)
            self.op(f"{p}v_quant", "quantize", [v], f"{p}v_cached", to=self.kv_cache)
        cached = {} if self.kv_cache == "fp16" else {"dtype": self.kv_cache}
        heads = s.batch * kv
        qh = self.op(
            f"{p}q_heads", "reshape", [q], f"{p}qh", shape=[heads, group * s.new_tokens, hd]
        )
        if s.phase == "decode":
            attended = m.attended(s.context)
            keys = self.tensor(f"{p}k_cache", [heads, attended, hd], kind="cache", **cached)
            values = self.tensor(f"{p}v_cache", [heads, attended, hd], kind="cache", **cached)
        else:
            keys = self.op(f"{p}k_heads", "reshape", [k], f"{p}kh", shape=[heads, s.new_tokens, hd])
            values = self.op(
                f"{p}v_heads", "reshape", [v], f"{p}vh", shape=[heads, s.new_tokens, hd]
            )
        scores = self.op(f"{p}qk", "batch_matmul", [qh, keys], f"{p}scores", transpose_b=True)
        causal = {"causal": True} if s.phase == "prefill" else {}  # a prompt sees only its past
        probs = self.op(f"{p}softmax", "softmax", [scores], f"{p}probs", **causal)
        context = self.op(f"{p}pv", "batch_matmul", [probs, values], f"{p}ctx")
        attn = self.op(
            f"{p}merge_heads", "reshape", [context], f"{p}attn", shape=[s.tokens, m.heads * hd]
        )
        o = self.linear(f"{p}o_proj", attn, m.heads * hd, m.hidden)
        h = self.op(f"{p}attn_resid", "add", [o, x], f"{p}h")
        hn = self.norm(f"{p}mlp_norm", h)
        down = self.experts(p, hn) if m.experts > 1 else self.mlp(p, hn)
        return self.op(f"{p}mlp_resid", "add", [down, h], f"{p}out")

    def mlp(self, p: str, x: str, experts: int = 0) -> str:
        """SwiGLU (gate, up, SiLU · up, down) or GELU (up, GELU, down), of one MLP or of a
        stack of experts."""
        m = self.model
        if m.gated:
            gate = self.linear(f"{p}gate", x, m.hidden, m.intermediate, experts=experts)
            up = self.linear(f"{p}up", x, m.hidden, m.intermediate, experts=experts)
            act = self.op(f"{p}act", "silu", [gate], f"{p}act_out")
            mixed = self.op(f"{p}glu", "mul", [act, up], f"{p}glu_out")
        else:
            up = self.linear(f"{p}up", x, m.hidden, m.intermediate, experts=experts)
            mixed = self.op(f"{p}act", "gelu", [up], f"{p}act_out")
        return self.linear(f"{p}down", mixed, m.intermediate, m.hidden, experts=experts)

    def experts(self, p: str, x: str) -> str:
        """A mixture of experts: a router scores every expert per token, each token goes
        to its top k, and their outputs, weighted by the router, are summed.

        Routing is data, so it is modelled as even (expert_rows): the step's T tokens make
        T·k choices among `active` = min(E, T·k) experts, each serving T·k / active of them,
        padded to the most any expert serves, as grouped GEMMs pad each expert's rows. A
        gather sends each token to its experts (the dispatch), the active experts' MLPs run
        as batch matmuls over their stacked weights (only their weights are read), and per
        choice a gather collects each token's output, weighted by the router and added (the
        combine)."""
        m, s = self.model, self.step
        tokens, k = s.tokens, m.experts_per_token
        active, rows = expert_rows(m, s)
        router = self.linear(f"{p}router", x, m.hidden, m.experts)
        probs = self.op(f"{p}route", "softmax", [router], f"{p}route_probs")
        q = f"{p}{EXPERTS}"
        sent = self.op(f"{q}dispatch", "gather", [x], f"{q}sent", rows=active * rows)
        stacked = [active, rows, m.hidden]
        grouped = self.op(f"{q}by_expert", "reshape", [sent], f"{q}grouped", shape=stacked)
        out = self.mlp(q, grouped, experts=active)
        flat = self.op(f"{q}unstack", "reshape", [out], f"{q}flat", shape=[active * rows, m.hidden])
        total = None
        for choice in range(k):
            mine = self.op(
                f"{q}collect{choice}",
                "gather",
                [flat],
                f"{q}collected{choice}",
                rows=tokens,
                start=choice * tokens,
            )
            weight = self.op(
                f"{q}weight{choice}",
                "slice",
                [probs],
                f"{q}routed{choice}",
                start=choice,
                stop=choice + 1,
            )
            weighted = self.op(f"{q}weigh{choice}", "mul", [mine, weight], f"{q}weighted{choice}")
            total = (
                weighted
                if total is None
                else self.op(f"{q}combine{choice}", "add", [total, weighted], f"{q}sum{choice}")
            )
        return total or x

    def head(self, x: str) -> str:
        m, s = self.model, self.step
        xn = self.norm("final_norm", x)
        if s.new_tokens > 1:  # only each sequence's last token predicts the next
            xn = self.op("last_tokens", "gather", [xn], "last", rows=s.batch)
        if m.tied_embeddings and m.chips == 1:  # the embedding table, read transposed
            return self.op("lm_head", "matmul", [xn, "embed"], "logits", transpose_b=True)
        return self.linear("lm_head", xn, m.hidden, m.head_vocab)
