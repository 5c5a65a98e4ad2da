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
  task      a built-in task (arith, arith_digits, arith_noisy, arith_mix, code) or a dataset preset of
            maxnorm_jax.data (gsm8k, math500, deepmath, livecodebench sample files)
  model     a key of MODELS (tiny, or a Hugging Face checkpoint such as qwen2.5-1.5b)
  runlocal  True: a few steps of a tiny model, well under a minute on a laptop CPU

Every value can then be overridden: --config.train.steps=8 --config.loss.beta=0.01. An unknown key
or an invalid value stops the run before anything is compiled, with a message naming the key.
"""

import ml_collections as mlc

from maxnorm_jax.config_args import parse_arg
from maxnorm_jax.method_rows import DELTA_RES, METHODS, apply_row
from maxnorm_jax.parallel.rules import DEFAULT_RULES

# Method rows (docs/DESIGN.md §3.7) live in maxnorm_jax/method_rows.py, shared with the
# bandit lab; a row sets the estimator and its parameters, the Protocol, and any other section's keys.
__all__ = ["DATASETS", "DELTA_RES", "METHODS", "MODELS", "get_config"]

# ---------------------------------------------------------------------------------------------
# Model presets: the built-in tiny decoder, or a Hugging Face checkpoint directory (config.json,
# *.safetensors, tokenizer.json) by path; `mesh` is the preset's default mesh on a TPU slice and
# `topology` the TPU slice it is planned for (`python -m maxnorm_jax.plan`, PLAN.md); `arch` is the
# checkpoint's published config.json (the keys the decoder reads), so a plan needs no download; a
# checkpoint's own config.json wins when it is present.
_HF = "hf://"  # resolved against $MAXNORM_HF_HOME (default ~/hf) by maxnorm_jax.train.loop.resolve_path


def _qwen2(hidden, inter, layers, heads, kv, vocab=151936, tied=True, theta=1_000_000.0, eps=1e-6, max_pos=32768):
  return dict(
    architectures=["Qwen2ForCausalLM"],
    model_type="qwen2",
    vocab_size=vocab,
    hidden_size=hidden,
    intermediate_size=inter,
    num_hidden_layers=layers,
    num_attention_heads=heads,
    num_key_value_heads=kv,
    head_dim=hidden // heads,
    tie_word_embeddings=tied,
    rope_theta=theta,
    rms_norm_eps=eps,
    max_position_embeddings=max_pos,
  )


def _qwen3(hidden, inter, layers, heads, kv, tied=False, max_pos=40960, **moe):
  return dict(
    architectures=["Qwen3MoeForCausalLM" if moe else "Qwen3ForCausalLM"],
    model_type="qwen3_moe" if moe else "qwen3",
    vocab_size=151936,
    hidden_size=hidden,
    intermediate_size=inter,
    num_hidden_layers=layers,
    num_attention_heads=heads,
    num_key_value_heads=kv,
    head_dim=128,
    tie_word_embeddings=tied,
    attention_bias=False,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    max_position_embeddings=max_pos,
    **moe,
  )


def _hf(name, mesh, topology, arch, sample_chunks=1):
  """A checkpoint preset. On its slice, a step at the seeds' largest RL shape (64 prompts x 16
  samples, 1,024 + 8,192 tokens) is planned with rematerialised layers, attention in query blocks
  of 512, update microbatches of 2 rows a chip, log-prob passes of 4 and, where the KV cache of
  all 1,024 rows would not fit, the sampler in `sample_chunks` passes (PLAN.md)."""
  rows_split = _chips(topology) // (mesh["tensor"] * mesh["expert"])  # devices the rows spread over
  return dict(
    kind="hf",
    path=_HF + name,
    mesh=mesh,
    topology=topology,
    arch=arch,
    model=dict(remat=True, attention_chunk=512),
    train=dict(grad_accum=128 // rows_split, logprob_microbatches=256 // rows_split),
    rollout=dict(sample_chunks=sample_chunks),
  )


def _chips(topology):
  """Chips of a v5p-N slice (N counts TensorCores, two per chip)."""
  return int(topology.split("-")[1]) // 2


def _mesh(fsdp, tensor=1, expert=1):
  return dict(data=-1, fsdp=fsdp, tensor=tensor, expert=expert)


MODELS = {
  "tiny": dict(kind="tiny", path="", mesh=_mesh(1), topology="v5e-4", arch={}),
  "qwen2.5-0.5b": _hf("Qwen/Qwen2.5-0.5B-Instruct", _mesh(4), "v5p-8", _qwen2(896, 4864, 24, 14, 2)),
  "qwen2.5-1.5b": _hf("Qwen/Qwen2.5-1.5B-Instruct", _mesh(8), "v5p-16", _qwen2(1536, 8960, 28, 12, 2)),
  "qwen2.5-3b": _hf("Qwen/Qwen2.5-3B-Instruct", _mesh(8), "v5p-16", _qwen2(2048, 11008, 36, 16, 2)),
  "qwen2.5-7b": _hf(
    "Qwen/Qwen2.5-7B-Instruct", _mesh(16), "v5p-32", _qwen2(3584, 18944, 28, 28, 4, vocab=152064, tied=False)
  ),
  "qwen2.5-14b": _hf(
    "Qwen/Qwen2.5-14B-Instruct",
    _mesh(16, tensor=2),
    "v5p-64",
    _qwen2(5120, 13824, 48, 40, 8, vocab=152064, tied=False, eps=1e-5),
  ),
  "qwen2.5-math-1.5b": _hf(
    "Qwen/Qwen2.5-Math-1.5B", _mesh(8), "v5p-16", _qwen2(1536, 8960, 28, 12, 2, theta=10_000.0, max_pos=4096)
  ),
  "qwen2.5-math-7b": _hf(
    "Qwen/Qwen2.5-Math-7B",
    _mesh(16),
    "v5p-32",
    _qwen2(3584, 18944, 28, 28, 4, vocab=152064, tied=False, theta=10_000.0, max_pos=4096),
  ),
  # Qwen3's KV cache is 8 heads x 128 wide: 1,024 rows x 9,216 tokens of it are 252 GiB a chip
  # for the 0.6B on 4 chips, 81 GiB for the 8B on 16 chips and 108 GiB for the 30B-A3B (rows over
  # 8 of its 32 chips), so these sample in passes.
  "qwen3-0.6b": _hf("Qwen/Qwen3-0.6B", _mesh(4), "v5p-8", _qwen3(1024, 3072, 28, 16, 8, tied=True), sample_chunks=8),
  "qwen3-8b": _hf("Qwen/Qwen3-8B", _mesh(16), "v5p-32", _qwen3(4096, 12288, 36, 32, 8), sample_chunks=2),
  "qwen3-32b": _hf("Qwen/Qwen3-32B", _mesh(16, tensor=4), "v5p-128", _qwen3(5120, 25600, 64, 64, 8)),
  "qwen3-30b-a3b": _hf(
    "Qwen/Qwen3-30B-A3B",
    _mesh(8, expert=4),
    "v5p-64",
    _qwen3(
      2048,
      6144,
      48,
      32,
      4,
      num_experts=128,
      num_experts_per_tok=8,
      moe_intermediate_size=768,
      norm_topk_prob=True,
      decoder_sparse_step=1,
      mlp_only_layers=[],
    ),
    sample_chunks=4,
  ),
}

# Dataset presets for the seeds' benchmarks: (source, field preset, verifier task).
DATASETS = {
  "gsm8k": ("sample:gsm8k", "gsm8k", "math"),
  "math500": ("sample:math500", "math500", "math"),
  "deepmath": ("sample:deepmath", "deepmath", "math"),
  "livecodebench": ("sample:livecodebench", "livecodebench", "code"),
}
BUILTIN_TASKS = ("arith", "arith_digits", "arith_noisy", "arith_mix", "code")
# Prompt and completion lengths in tokens (character tokens for the tiny model's built-in tasks).
LENGTHS = {"arith": (8, 5), "arith_digits": (8, 5), "arith_noisy": (8, 5), "arith_mix": (8, 5), "code": (384, 256)}
DATASET_LENGTHS = (512, 1024)


def _check_arg(a):
  if a.method not in METHODS:
    raise ValueError(f"unknown method {a.method!r}; rows: {sorted(METHODS)}")
  if a.model not in MODELS:
    raise ValueError(f"unknown model {a.model!r}; presets: {sorted(MODELS)}")
  if a.task not in BUILTIN_TASKS and a.task not in DATASETS:
    raise ValueError(f"unknown task {a.task!r}; known: {sorted(BUILTIN_TASKS + tuple(DATASETS))}")


def get_config(arg=None):
  a = parse_arg(arg, method="maxnorm_rloo", task="arith_digits", model="tiny", runlocal=False)
  _check_arg(a)
  preset = MODELS[a.model]
  if a.task in BUILTIN_TASKS:
    source, fields, verifier = "builtin:" + a.task, "", a.task
  else:
    source, fields, verifier = DATASETS[a.task]
  prompt_len, completion_len = LENGTHS.get(a.task, DATASET_LENGTHS)

  c = mlc.ConfigDict()
  c.method = a.method  # the row of METHODS applied over this base config (recorded in the run's metrics)
  c.task = a.task  # the `task` argument: a built-in task or a dataset preset (sets data.source and reward.verifier)
  c.seed = 0  # seeds the model init, the data order and the sampling keys
  c.runlocal = a.runlocal  # True: the tiny smoke-test sizes set at the end of get_config

  c.model = mlc.ConfigDict()
  c.model.preset = a.model  # the key of MODELS this section came from
  c.model.kind = preset["kind"]  # "tiny" (the built-in decoder) or "hf" (a Hugging Face checkpoint)
  c.model.path = preset["path"]  # the checkpoint directory (or hf://org/name) when kind="hf"
  c.model.hidden_size = 128  # tiny decoder: residual width (the shapes below are ignored for kind="hf")
  c.model.intermediate_size = 384  # tiny decoder: MLP hidden width
  c.model.num_layers = 2  # tiny decoder: number of blocks
  c.model.num_heads = 4  # tiny decoder: query heads
  c.model.num_kv_heads = 2  # tiny decoder: key/value heads (grouped-query attention; divides num_heads)
  c.model.head_dim = 32  # tiny decoder: width of one head
  c.model.param_dtype = "float32"  # dtype the weights are stored and updated in
  c.model.dtype = "float32"  # dtype of the forward pass (e.g. "bfloat16" on TPU)
  c.model.remat = False  # rematerialise each block in the backward pass (less memory, more compute)
  c.model.attention_chunk = 0  # > 0: whole-sequence attention in query blocks of this size (bounds the scores)
  c.model.arch = mlc.ConfigDict(preset["arch"])  # the checkpoint's published config.json (used without one)
  c.model.topology = preset["topology"]  # the TPU slice the preset is planned for (python -m maxnorm_jax.plan)
  c.model.update(preset.get("model", {}))  # the preset's memory settings (remat, attention_chunk)

  # Mesh axis sizes (data, fsdp, tensor, expert); -1 takes the devices the others leave.
  c.mesh = mlc.ConfigDict(preset["mesh"])
  # Logical axis -> mesh axes (big_vision style), by default the one table the model and the sampler use too.
  c.rules = DEFAULT_RULES

  c.data = mlc.ConfigDict()
  c.data.source = source  # training prompts: a file, a glob, builtin:<task> or sample:<name>
  c.data.fields = (
    fields  # field preset of maxnorm_jax.data (which record keys hold prompt and answer); "" = the source's own
  )
  c.data.tokenizer = "char" if preset["kind"] == "tiny" else preset["path"]  # "char" or a tokenizer.json directory
  c.data.prompt_format = (
    "plain" if preset["kind"] == "tiny" else "chat"
  )  # "plain" text or the tokenizer's chat template
  c.data.system_prompt = ""  # system message of the chat format ("" = none)
  c.data.batch_size = 64  # prompts per RL step (P); each is sampled rollout.group_size times
  c.data.max_prompt_len = prompt_len  # prompt tokens; longer prompts are an error unless skip_bad_rows
  c.data.skip_bad_rows = False  # True: drop rows that are malformed or too long instead of failing on them
  c.data.builtin_n = 0  # problems a builtin:<task> source generates for training (0 = the task's default number)
  c.data.eval_source = ""  # default eval set ("" = a built-in task's test split, else data.source's held-out split)
  c.data.eval_fraction = 0.05  # held-out share of a file data.source (prompt-text hash, at most eval.num_prompts)

  c.reward = mlc.ConfigDict()
  c.reward.verifier = verifier  # the task whose verifier scores a completion (arith*, code, math)
  c.reward.num_workers = 2  # verifier worker processes
  c.reward.timeout_s = 0.0  # per-completion verifier deadline in seconds (0 = the task's own default)
  c.reward.worker_memory_mb = 4096  # address-space cap of each verifier worker in MiB (0 = none)
  c.reward.max_rejected_frac = 0.5  # a step whose samples are more than this fraction unscored is reported loudly
  c.reward.on_rejected = "warn"  # such a step: "warn" (and train on what is left) or "stop" the run

  c.rollout = mlc.ConfigDict()
  c.rollout.group_size = 8  # samples per prompt (G), the group every estimator normalises within
  c.rollout.max_new_tokens = completion_len  # completion length limit; longer completions are truncated
  c.rollout.temperature = 1.0  # sampling temperature of the rollouts
  c.rollout.top_p = 1.0  # nucleus sampling mass (1 = off)
  c.rollout.top_k = 0  # top-k sampling (0 = off)
  c.rollout.old_logp = "sampler"  # PPO old log-probs: "sampler" (the sampler's, no extra pass) or "recompute" (a pass)
  # prompts and completions cut to the batch's longest, rounded up to limit/8, /4, /2 or limit
  c.rollout.length_buckets = True
  c.rollout.shared_prefill = True  # prefill each prompt once and share its KV cache by its G samples
  c.rollout.sample_chunks = 1  # sample the rows in this many passes (the KV cache holds rows / sample_chunks)
  # 0: one decode loop over all rows until the last one ends; N > 0: every N steps, once at most half
  # of the rows still run, move those to a smaller batch (one scalar read per N steps): long-tailed
  # completion lengths then cost what the rows that run cost (BENCHMARKS.md, "Rollouts").
  c.rollout.compact_every = 0
  c.rollout.update(preset.get("rollout", {}))  # the preset's sampler passes on its slice (PLAN.md)

  c.advantage = mlc.ConfigDict()
  c.advantage.estimator = "maxnorm_rloo"  # a name of maxnorm_jax.core.advantages' registry (set by the method row)
  c.advantage.params = mlc.ConfigDict()  # that estimator's keyword parameters (set by the row; checked by name)

  c.protocol = mlc.ConfigDict()
  c.protocol.delta_res = DELTA_RES  # reward resolution: gaps below it are not credible
  c.protocol.gate = True  # drop groups whose reward span is below delta_res
  c.protocol.binning = True  # round rewards to the delta_res grid before the estimator
  c.protocol.zero_group = (
    "skip"  # "skip": groups with all-zero advantages leave the update and its KL; "keep": stay in the KL
  )

  c.filter = mlc.ConfigDict()
  c.filter.mode = "none"  # group filter: "none", "drop" (collapsed groups) or "resample" (DAPO dynamic sampling)
  c.filter.collapse_std = 1e-6  # a group whose reward std is below this is collapsed (no contrast to learn from)
  c.filter.max_rounds = 4  # mode="resample": at most this many sampling rounds per step

  c.overlong = mlc.ConfigDict()
  c.overlong.penalty = False  # DAPO soft overlong punishment on the reward
  c.overlong.buffer_len = 2  # the penalty ramps from 0 to -penalty_factor over the last buffer_len tokens
  c.overlong.penalty_factor = 1.0  # size of the full overlong penalty
  c.overlong.mask_truncated = False  # truncated completions leave the loss (DAPO overlong filtering)

  c.loss = mlc.ConfigDict()
  c.loss.surrogate = "ppo"  # policy surrogate: "ppo" (clipped ratio), "cispo" or "gspo" (sequence ratio)
  c.loss.clip_low = 0.2  # ratio clip below: 1 - clip_low
  c.loss.clip_high = 0.2  # ratio clip above: 1 + clip_high (DAPO's clip-higher sets 0.28)
  c.loss.dual_clip = 0.0  # dual-clip constant c > 1 for negative advantages (0 = off)
  c.loss.aggregation = "token-mean"  # how token losses are averaged (see maxnorm_jax.core.losses.AGGREGATION_MODES)
  c.loss.beta = 0.01  # weight of the KL to the reference policy (0 = no reference pass)
  c.loss.kl_kind = "k3"  # KL estimator per token: "k1", "k2" or "k3" (Schulman's)
  c.loss.kl_in = (
    "loss"  # where the KL goes: "loss" (a penalty term) or "reward" (subtracted from the reward, beta-weighted)
  )
  c.loss.entropy_coef = 0.0  # weight of an entropy bonus (0 = off)
  c.reference = "init"  # the KL reference: "init" (the weights RL starts from) or a checkpoint / Hugging Face directory

  c.train = mlc.ConfigDict()
  c.train.steps = 750  # RL steps
  c.train.ppo_epochs = 1  # passes over each step's batch
  c.train.minibatches = 4  # optimiser updates per epoch (the batch's sequences split evenly)
  # microbatches accumulated into one minibatch's gradient (exact; on 2 CPU cores 32-row passes beat 128: BENCHMARKS.md)
  c.train.grad_accum = 1
  c.train.logprob_microbatches = 1  # passes the old / reference log-probs of a batch take (bounds activations)
  c.train.on_nonfinite = "skip"  # an update with a NaN/inf loss or gradient norm: "skip" it (logged) or "stop" the run
  c.train.update(preset.get("train", {}))  # the preset's microbatching on its slice (PLAN.md)

  c.optim = mlc.ConfigDict()
  c.optim.lr = 5e-4  # peak learning rate of the RL updates (AdamW)
  c.optim.warmup_steps = 20  # linear warm-up steps
  c.optim.schedule = "cosine"  # after warm-up: "cosine" decay or "constant"
  c.optim.end_lr_frac = 0.1  # cosine: the final learning rate as a fraction of lr
  c.optim.weight_decay = 0.0  # AdamW weight decay
  c.optim.b1 = 0.9  # Adam first-moment decay
  c.optim.b2 = 0.99  # Adam second-moment decay
  c.optim.eps = 1e-8  # Adam epsilon
  c.optim.max_grad_norm = 1.0  # global gradient-norm clip (0 = off)

  c.sft = mlc.ConfigDict()
  c.sft.steps = 300  # SFT warm-start steps on reference answers before RL (0 = none)
  c.sft.batch_size = 64  # SFT examples per step
  c.sft.lr = 3e-3  # SFT peak learning rate
  c.sft.warmup_steps = 20  # SFT linear warm-up steps

  c.eval = mlc.ConfigDict()
  c.eval.every = 75  # evaluate every this many RL steps, before the first and after the last (0 = never)
  c.eval.num_prompts = 256  # held-out problems per evaluation set
  c.eval.k = 4  # n: samples per problem (mean@n, pass@k and maj@k over them, plus one greedy sample)
  c.eval.temperature = 1.0  # sampling temperature of the evaluation samples
  c.eval.sets = ""  # further evaluation sets, "name=source,name=source" (metrics under eval/<name>/)
  c.eval.pass_k = (1, 2, 4, 8, 16, 32, 64)  # the k of pass@k and maj@k (those above eval.k are skipped)
  c.eval.bootstrap_resamples = 1000  # prompt resamples behind every evaluation metric's _std

  c.checkpoint = mlc.ConfigDict()
  c.checkpoint.every = 75  # save every this many RL steps (0 = never); a restarted run resumes from the latest
  c.checkpoint.max_to_keep = 2  # checkpoints kept on disk
  c.checkpoint.on_preemption = True  # on SIGTERM, save at the next step boundary and stop
  c.checkpoint.allow_changed = ""  # comma-separated keys a resume may change (e.g. "train.steps"); others are refused

  c.log = mlc.ConfigDict()
  c.log.diagnostics_every = 25  # gradient diagnostics (r_over_kl, dir_cardinal, ...) every this many steps (0 = off)
  c.log.cards_every = 75  # save the advantage card of every this many steps' batch (0 = off)
  c.log.tensorboard = True  # also write TensorBoard event files
  c.log.progress = True  # a progress bar on the terminal

  apply_row(c, a.method)

  if c.runlocal:
    c.model.update(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16)
    c.data.update(batch_size=4, builtin_n=256)
    c.rollout.update(group_size=4, max_new_tokens=4)
    c.train.update(steps=3, minibatches=2, grad_accum=1, logprob_microbatches=1)
    c.optim.update(warmup_steps=1)
    c.sft.update(steps=30, batch_size=16, lr=1e-2)
    c.eval.update(every=2, num_prompts=8, k=2)
    c.checkpoint.update(every=2)
    c.log.update(diagnostics_every=2, cards_every=2, progress=False)
    c.reward.num_workers = 1
  c.lock()
  c.advantage.params.unlock()  # per-estimator keys, checked against the estimator by validate()
  return c
