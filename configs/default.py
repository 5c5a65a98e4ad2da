r"""The trainer's configuration: one table of method rows, model presets and mesh presets.

The main job (what `make train` runs, about 8 minutes on 2 CPU cores):

  python -m maxnorm_jax.main --config=configs/default.py --workdir=runs/default

It warm-starts the tiny built-in model (2 layers, width 128) with 300 SFT steps on the
"arith_digits" task's reference answers, then runs 750 RL steps of MaxNorm-RLOO + the
Reward-Resolution Protocol (64 prompts x 8 samples a step). `eval/reward_mean` (the mean reward of 4
temperature-1 samples on each of 256 held-out problems) should rise by 0.15 or more from the first
evaluation (after SFT, before any RL step) to the last; on a 2-core CPU it went
0.393 -> 0.414 -> 0.445 -> 0.490 -> 0.480 -> 0.503 -> 0.526 -> 0.533 -> 0.565 -> 0.565 -> 0.572,
and the greedy reward 0.521 -> 0.578. Metrics go to runs/default/metrics.jsonl and TensorBoard, the
advantage cards of every 75th batch to runs/default/cards, checkpoints to runs/default/checkpoints.

Arguments (big_vision style, comma separated):

  --config=configs/default.py:method=grpo,task=arith,model=tiny,runlocal=True

  method    a row of METHODS (default maxnorm_rloo)
  task      a built-in task (arith, arith_digits, arith_noisy, code) or a dataset preset of
            maxnorm_jax.data (gsm8k, math500, deepmath, livecodebench sample files)
  model     a key of MODELS (tiny, or a Hugging Face checkpoint such as qwen2.5-1.5b)
  runlocal  True: a few steps of a tiny model, well under a minute on a laptop CPU

Every value can then be overridden: --config.train.steps=8 --config.loss.beta=0.01. An unknown key
or an invalid value stops the run before anything is compiled, with a message naming the key.
"""

import ml_collections as mlc

# ---------------------------------------------------------------------------------------------
# Method rows (DESIGN 3.7). Each row sets the estimator and its parameters, the Protocol, the
# loss and the group filter; every other value comes from the base config.
DELTA_RES = 1e-2
_PROTOCOL_ON = dict(gate=True, binning=False, zero_group="skip")
_PROTOCOL_BINNING = dict(gate=True, binning=True, zero_group="skip")
_PROTOCOL_OFF = dict(gate=False, binning=False, zero_group="keep")

METHODS = {
  "grpo": dict(estimator="grpo", protocol=_PROTOCOL_OFF),
  "grpo_protocol": dict(estimator="grpo", protocol=_PROTOCOL_ON),
  "rloo_protocol": dict(estimator="rloo", protocol=_PROTOCOL_ON),
  "dr_grpo": dict(estimator="dr_grpo", protocol=_PROTOCOL_OFF, loss=dict(aggregation="seq-mean-token-sum-norm")),
  "reinforce_pp": dict(estimator="reinforce_pp", protocol=_PROTOCOL_OFF),
  "reinforce_pp_baseline": dict(estimator="reinforce_pp_baseline", protocol=_PROTOCOL_OFF),
  "p90_protocol": dict(estimator="p90", params=dict(tau_res=DELTA_RES, quantile=0.9), protocol=_PROTOCOL_ON),
  "grpo_beta_comp": dict(estimator="grpo_beta_comp", params=dict(beta_comp_max=10.0), protocol=_PROTOCOL_OFF),
  "gopo": dict(estimator="gopo", params=dict(ties="average"), protocol=_PROTOCOL_OFF),
  "maxnorm_rloo": dict(estimator="maxnorm_rloo", params=dict(tau_res=DELTA_RES), protocol=_PROTOCOL_BINNING),
  "maxnorm_rloo_nobin": dict(estimator="maxnorm_rloo", params=dict(tau_res=DELTA_RES), protocol=_PROTOCOL_ON),
  "maxnorm_rloo_protocol_off": dict(
    estimator="maxnorm_rloo", params=dict(tau_res=DELTA_RES), protocol=dict(gate=False, binning=True, zero_group="keep")
  ),
  "maxnorm_dr_grpo": dict(estimator="maxnorm_dr_grpo", params=dict(tau_res=DELTA_RES), protocol=_PROTOCOL_BINNING),
  "avspo": dict(estimator="avspo", protocol=_PROTOCOL_OFF),
  "f_grpo": dict(estimator="f_grpo", params=dict(gamma=1.0, success_threshold=0.5), protocol=_PROTOCOL_OFF),
  "dapo": dict(
    estimator="grpo",
    protocol=_PROTOCOL_OFF,
    loss=dict(clip_low=0.2, clip_high=0.28, aggregation="token-mean"),
    filter=dict(mode="resample"),
    overlong=dict(penalty=True, mask_truncated=True),
  ),
  "filter_drop": dict(estimator="grpo", protocol=_PROTOCOL_OFF, filter=dict(mode="drop")),
}

