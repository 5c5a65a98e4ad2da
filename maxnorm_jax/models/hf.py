"""Hugging Face checkpoints: `load` a transformers Qwen2/Qwen3/Qwen3-MoE directory, `save` one.

`load` reads `config.json` and one or several `*.safetensors` files (with
`model.safetensors.index.json`), maps names and layouts, and places each tensor into its
sharding as it is read (with a mesh, each device receives only its shard).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from maxnorm_jax.models.config import ModelConfig
from maxnorm_jax.models.create import abstract_model, param_shardings
from maxnorm_jax.models.decoder import Decoder, layer_param_specs
from maxnorm_jax.parallel.rules import DEFAULT_RULES, Rules

INDEX_FILE = "model.safetensors.index.json"
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclasses.dataclass(frozen=True)
class TensorMapping:
  """One parameter of ours and the transformers tensors it comes from.

  path: key path in the model's pure state dict. hf_names / hf_shapes: the transformers
  tensors. to_ours: their arrays -> our array. to_hf: our array -> their arrays.
  """

  path: tuple[Any, ...]
  hf_names: tuple[str, ...]
  hf_shapes: tuple[tuple[int, ...], ...]
  to_ours: Callable[[list[np.ndarray]], np.ndarray]
  to_hf: Callable[[np.ndarray], list[np.ndarray]]


def _single(path, name, shape, to_ours, to_hf) -> TensorMapping:
  return TensorMapping(path, (name,), (tuple(shape),), lambda a: to_ours(a[0]), lambda x: [to_hf(x)])


def _same(path, name, shape) -> TensorMapping:
  return _single(path, name, shape, lambda a: a, lambda x: x)


def _linear(path, name, ours_shape, in_dims: int = 1) -> TensorMapping:
  """A transformers Linear weight [out, in] whose transpose [in, out], reshaped, is ours.

  The first `in_dims` axes of `ours_shape` are the input (1 for q/k/v/mlp [E, ...];
  len - 1 for o [H, D, E]).
  """
  fan_in = int(np.prod(ours_shape[:in_dims]))
  fan_out = int(np.prod(ours_shape[in_dims:]))
  return _single(
    path,
    name,
    (fan_out, fan_in),
    lambda a: a.T.reshape(ours_shape),
    lambda x: x.reshape(fan_in, fan_out).T,
  )


def _bias(path, name, ours_shape) -> TensorMapping:
  n = int(np.prod(ours_shape))
  return _single(path, name, (n,), lambda a: a.reshape(ours_shape), lambda x: x.reshape(n))


def _experts(path, names, ours_shape) -> TensorMapping:
  """Per-expert Linear weights [out, in] stacked into ours [X, in, out]."""
  x, fan_in, fan_out = ours_shape
  return TensorMapping(
    path,
    tuple(names),
    tuple((fan_out, fan_in) for _ in names),
    lambda arrays: np.stack([a.T for a in arrays]),
    lambda v: [v[i].T for i in range(x)],
  )


def tensor_mappings(cfg: ModelConfig) -> list[TensorMapping]:
  """Every parameter of a `cfg` decoder with its transformers tensor names and layouts."""
  e, v = cfg.hidden_size, cfg.vocab_size
  maps = [_same(("embed",), "model.embed_tokens.weight", (v, e)), _same(("final_norm",), "model.norm.weight", (e,))]
  if not cfg.tie_word_embeddings:
    maps.append(_linear(("lm_head",), "lm_head.weight", (e, v)))
  for i in range(cfg.num_layers):
    pre = f"model.layers.{i}."
    specs = layer_param_specs(cfg, i)
    shape = {name: s[0] for name, s in specs.items()}
    at = lambda name: ("layers", i, name)  # noqa: E731
    maps += [
      _same(at("attn_norm"), pre + "input_layernorm.weight", shape["attn_norm"]),
      _same(at("mlp_norm"), pre + "post_attention_layernorm.weight", shape["mlp_norm"]),
      _linear(at("q"), pre + "self_attn.q_proj.weight", shape["q"]),
      _linear(at("k"), pre + "self_attn.k_proj.weight", shape["k"]),
      _linear(at("v"), pre + "self_attn.v_proj.weight", shape["v"]),
      _linear(at("o"), pre + "self_attn.o_proj.weight", shape["o"], in_dims=len(shape["o"]) - 1),
    ]
    if cfg.qkv_bias:
      maps += [_bias(at(n + "_bias"), pre + f"self_attn.{n}_proj.bias", shape[n + "_bias"]) for n in "qkv"]
    if cfg.o_bias:
      maps.append(_same(at("o_bias"), pre + "self_attn.o_proj.bias", shape["o_bias"]))
    if cfg.qk_norm:
      maps += [_same(at(n), pre + f"self_attn.{n}.weight", shape[n]) for n in ("q_norm", "k_norm")]
    if "router" in specs:
      maps.append(_linear(at("router"), pre + "mlp.gate.weight", shape["router"]))
      for ours, theirs in (("expert_gate", "gate_proj"), ("expert_up", "up_proj"), ("expert_down", "down_proj")):
        names = [pre + f"mlp.experts.{j}.{theirs}.weight" for j in range(cfg.num_experts)]
        maps.append(_experts(at(ours), names, shape[ours]))
    else:
      for ours, theirs in (("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")):
        maps.append(_linear(at(ours), pre + f"mlp.{theirs}.weight", shape[ours]))
  return maps


def _dtype_name(dtype: Any) -> str:
  return jnp.dtype(dtype).name


def _checkpoint_files(path: str) -> dict[str, Any]:
  """Tensor name -> SafetensorsFile holding it (from the index when there is one)."""
  from maxnorm_jax.models.safetensors_io import SafetensorsFile

  index_path = os.path.join(path, INDEX_FILE)
  opened: dict[str, SafetensorsFile] = {}
  where: dict[str, SafetensorsFile] = {}
  if os.path.exists(index_path):
    with open(index_path) as f:
      weight_map = json.load(f)["weight_map"]
    for name, file in weight_map.items():
      if not isinstance(file, str) or os.path.basename(file) != file or file in ("", ".", ".."):
        raise ValueError(
          f"{index_path}: weight_map names {file!r} for tensor {name!r}; it must be a plain file name "
          "inside the checkpoint directory"
        )
      if file not in opened:
        full = os.path.join(path, file)
        if not os.path.exists(full):
          raise FileNotFoundError(f"{INDEX_FILE} names {file!r} for tensor {name!r}, which does not exist")
        opened[file] = SafetensorsFile(full)
      where[name] = opened[file]
    return where
  files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
  if not files:
    raise FileNotFoundError(f"no *.safetensors files in {path}")
  for file in files:
    st = SafetensorsFile(file)
    for name in st.keys():
      where[name] = st
  return where


def load_config(path: str, **overrides) -> ModelConfig:
  """The ModelConfig of `path`/config.json (overrides replace fields)."""
  with open(os.path.join(path, "config.json")) as f:
    return ModelConfig.from_hf_dict(json.load(f), **overrides)


def load(
  path: str,
  dtype: Any = None,
  *,
  mesh: Mesh | None = None,
  rules: Rules = DEFAULT_RULES,
  compute_dtype: Any = None,
  **config_overrides,
) -> Decoder:
  """Loads a transformers checkpoint directory into a Decoder.

  Args:
    path: directory with config.json and *.safetensors (single or sharded with an index).
    dtype: parameter dtype (default: the checkpoint's "dtype"/"torch_dtype", else float32).
    mesh, rules: when a mesh is given, each tensor is placed straight into the sharding its
      logical axes map to; no device ever holds a whole sharded tensor.
    compute_dtype: activation dtype (default: the parameter dtype).
    config_overrides: further ModelConfig fields (e.g. remat=True).

  Raises:
    ValueError naming the architecture, or the tensor that is missing, mis-shaped or unused.
  """
  with open(os.path.join(path, "config.json")) as f:
    hf_config = json.load(f)
  if dtype is None:
    dtype = hf_config.get("dtype") or hf_config.get("torch_dtype") or "float32"
  param_dtype = _dtype_name(dtype)
  cfg = ModelConfig.from_hf_dict(
    hf_config,
    param_dtype=param_dtype,
    dtype=_dtype_name(compute_dtype) if compute_dtype is not None else param_dtype,
    **config_overrides,
  )
  files = _checkpoint_files(path)
  abstract = abstract_model(cfg)
  graphdef, state = nnx.split(abstract)
  pure = nnx.to_pure_dict(state)
  shardings = param_shardings(abstract, mesh, rules) if mesh is not None else None
  np_dtype = np.dtype(jnp.dtype(param_dtype))
  used: set[str] = set()
  for m in tensor_mappings(cfg):
    arrays = []
    for name, expected in zip(m.hf_names, m.hf_shapes):
      if name not in files:
        raise ValueError(f"tensor {name!r} is missing from the checkpoint in {path}")
      got = files[name].shape(name)
      if got != expected:
        raise ValueError(f"tensor {name!r} has shape {got}, expected {expected}")
      arrays.append(files[name].read(name))
      used.add(name)
    value = np.asarray(m.to_ours(arrays)).astype(np_dtype)
    if shardings is not None:
      sharding = _lookup(shardings, m.path)
      array = jax.make_array_from_callback(value.shape, sharding, lambda idx, v=value: v[idx])
    else:
      array = jax.device_put(value)
    _assign(pure, m.path, array)
  ignorable = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
  unused = sorted(n for n in files if n not in used and n not in ignorable and not n.endswith(_IGNORED_SUFFIXES))
  if unused:
    raise ValueError(
      f"the checkpoint in {path} has {len(unused)} tensor(s) a {cfg.model_type} model does not use, e.g. {unused[0]!r}"
    )
  nnx.replace_by_pure_dict(state, pure)
  return nnx.merge(graphdef, state)


def _lookup(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def _assign(tree, path, value):
  for key in path[:-1]:
    tree = tree[key]
  tree[path[-1]] = value


def save(model: Decoder, path: str, dtype: Any = None, max_shard_bytes: int = 2 * 1024**3) -> None:
  """Writes `model` as a transformers checkpoint directory (config.json + safetensors).

  Tensors go into files of at most `max_shard_bytes` (more than one file adds
  model.safetensors.index.json). dtype: the stored dtype (default: the parameter dtype).
  """
  save_weights(model.config, nnx.to_pure_dict(nnx.split(model)[1]), path, dtype, max_shard_bytes)


def save_weights(
  cfg: ModelConfig, weights: Any, path: str, dtype: Any = None, max_shard_bytes: int = 2 * 1024**3
) -> None:
  """`save` of a weights pytree (`Decoder.weights()`, a train state's params, or a pure state dict)."""
  from maxnorm_jax.models.safetensors_io import write_safetensors

  dtype_name = _dtype_name(dtype) if dtype is not None else cfg.param_dtype
  np_dtype = np.dtype(jnp.dtype(dtype_name))
  os.makedirs(path, exist_ok=True)
  tensors: list[tuple[str, np.ndarray]] = []
  for m in tensor_mappings(cfg):
    value = np.asarray(jax.device_get(_lookup(weights, m.path))).astype(np_dtype)
    tensors += list(zip(m.hf_names, m.to_hf(value)))
  shards: list[list[tuple[str, np.ndarray]]] = [[]]
  size = 0
  for name, a in tensors:
    if shards[-1] and size + a.nbytes > max_shard_bytes:
      shards.append([])
      size = 0
    shards[-1].append((name, a))
    size += a.nbytes
  for stale in glob.glob(os.path.join(path, "*.safetensors")) + glob.glob(os.path.join(path, INDEX_FILE)):
    os.remove(stale)
  if len(shards) == 1:
    write_safetensors(os.path.join(path, "model.safetensors"), shards[0])
  else:
    weight_map = {}
    for k, shard in enumerate(shards):
      file = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
      write_safetensors(os.path.join(path, file), shard)
      weight_map.update({name: file for name, _ in shard})
    total = sum(a.nbytes for _, a in tensors)
    with open(os.path.join(path, INDEX_FILE), "w") as f:
      json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
  hf_config = cfg.to_hf_dict()
  hf_config["dtype"] = dtype_name
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(hf_config, f, indent=2)
