"""Model configs (a Hugging Face style config.json) → a frozen `ModelConfig`.

A config names a transformer's shape, not a schedule: the fields below are read and checked,
every other key of a real config.json (token ids, RoPE base, initialiser ranges...) changes
no byte moved and is ignored. Keys starting with `_` are ours: the shipped configs
(workloads/models/*.json) cite the model card they copy in `_source`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..errors import OVERRIDE_MARK, ConfigError, Problems, quote
from .strict import (
    MAX_NESTING,
    Fields,
    as_bool,
    as_int,
    describe,
    one_of,
    override_label,
    parse_overrides,
    read_text,
    shipped_name,
)


def _model_dir() -> Path:
    """The shipped configs: simulator/model_configs in an installed package, the checkout's
    workloads/models in a source tree (as the hardware presets)."""
    package = Path(__file__).resolve().parents[1]
    shipped = package / "model_configs"
    return shipped if shipped.is_dir() else package.parent / "workloads" / "models"


MODEL_DIR = _model_dir()
HF_CONFIG = "config.json"  # a Hugging Face model folder's config
MAX_CONFIG_BYTES = 256 * 1024  # a config.json is a few KiB
# hidden_act → the MLP it implies: SiLU models gate (SwiGLU: gate, up, down); GELU ones
# here are the ungated two-matmul MLP (up, GELU, down).
ACTIVATIONS = {"silu": "silu", "gelu": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu"}
# architectures whose attention projections carry a bias though config.json does not say so
# (transformers' Qwen2Attention builds q/k/v with bias=True)
BIASED_QKV = ("Qwen2ForCausalLM",)


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer's shape, as inference needs it. The workloads of its
    layers are generated from it (config/transformer.py), so every figure is checked here."""

    name: str
    source: str  # the file it was read from
    cited: str  # where the figures come from ('' for a user's file without `_source`)
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int  # fewer than heads: grouped-query attention
    head_dim: int
    layers: int
    vocab: int
    activation: str  # silu (gated MLP) or gelu
    qkv_bias: bool
    experts: int  # 1 for a dense MLP
    experts_per_token: int
    max_context: int
    tied_embeddings: bool
    sliding_window: int | None  # attention reads at most this many positions back
    chips: int = 1  # the tensor-parallel group this is one chip's share of (see shard)
    overrides: tuple[str, ...] = ()  # the --set overrides applied to the file, as given

    def attended(self, context: int) -> int:
        """Positions one token's attention reads at this context."""
        return context if self.sliding_window is None else min(context, self.sliding_window)

    @property
    def gated(self) -> bool:
        return self.activation == "silu"

    @property
    def head_vocab(self) -> int:
        """The LM head's columns on one chip."""
        return -(-self.vocab // self.chips)

    def weight_count(self) -> int:
        """Parameters: embeddings, every layer's projections, norms and experts, the head."""
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        if self.qkv_bias:
            attention += self.head_dim * (self.heads + 2 * self.kv_heads)
        mlp = (3 if self.gated else 2) * self.hidden * self.intermediate * self.experts
        router = self.hidden * self.experts if self.experts > 1 else 0
        layer = attention + mlp + router + 2 * self.hidden
        head = 0 if self.tied_embeddings and self.chips == 1 else self.head_vocab * self.hidden
        return self.vocab * self.hidden + self.layers * layer + self.hidden + head


def shard(model: ModelConfig, chips: int) -> ModelConfig:
    """One chip's share of the model under tensor parallelism (Megatron style): its query
    heads, its key/value heads (or one, replicated, when there are fewer than chips), its
    columns of the MLP and of the LM head (head_vocab); the embedding table is whole on
    every chip, and so is the hidden size. Refused when the heads or the MLP do not split
    evenly."""
    if chips == 1:
        return model
    problems = [
        f"{what} {count} is not a multiple of {chips} chips"
        for what, count in (
            ("num_attention_heads", model.heads),
            ("intermediate_size", model.intermediate),
        )
        if count % chips
    ]
    if model.kv_heads % chips and chips % model.kv_heads:
        problems.append(
            f"num_key_value_heads {model.kv_heads} neither splits over nor divides {chips} chips"
        )
    if problems:
        raise ConfigError(
            model.source, [f"tensor parallelism over {chips} chips: {p}" for p in problems]
        )
    return replace(
        model,
        heads=model.heads // chips,
        kv_heads=max(1, model.kv_heads // chips),
        intermediate=model.intermediate // chips,
        chips=chips,
    )


def model_names() -> list[str]:
    return sorted(p.stem for p in MODEL_DIR.glob("*.json"))


# The keys parse_model reads: the only ones an override may set.
FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "num_hidden_layers",
    "vocab_size",
    "head_dim",
    "hidden_act",
    "num_local_experts",
    "num_experts_per_tok",
    "max_position_embeddings",
    "tie_word_embeddings",
    "architectures",
    "attention_bias",
    "sliding_window",
    "use_sliding_window",
)


def load_model(
    name_or_path: str | os.PathLike, overrides: Sequence[str] | Sequence[tuple[str, Any]] = ()
) -> ModelConfig:
    """A shipped config by name ('llama2-7b'), a config.json by path, or a Hugging Face model
    folder that holds one; `overrides` are 'key=value' texts or (key, value) pairs that
    replace the file's (num_key_value_heads=8 makes it GQA). A file named config.json takes
    its folder's name (Llama-2-7b-hf/config.json is Llama-2-7b-hf), any other its own."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(
            "load_model() takes a shipped model's name or a config.json's path, got "
            f"{type(name_or_path).__name__}"
        )
    overrides = parse_overrides(overrides, OVERRIDE_MARK.strip())
    name_or_path = str(name_or_path)
    path = Path(name_or_path)
    if path.is_dir() and (path / HF_CONFIG).is_file():  # a Hugging Face model's folder
        path = path / HF_CONFIG
    if path.suffix != ".json":
        shipped = shipped_name(name_or_path, model_names())
        if shipped is None:
            raise ConfigError(
                name_or_path,
                [
                    f"no model named {quote(name_or_path)} (models: {', '.join(model_names())}; "
                    f"a config file's path ends in .json; a model folder holds {HF_CONFIG})"
                ],
            )
        path = MODEL_DIR / f"{shipped}.json"
    source = str(path)
    raw = read_json(source, read_text(path, MAX_CONFIG_BYTES))
    if not isinstance(raw, dict):
        raise ConfigError(source, [f"the top level must be a JSON object, got {describe(raw)}"])
    unknown = [key for key, _ in overrides if key not in FIELDS]
    if unknown:
        raise ConfigError(
            source,
            [
                f"{OVERRIDE_MARK}{quote(unknown[0])}: not a field of a model config that the "
                f"simulator reads (fields: {', '.join(FIELDS)})"
            ],
        )
    raw.update(overrides)
    labels = {key: override_label(key, value) for key, value in overrides}
    name = path.resolve().parent.name if path.name == HF_CONFIG else path.stem
    return replace(parse_model(raw, name, source, labels), overrides=tuple(labels.values()))


MAX_NUMBER_CHARS = 40  # digits of a number in a config (sizes are at most 2^24)


def read_json(source: str, text: str) -> Any:
    """JSON as strictly as the YAML loader reads a workload: a key given twice, a number of
    more than MAX_NUMBER_CHARS characters, NaN or Infinity, or nesting deeper than
    MAX_NESTING levels is refused with the place, not taken or crashed on."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                raise _JsonLimit(f"the key {quote(key)} is given twice")
            seen[key] = value
        return seen

    def number(kind: Callable[[str], Any]) -> Callable[[str], Any]:
        def parse(text: str) -> Any:
            if len(text) > MAX_NUMBER_CHARS:
                raise _JsonLimit(
                    f"a number of {len(text):,} characters (at most {MAX_NUMBER_CHARS})"
                )
            return kind(text)

        return parse

    def constant(name: str) -> Any:
        raise _JsonLimit(f"{name} is not a number a config may hold")

    try:
        raw = json.loads(
            text,
            object_pairs_hook=unique,
            parse_int=number(int),
            parse_float=number(float),
            parse_constant=constant,
        )
    except json.JSONDecodeError as exc:
        raise ConfigError(source, [f"line {exc.lineno}: not valid JSON: {exc.msg}"]) from None
    except _JsonLimit as exc:
        raise ConfigError(source, [str(exc)]) from None
    except RecursionError:
        raise ConfigError(source, [f"nested deeper than {MAX_NESTING} levels"]) from None
    if _depth(raw) > MAX_NESTING:
        raise ConfigError(source, [f"nested deeper than {MAX_NESTING} levels"])
    return raw


class _JsonLimit(ValueError):
    """A JSON value past what a config may hold (read_json)."""


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def parse_model(
    raw: dict[str, Any], name: str, source: str, overrides: dict[str, str] | None = None
) -> ModelConfig:
    problems = Problems(source, overrides)
    f = Fields(raw, "", problems)
    count = as_int(1, 1 << 20)
    hidden = f.get("hidden_size", count)
    intermediate = f.get("intermediate_size", count)
    heads = f.get("num_attention_heads", as_int(1, 1024))
    kv_heads = f.get("num_key_value_heads", as_int(1, 1024), default=heads)
    layers = f.get("num_hidden_layers", as_int(1, 1024))
    vocab = f.get("vocab_size", as_int(1, 1 << 24))
    head_dim = f.get("head_dim", as_int(1, 4096), default=None)
    activation = f.get("hidden_act", one_of(*ACTIVATIONS), default="silu")
    experts = f.get("num_local_experts", as_int(1, 1024), default=1)
    per_token = f.get("num_experts_per_tok", as_int(1, 1024), default=1)
    max_context = f.get("max_position_embeddings", as_int(1, 1 << 24), default=4096)
    tied = f.get("tie_word_embeddings", as_bool, default=False)
    architectures = f.get("architectures", _strings, default=[])
    bias = f.get("attention_bias", as_bool, default=None)
    cited = f.get("_source", _text, default="")
    window = f.get("sliding_window", _optional(as_int(1, 1 << 24)), default=None)
    if not f.get("use_sliding_window", as_bool, default=True):
        window = None
    if heads and kv_heads and heads % kv_heads:
        problems.add(
            "num_key_value_heads",
            f"{kv_heads} does not divide num_attention_heads {heads}: each key/value head "
            "serves a whole group of query heads",
        )
    if hidden and heads and head_dim is None and hidden % heads:
        problems.add(
            "head_dim",
            f"is required when hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {heads}",
        )
    if experts and per_token and per_token > experts:
        problems.add(
            "num_experts_per_tok",
            f"{per_token} is more than the {experts} experts (num_local_experts)",
        )
    unknown_ours = [k for k in raw if isinstance(k, str) and k.startswith("_") and k != "_source"]
    for key in unknown_ours:
        problems.add(key, "unknown field (the only field of ours is _source)", unknown=True)
    if problems.items:
        raise ConfigError(source, problems.items, tuple(problems.unknown_paths))
    return ModelConfig(
        name=name,
        source=source,
        cited=cited,
        hidden=hidden,
        intermediate=intermediate,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim or hidden // heads,
        layers=layers,
        vocab=vocab,
        activation=ACTIVATIONS[activation],
        qkv_bias=any(a in BIASED_QKV for a in architectures) if bias is None else bias,
        experts=experts,
        experts_per_token=per_token,
        max_context=max_context,
        tied_embeddings=tied,
        sliding_window=window,
    )


def _optional(parse):
    def parse_or_none(value: Any):
        return None if value is None else parse(value)

    return parse_or_none


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of names, got {describe(value)}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected text, got {describe(value)}")
    return value


def kv_cache_bytes(model: ModelConfig, tokens: int, element_bytes: int) -> int:
    """K and V of every layer for `tokens` positions."""
    return 2 * model.layers * model.kv_heads * model.head_dim * tokens * element_bytes
