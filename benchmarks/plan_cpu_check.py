"""One real RL step of Qwen2.5-0.5B's published shape on this CPU, beside the plan's prediction.

    python benchmarks/plan_cpu_check.py [--prompts 4] [--group 4] [--new-tokens 32] [--prompt-len 64]

Random weights (its 151,936-token vocabulary, bf16 parameters and compute), 8 simulated CPU devices
and the preset's mesh (fsdp=4, data=2). First `python -m maxnorm_jax.plan --topology=cpu` plans the
same config in a subprocess (per-device peak of each piece, roofline time from this CPU's measured
matmul peak and copy bandwidth); then this process runs the step's device work with the trainer's
functions as it runs them by default (the shared prefill + decode, the sampler's log-probs as the
old policy's, the reference's log-prob pass, advantage card, PPO update) twice and
times the second run, and reports its peak resident memory (getrusage) above the memory after
start-up. Prints one JSON object.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, ROOT)


def overrides(a) -> dict:
  return {
    "model.param_dtype": "bfloat16",
    "model.dtype": "bfloat16",
    "data.batch_size": a.prompts,
    "rollout.group_size": a.group,
    "rollout.max_new_tokens": a.new_tokens,
    "data.max_prompt_len": a.prompt_len,
    "train.minibatches": a.minibatches,
    "train.grad_accum": a.grad_accum,  # the preset's values are sized for 64 x 16 rows on its slice
    "train.logprob_microbatches": a.logprob_microbatches,
  }


def plan(a) -> dict:
  cmd = [
    sys.executable,
    "-m",
    "maxnorm_jax.plan",
    f"--config={ROOT}/configs/default.py:model=qwen2.5-0.5b,task=math500",
  ]
  cmd += ["--topology=cpu", "--json"] + [f"--config.{k}={v}" for k, v in overrides(a).items()]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
  if proc.returncode not in (0, 1):
    raise RuntimeError(proc.stderr[-3000:])
  return json.loads(proc.stdout)


def max_rss_bytes() -> int:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def stage(name: str, t0: float) -> None:
  """One stderr line per stage (seconds, resident and peak GiB), so a run stopped for memory still
  says how far it got."""
  with open("/proc/self/status") as f:
    rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))
  gib = 1024**3
  print(
    f"[cpu_check] {name}: {time.perf_counter() - t0:.1f} s, RSS {rss / gib:.2f} GiB, peak {max_rss_bytes() / gib:.2f} GiB",
    file=sys.stderr,
    flush=True,
  )


def real_step(a) -> dict:
  import importlib.util

  import jax
  import jax.numpy as jnp
  import numpy as np

  from maxnorm_jax.core import advantages, losses
  from maxnorm_jax.models.create import create_model
  from maxnorm_jax.parallel import replicated_array, rows_array
  from maxnorm_jax.parallel.mesh import make_mesh
  from maxnorm_jax.plan.pieces import model_config_of
  from maxnorm_jax.sampling import Categorical, generate_from_weights
  from maxnorm_jax.train import specs
  from maxnorm_jax.train import step as step_lib
  from maxnorm_jax.train.state import create_train_state, state_shardings

  spec = importlib.util.spec_from_file_location("default_config", os.path.join(ROOT, "configs", "default.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config("model=qwen2.5-0.5b,task=math500")
  for key, value in overrides(a).items():
    section, name = key.split(".")
    c[section][name] = value
  base_rss = max_rss_bytes()
  t_start = time.perf_counter()
  cfg, _ = model_config_of(c)
  mesh = make_mesh(dict(c.mesh))
  rules = specs.rules_of(c)
  params = create_model(cfg, mesh, rules).weights()
  optimizer = specs.optimizer_of(c)
  state = create_train_state(params, optimizer, 0, advantages.initial_state(c.advantage.estimator), mesh)
  reference = jax.tree.map(jnp.copy, state.params)
  stage("state (params, Adam moments, reference) placed", t_start)
  p, g, n, length = a.prompts, a.group, a.new_tokens, a.prompt_len
  rng = np.random.default_rng(0)
  prompts = rng.integers(0, cfg.vocab_size - 1, (p, length)).astype(np.int32)
  # As the trainer samples by default (rollout.shared_prefill): P prompts prefilled once, G rows each.
  prompt_ids = rows_array(prompts, mesh, rules)
  prompt_mask = rows_array(np.ones((p, length), bool), mesh, rules)
  ids = rows_array(np.repeat(prompts, g, axis=0), mesh, rules)
  pmask = rows_array(np.ones((p * g, length), bool), mesh, rules)
  method = Categorical(temperature=1.0)
  update_spec = specs.update_spec_of(c, cfg, mesh, rules, optimizer)
  card_spec = step_lib.CardSpec(
    estimator=c.advantage.estimator,
    params=tuple(sorted(specs.plain(c.advantage.params).items())),
    delta_res=float(c.protocol.delta_res),
    gate=bool(c.protocol.gate),
    binning=bool(c.protocol.binning),
    zero_group=c.protocol.zero_group,
    drop_collapsed=c.filter.mode == "drop",
    collapse_std=float(c.filter.collapse_std),
  )
  hparams = {k: replicated_array(np.float32(v), mesh) for k, v in specs.hparam_values(c, cfg).items()}

  def one_step(state, step):
    times = {}
    t0 = time.perf_counter()
    key = jax.random.fold_in(jax.random.key(0), step)
    out = generate_from_weights(
      cfg,
      state.params,
      prompt_ids,
      prompt_mask,
      key,
      n,
      method=method,
      eos_id=cfg.vocab_size - 1,
      pad_id=0,
      mesh=mesh,
      rules=rules,
      num_samples=g,
    )
    jax.block_until_ready(out.tokens)
    times["generate"] = time.perf_counter() - t0
    stage(f"step {step}: generated", t_start)
    t0 = time.perf_counter()
    m = a.logprob_microbatches
    # rollout.old_logp="sampler" (the default): the old log-probs are the sampler's; the reference's
    # pass is the one log-prob pass of the step.
    old = out.logprobs
    ref, _ = step_lib.sequence_logprobs(
      cfg, 1.0, reference, ids, pmask, out.tokens, out.mask, m, mesh=mesh, rules=rules
    )
    jax.block_until_ready(ref)
    times["logprobs"] = time.perf_counter() - t0
    stage(f"step {step}: reference log-probs", t_start)
    rewards = rng.integers(0, 2, (p, g)).astype(np.float32)
    sample_mask = np.ones((p, g), bool)
    card, _ = step_lib.advantage_card(card_spec, jnp.asarray(rewards), jnp.asarray(sample_mask), state.estimator_state)
    w = losses.card_to_sequences(card, sample_mask)
    batch = step_lib.Rollout(
      prompt_ids=ids,
      prompt_mask=pmask,
      tokens=out.tokens,
      mask=out.mask,
      loss_mask=out.mask,
      old_logp=old,
      ref_logp=ref,
      advantages=rows_array(np.asarray(w.advantages), mesh, rules),
      kl_weight=rows_array(np.asarray(w.kl_weight), mesh, rules),
      takes_part=rows_array(np.asarray(w.takes_part), mesh, rules),
    )
    t0 = time.perf_counter()
    state = state.replace(estimator_state=card.state)
    state, metrics = step_lib.update_fn(update_spec, state_shardings(state))(state, batch, hparams)
    jax.block_until_ready(metrics)
    times["update"] = time.perf_counter() - t0
    stage(f"step {step}: update", t_start)
    times["step"] = sum(times.values())
    return state, times

  t0 = time.perf_counter()
  state, _ = one_step(state, 0)
  first = time.perf_counter() - t0
  state, times = one_step(state, 1)
  return dict(
    first_step_s=first,
    second_step=times,
    max_rss_bytes=max_rss_bytes(),
    rss_after_startup_bytes=base_rss,
    devices=len(jax.devices()),
    mesh=dict(mesh.shape),
  )


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--prompts", type=int, default=4)
  ap.add_argument("--group", type=int, default=4)
  ap.add_argument("--new-tokens", type=int, default=32)
  ap.add_argument("--prompt-len", type=int, default=64)
  ap.add_argument("--minibatches", type=int, default=2)
  ap.add_argument("--grad-accum", type=int, default=1)
  ap.add_argument("--logprob-microbatches", type=int, default=1)
  ap.add_argument("--plan-out", default="", help="also write the plan's JSON here before the real step runs")
  a = ap.parse_args()
  planned = plan(a)
  if a.plan_out:
    with open(a.plan_out, "w") as f:
      json.dump(planned, f, indent=1)
  gib = 1024**3
  print(
    f"[cpu_check] plan: peak {planned['peak_bytes_per_chip'] / gib:.2f} GiB per device in {planned['peak_piece']}, "
    f"x {planned['chips']} devices = {planned['peak_bytes_per_chip'] * planned['chips'] / gib:.2f} GiB",
    file=sys.stderr,
    flush=True,
  )
  measured = real_step(a)
  per_device = {k: v["peak_bytes"] for k, v in planned["pieces"].items()}
  print(
    json.dumps(
      dict(
        shape=planned["shapes"],
        plan_peak_bytes_per_device=per_device,
        plan_peak_bytes_all_devices=planned["peak_bytes_per_chip"] * planned["chips"],
        plan_param_bytes_per_device=planned["param_bytes_per_chip"],
        plan_est_step_s=planned["est_step_s"],
        plan_est_s={k: v["est_s"] for k, v in planned["pieces"].items()},
        cpu_peak_flops=planned["peak_flops_per_chip"] * planned["chips"],
        cpu_bandwidth=planned["hbm_bandwidth_per_chip"] * planned["chips"],
        measured=measured,
        measured_rss_growth_bytes=measured["max_rss_bytes"] - measured["rss_after_startup_bytes"],
      ),
      indent=1,
    )
  )


if __name__ == "__main__":
  main()
