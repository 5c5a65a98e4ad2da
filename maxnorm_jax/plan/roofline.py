"""The FLOPs the decoder executes in each piece of an RL step, and a roofline time per piece.

XLA's `cost_analysis()` counts the body of a while loop or scan once (measured on CPU and TPU), and
the decode loop, the chunked log-prob head and the update's minibatch scans are all loops, so the
FLOPs here are counted from the shapes, as the implementation computes them: attention over the
whole (padded) sequence or cache, and every expert of a mixture-of-experts layer (the decoder runs
all experts as one batched matmul and weights the top-k; docs/DESIGN.md section 5).

Shapes: B sequences, L prompt tokens, N new tokens, T = L + N.
"""

from __future__ import annotations

import dataclasses

from maxnorm_jax.models.config import ModelConfig


def layer_matmul_params(cfg: ModelConfig, layer: int) -> int:
  """Weights a token multiplies through in decoder layer `layer` (as executed)."""
  e, h, k, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  attn = e * (h + 2 * k) * d + h * d * e
  if cfg.is_moe_layer(layer):
    mlp = e * cfg.num_experts + 3 * e * cfg.moe_intermediate_size * cfg.num_experts
  else:
    mlp = 3 * e * cfg.intermediate_size
  return attn + mlp


def body_matmul_params(cfg: ModelConfig) -> int:
  return sum(layer_matmul_params(cfg, i) for i in range(cfg.num_layers))


def attention_flops(cfg: ModelConfig, queries: int, keys: int) -> float:
  """q.K and p.V of `queries` query tokens against `keys` keys, over all layers."""
  return 4.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * queries * keys


def head_flops(cfg: ModelConfig, tokens: int) -> float:
  return 2.0 * cfg.hidden_size * cfg.vocab_size * tokens


def prefill_flops(cfg: ModelConfig, b: int, prompt_len: int) -> float:
  """Prefill of B prompts of L tokens (full L x L attention, head on the last position)."""
  return (
    2.0 * body_matmul_params(cfg) * b * prompt_len
    + b * attention_flops(cfg, prompt_len, prompt_len)
    + head_flops(cfg, b)
  )


def decode_step_flops(cfg: ModelConfig, b: int, cache_len: int) -> float:
  """One decode step of B sequences against a cache of `cache_len` slots (all attended, masked)."""
  return 2.0 * body_matmul_params(cfg) * b + b * attention_flops(cfg, 1, cache_len) + head_flops(cfg, b)


def body_forward_flops(cfg: ModelConfig, b: int, t: int) -> float:
  return 2.0 * body_matmul_params(cfg) * b * t + b * attention_flops(cfg, t, t)


def logprob_flops(cfg: ModelConfig, b: int, prompt_len: int, new_tokens: int) -> float:
  """The log-prob pass: the body over T = L + N tokens, the head over the N completion positions."""
  return body_forward_flops(cfg, b, prompt_len + new_tokens) + head_flops(cfg, b * new_tokens)


def update_flops(cfg: ModelConfig, b: int, prompt_len: int, new_tokens: int, epochs: int) -> float:
  """PPO epochs over the B sequences: forward + backward (2x forward), plus the recomputed forward
  of rematerialised layers and of the checkpointed head chunks."""
  t = prompt_len + new_tokens
  body = body_forward_flops(cfg, b, t)
  head = head_flops(cfg, b * new_tokens)
  recompute = head + (body if cfg.remat else 0.0)
  return epochs * (3.0 * (body + head) + recompute)


@dataclasses.dataclass(frozen=True)
class Roofline:
  """Time of a piece on `chips` chips: compute-bound at peak FLOP/s or bandwidth-bound."""

  flops: float  # the piece's FLOPs over all chips
  hbm_bytes_per_chip: float  # bytes each chip reads or writes in HBM
  chips: int
  peak_flops: float  # per chip
  hbm_bandwidth: float  # per chip, bytes/s

  @property
  def compute_s(self) -> float:
    return self.flops / (self.chips * self.peak_flops)

  @property
  def memory_s(self) -> float:
    return self.hbm_bytes_per_chip / self.hbm_bandwidth

  @property
  def seconds(self) -> float:
    return max(self.compute_s, self.memory_s)

  @property
  def bound(self) -> str:
    return "compute" if self.compute_s >= self.memory_s else "memory"