# ---------------------------------------------------------------------------------------------
# Model presets: the built-in tiny decoder, or a Hugging Face checkpoint directory (config.json,
# *.safetensors, tokenizer.json) by path; `mesh` is the preset's default mesh on a TPU slice.
_HF = "hf://"  # resolved against $MAXNORM_HF_HOME (default ~/hf) by maxnorm_jax.train.loop.resolve_path
MODELS = {
  "tiny": dict(kind="tiny", path="", mesh=dict(data=-1, fsdp=1, tensor=1, expert=1)),
  "qwen2.5-0.5b": dict(
    kind="hf", path=_HF + "Qwen/Qwen2.5-0.5B-Instruct", mesh=dict(data=-1, fsdp=4, tensor=1, expert=1)
  ),
  "qwen2.5-1.5b": dict(
    kind="hf", path=_HF + "Qwen/Qwen2.5-1.5B-Instruct", mesh=dict(data=-1, fsdp=8, tensor=1, expert=1)
  ),
  "qwen2.5-3b": dict(kind="hf", path=_HF + "Qwen/Qwen2.5-3B-Instruct", mesh=dict(data=-1, fsdp=8, tensor=1, expert=1)),
  "qwen2.5-7b": dict(kind="hf", path=_HF + "Qwen/Qwen2.5-7B-Instruct", mesh=dict(data=-1, fsdp=16, tensor=1, expert=1)),
  "qwen2.5-14b": dict(
    kind="hf", path=_HF + "Qwen/Qwen2.5-14B-Instruct", mesh=dict(data=-1, fsdp=16, tensor=2, expert=1)
  ),
  "qwen2.5-math-1.5b": dict(
    kind="hf", path=_HF + "Qwen/Qwen2.5-Math-1.5B", mesh=dict(data=-1, fsdp=8, tensor=1, expert=1)
  ),
  "qwen2.5-math-7b": dict(
    kind="hf", path=_HF + "Qwen/Qwen2.5-Math-7B", mesh=dict(data=-1, fsdp=16, tensor=1, expert=1)
  ),
  "qwen3-0.6b": dict(kind="hf", path=_HF + "Qwen/Qwen3-0.6B", mesh=dict(data=-1, fsdp=4, tensor=1, expert=1)),
  "qwen3-8b": dict(kind="hf", path=_HF + "Qwen/Qwen3-8B", mesh=dict(data=-1, fsdp=16, tensor=1, expert=1)),
  "qwen3-32b": dict(kind="hf", path=_HF + "Qwen/Qwen3-32B", mesh=dict(data=-1, fsdp=16, tensor=4, expert=1)),
  "qwen3-30b-a3b": dict(kind="hf", path=_HF + "Qwen/Qwen3-30B-A3B", mesh=dict(data=-1, fsdp=8, tensor=1, expert=4)),
}

# Dataset presets for the seeds' benchmarks: (source, field preset, verifier task).
DATASETS = {
  "gsm8k": ("sample:gsm8k", "gsm8k", "math"),
  "math500": ("sample:math500", "math500", "math"),
  "deepmath": ("sample:deepmath", "deepmath", "math"),
  "livecodebench": ("sample:livecodebench", "livecodebench", "code"),
}
BUILTIN_TASKS = ("arith", "arith_digits", "arith_noisy", "code")
# Prompt and completion lengths in tokens (character tokens for the tiny model's built-in tasks).
LENGTHS = {"arith": (8, 5), "arith_digits": (8, 5), "arith_noisy": (8, 5), "code": (384, 256)}
DATASET_LENGTHS = (512, 1024)


def _parse(arg):
  out = dict(method="maxnorm_rloo", task="arith_digits", model="tiny", runlocal="False")
  for item in filter(None, (arg or "").split(",")):
    if "=" not in item:
      raise ValueError(f"config argument {item!r} must be key=value (keys: {sorted(out)})")
    key, value = item.split("=", 1)
    if key not in out:
      raise ValueError(f"unknown config argument {key!r}; known: {sorted(out)}")
    out[key] = value
  if out["method"] not in METHODS:
    raise ValueError(f"unknown method {out['method']!r}; rows: {sorted(METHODS)}")
  if out["model"] not in MODELS:
    raise ValueError(f"unknown model {out['model']!r}; presets: {sorted(MODELS)}")
  if out["task"] not in BUILTIN_TASKS and out["task"] not in DATASETS:
    raise ValueError(f"unknown task {out['task']!r}; known: {sorted(BUILTIN_TASKS + tuple(DATASETS))}")
  if out["runlocal"] not in ("True", "False", "true", "false", "1", "0"):
    raise ValueError(f"runlocal must be True or False, got {out['runlocal']!r}")
  out["runlocal"] = out["runlocal"] in ("True", "true", "1")
  return out


