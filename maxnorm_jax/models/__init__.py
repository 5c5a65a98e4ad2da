"""maxnorm_jax.models: Qwen2 / Qwen3 / Qwen3-MoE decoders (Flax NNX) and Hugging Face weights."""

from maxnorm_jax.models import hf
from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.models.create import abstract_model, create_model, model_mesh, param_shardings
from maxnorm_jax.models.decoder import Decoder, hidden_states, load_balancing_loss, logits_from_hidden
from maxnorm_jax.models.logprobs import TokenLogProbs, logprobs_from_hidden, next_token_targets, token_logprobs

__all__ = [
  "Decoder",
  "ModelConfig",
  "TokenLogProbs",
  "abstract_model",
  "create_model",
  "hf",
  "hidden_states",
  "load_balancing_loss",
  "logits_from_hidden",
  "logprobs_from_hidden",
  "model_mesh",
  "next_token_targets",
  "param_shardings",
  "token_logprobs",
]
