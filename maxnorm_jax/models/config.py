"""The decoder's configuration: one dataclass for Qwen2 / Qwen2.5, Qwen3 dense and Qwen3-MoE."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

ARCHITECTURES = {
  "Qwen2ForCausalLM": "qwen2",
  "Qwen3ForCausalLM": "qwen3",
  "Qwen3MoeForCausalLM": "qwen3_moe",
}
MODEL_TYPES = {v: k for k, v in ARCHITECTURES.items()}

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def dtype_of(name_or_dtype: Any) -> Any:
  """A jnp dtype from a name ("bfloat16") or a dtype."""
  if isinstance(name_or_dtype, str):
    if name_or_dtype not in _DTYPES:
      raise ValueError(f"unknown dtype {name_or_dtype!r}; known: {sorted(_DTYPES)}")
    return _DTYPES[name_or_dtype]
  return jnp.dtype(name_or_dtype).type


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Shapes and options of the decoder.

  `model_type` is one of "qwen2", "qwen3", "qwen3_moe". A layer is a mixture of experts when
  `num_experts > 0`, the layer is not in `mlp_only_layers` and (layer + 1) is a multiple of
  `decoder_sparse_step` (the Qwen3-MoE rule).
  """

  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  model_type: str = "qwen3"
  rope_theta: float = 1_000_000.0
  rope_scaling_factor: float | None = None  # "linear" rope scaling: positions / factor
  rms_norm_eps: float = 1e-6
  tie_word_embeddings: bool = False
  qkv_bias: bool = False
  o_bias: bool = False
  qk_norm: bool = True
  num_experts: int = 0
  num_experts_per_tok: int = 0
  moe_intermediate_size: int = 0
  norm_topk_prob: bool = True
  decoder_sparse_step: int = 1
  mlp_only_layers: tuple[int, ...] = ()
  router_aux_loss_coef: float = 0.001
  max_position_embeddings: int = 32768
  # Numerics and memory.
  param_dtype: str = "float32"
  dtype: str = "float32"  # compute dtype of activations and matmuls
  softmax_fp32: bool = True  # attention and router softmax in float32
  logits_fp32: bool = True  # final logits in float32
  remat: bool = False  # rematerialise each decoder layer in the backward pass (layers of equal shapes run as a scan)
  attention_chunk: int = 0  # > 0: attention over a whole sequence in query blocks of this size

  def __post_init__(self):
    if self.model_type not in MODEL_TYPES:
      raise ValueError(f"unknown model_type {self.model_type!r}; known: {sorted(MODEL_TYPES)}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads={self.num_heads} is not a multiple of num_kv_heads={self.num_kv_heads}")
    if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
      raise ValueError(f"num_experts_per_tok={self.num_experts_per_tok} must be in [1, {self.num_experts}]")
    if self.attention_chunk < 0:
      raise ValueError(f"attention_chunk must be >= 0, got {self.attention_chunk}")
    dtype_of(self.param_dtype)
    dtype_of(self.dtype)

  def is_moe_layer(self, layer: int) -> bool:
    """Whether decoder layer `layer` is a mixture of experts."""
    return self.num_experts > 0 and layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0

  @property
  def jnp_param_dtype(self):
    return dtype_of(self.param_dtype)

  @property
  def jnp_dtype(self):
    return dtype_of(self.dtype)

  def replace(self, **changes) -> "ModelConfig":
    return dataclasses.replace(self, **changes)

  @classmethod
  def tiny(cls, vocab_size: int = 128, **overrides) -> "ModelConfig":
    """A 2-layer Qwen3-style decoder of width 64, for tests and the character-level task."""
    fields = dict(
      vocab_size=vocab_size,
      hidden_size=64,
      intermediate_size=128,
      num_layers=2,
      num_heads=4,
      num_kv_heads=2,
      head_dim=16,
      model_type="qwen3",
      rope_theta=10_000.0,
      tie_word_embeddings=True,
      max_position_embeddings=2048,
    )
    fields.update(overrides)
    return cls(**fields)

  # ------------------------------------------------------------------ Hugging Face config.json
  @classmethod
  def from_hf_dict(cls, d: dict[str, Any], **overrides) -> "ModelConfig":
    """The config of a transformers `config.json` dict (Qwen2, Qwen3, Qwen3-MoE)."""
    arch = (d.get("architectures") or [None])[0]
    model_type = d.get("model_type")
    if arch is not None and arch not in ARCHITECTURES:
      raise ValueError(f"unknown architecture {arch!r} in config.json; supported: {sorted(ARCHITECTURES)}")
    if model_type not in MODEL_TYPES:
      raise ValueError(f"unknown model_type {model_type!r} in config.json; supported: {sorted(MODEL_TYPES)}")
    if d.get("use_sliding_window"):
      raise ValueError("config.json key 'use_sliding_window'=true is not supported")
    if d.get("hidden_act", "silu") != "silu":
      raise ValueError(f"config.json key 'hidden_act'={d['hidden_act']!r}: only 'silu' is supported")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
      if key not in d:
        raise ValueError(f"config.json lacks the key {key!r}")
    rope = dict(d.get("rope_parameters") or {})
    legacy = d.get("rope_scaling") or {}
    theta = rope.get("rope_theta", d.get("rope_theta", 10_000.0))
    rope_type = rope.get("rope_type", legacy.get("rope_type", legacy.get("type", "default")))
    factor = None
    if rope_type == "linear":
      factor = float(rope.get("factor", legacy.get("factor")))
    elif rope_type not in ("default", None):
      raise ValueError(f"config.json rope type {rope_type!r} is not supported (default, linear)")
    heads = d["num_attention_heads"]
    is_qwen2 = model_type == "qwen2"
    fields = dict(
      vocab_size=d["vocab_size"],
      hidden_size=d["hidden_size"],
      intermediate_size=d.get("intermediate_size", 0),
      num_layers=d["num_hidden_layers"],
      num_heads=heads,
      num_kv_heads=d.get("num_key_value_heads") or heads,
      head_dim=d.get("head_dim") or d["hidden_size"] // heads,
      model_type=model_type,
      rope_theta=float(theta),
      rope_scaling_factor=factor,
      rms_norm_eps=d.get("rms_norm_eps", 1e-6),
      tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
      qkv_bias=True if is_qwen2 else bool(d.get("attention_bias", False)),
      o_bias=False if is_qwen2 else bool(d.get("attention_bias", False)),
      qk_norm=not is_qwen2,
      max_position_embeddings=d.get("max_position_embeddings", 32768),
    )
    if model_type == "qwen3_moe":
      fields.update(
        num_experts=d.get("num_experts", d.get("num_local_experts", 0)),
        num_experts_per_tok=d["num_experts_per_tok"],
        moe_intermediate_size=d["moe_intermediate_size"],
        norm_topk_prob=bool(d.get("norm_topk_prob", False)),
        decoder_sparse_step=d.get("decoder_sparse_step", 1),
        mlp_only_layers=tuple(d.get("mlp_only_layers") or ()),
        router_aux_loss_coef=d.get("router_aux_loss_coef", 0.001),
      )
    fields.update(overrides)
    return cls(**fields)

  def to_hf_dict(self) -> dict[str, Any]:
    """A transformers `config.json` dict for this config."""
    rope = {"rope_theta": self.rope_theta, "rope_type": "default"}
    if self.rope_scaling_factor is not None:
      rope = {"rope_theta": self.rope_theta, "rope_type": "linear", "factor": self.rope_scaling_factor}
    d: dict[str, Any] = {
      "architectures": [MODEL_TYPES[self.model_type]],
      "model_type": self.model_type,
      "vocab_size": self.vocab_size,
      "hidden_size": self.hidden_size,
      "intermediate_size": self.intermediate_size,
      "num_hidden_layers": self.num_layers,
      "num_attention_heads": self.num_heads,
      "num_key_value_heads": self.num_kv_heads,
      "head_dim": self.head_dim,
      "hidden_act": "silu",
      "max_position_embeddings": self.max_position_embeddings,
      "rms_norm_eps": self.rms_norm_eps,
      "rope_parameters": rope,
      "tie_word_embeddings": self.tie_word_embeddings,
      "use_sliding_window": False,
      "sliding_window": None,
      "attention_dropout": 0.0,
      "dtype": self.param_dtype,
      "use_cache": True,
    }
    if self.model_type == "qwen2":
      if not self.qkv_bias or self.o_bias or self.qk_norm:
        raise ValueError("a qwen2 config needs qkv_bias=True, o_bias=False, qk_norm=False")
      d["max_window_layers"] = self.num_layers
    else:
      if self.qkv_bias != self.o_bias or not self.qk_norm:
        raise ValueError(f"a {self.model_type} config needs qkv_bias == o_bias and qk_norm=True")
      d["attention_bias"] = self.qkv_bias
    if self.model_type == "qwen3_moe":
      d.update(
        num_experts=self.num_experts,
        num_experts_per_tok=self.num_experts_per_tok,
        moe_intermediate_size=self.moe_intermediate_size,
        norm_topk_prob=self.norm_topk_prob,
        decoder_sparse_step=self.decoder_sparse_step,
        mlp_only_layers=list(self.mlp_only_layers),
        router_aux_loss_coef=self.router_aux_loss_coef,
      )
    return d