def _apply_row(config, row):
  config.advantage.estimator = row["estimator"]
  for k, v in row.get("params", {}).items():
    config.advantage.params[k] = v
  for section in ("protocol", "loss", "filter", "overlong"):
    for k, v in row.get(section, {}).items():
      config[section][k] = v


def get_config(arg=None):
  a = _parse(arg)
  c = mlc.ConfigDict()
  c.method = a["method"]
  c.task = a["task"]
  c.seed = 0
  c.runlocal = a["runlocal"]

  preset = MODELS[a["model"]]
  c.model = mlc.ConfigDict(
    dict(
      preset=a["model"],
      kind=preset["kind"],
      path=preset["path"],
      # Shape of the tiny built-in decoder (ignored for Hugging Face checkpoints).
      hidden_size=128,
      intermediate_size=384,
      num_layers=2,
      num_heads=4,
      num_kv_heads=2,
      head_dim=32,
      param_dtype="float32",
      dtype="float32",
      remat=False,
    )
  )
  c.mesh = mlc.ConfigDict(preset["mesh"])
  # Logical axis -> mesh axes (sharding rules live in the config, big_vision style).
  c.rules = (
    ("batch", ("data", "fsdp")),
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("mlp", "tensor"),
    ("expert", "expert"),
    ("layers", None),
    ("seq", None),
  )

  if a["task"] in BUILTIN_TASKS:
    source, fields, verifier = "builtin:" + a["task"], "", a["task"]
  else:
    source, fields, verifier = DATASETS[a["task"]]
  c.data = mlc.ConfigDict(
    dict(
      source=source,
      fields=fields,
      tokenizer="char" if preset["kind"] == "tiny" else preset["path"],
      prompt_format="plain" if preset["kind"] == "tiny" else "chat",
      system_prompt="",
      batch_size=64,
      max_prompt_len=LENGTHS.get(a["task"], DATASET_LENGTHS)[0],
      skip_bad_rows=False,
      builtin_n=0,
      eval_source="",
    )
  )
  c.reward = mlc.ConfigDict(dict(verifier=verifier, num_workers=2, timeout_s=0.0))
  c.rollout = mlc.ConfigDict(
    dict(group_size=8, max_new_tokens=LENGTHS.get(a["task"], DATASET_LENGTHS)[1], temperature=1.0, top_p=1.0, top_k=0)
  )

  c.advantage = mlc.ConfigDict(dict(estimator="maxnorm_rloo", params=mlc.ConfigDict()))
  c.protocol = mlc.ConfigDict(dict(delta_res=DELTA_RES, gate=True, binning=True, zero_group="skip"))
  c.filter = mlc.ConfigDict(dict(mode="none", collapse_std=1e-6, max_rounds=4))
  c.overlong = mlc.ConfigDict(dict(penalty=False, buffer_len=2, penalty_factor=1.0, mask_truncated=False))
  c.loss = mlc.ConfigDict(
    dict(
      surrogate="ppo",
      clip_low=0.2,
      clip_high=0.2,
      dual_clip=0.0,
      aggregation="token-mean",
      beta=0.01,
      kl_kind="k3",
      kl_in="loss",
      entropy_coef=0.0,
    )
  )
  c.reference = "init"  # "init" (the starting weights) or a checkpoint / Hugging Face directory

  c.train = mlc.ConfigDict(dict(steps=750, ppo_epochs=1, minibatches=4, grad_accum=1))
  c.optim = mlc.ConfigDict(
    dict(
      lr=5e-4,
      warmup_steps=20,
      schedule="cosine",
      end_lr_frac=0.1,
      weight_decay=0.0,
      b1=0.9,
      b2=0.99,
      eps=1e-8,
      max_grad_norm=1.0,
    )
  )
  c.sft = mlc.ConfigDict(dict(steps=300, batch_size=64, lr=3e-3, warmup_steps=20))
  c.eval = mlc.ConfigDict(dict(every=75, num_prompts=256, k=4, temperature=1.0))
  c.checkpoint = mlc.ConfigDict(dict(every=75, max_to_keep=2, on_preemption=True))
  c.log = mlc.ConfigDict(dict(diagnostics_every=25, cards_every=75, tensorboard=True, progress=True))

  _apply_row(c, METHODS[a["method"]])

  if c.runlocal:
    c.model.update(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16)
    c.data.update(batch_size=4, builtin_n=256)
    c.rollout.update(group_size=4, max_new_tokens=4)
    c.train.update(steps=3, minibatches=2)
    c.optim.update(warmup_steps=1)
    c.sft.update(steps=30, batch_size=16, lr=1e-2)
    c.eval.update(every=2, num_prompts=8, k=2)
    c.checkpoint.update(every=2)
    c.log.update(diagnostics_every=2, cards_every=2, progress=False)
    c.reward.num_workers = 1
  return c
