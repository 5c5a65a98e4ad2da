"""One RL step at issue 11's shape, split into generate / verify / log-probs / update, for a checkout.

    python benchmarks/rl_step_shape.py ROOT [section.key=value ...]

ROOT is the checkout to import (run it once on main and once on a branch to compare them in one
session). Shape: the grpo row, 64 prompts x 8 samples, arith_digits prompts (at most 8 character
tokens), 64 new tokens at T=1, the tiny decoder at 4 layers x 256 (4 heads / 2 kv heads of 64,
MLP 768), beta 0.01, 4 minibatches; no SFT, evaluation, checkpoints or diagnostics. Prints the
medians over the steps after the first (which compiles) as one JSON line. STEPS (environment,
default 4) sets the number of steps.
"""

import importlib.util
import json
import os
import sys
import tempfile

import numpy as np


def main():
  root = os.path.abspath(sys.argv[1])
  sys.path.insert(0, root)
  from maxnorm_jax.train import train

  spec = importlib.util.spec_from_file_location("default_config", os.path.join(root, "configs", "default.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config("method=grpo")
  c.model.update(hidden_size=256, intermediate_size=768, num_layers=4, num_heads=4, num_kv_heads=2, head_dim=64)
  c.data.update(batch_size=64, max_prompt_len=8)
  c.rollout.update(group_size=8, max_new_tokens=64, temperature=1.0)
  c.loss.beta = 0.01
  c.train.update(steps=int(os.environ.get("STEPS", 4)), minibatches=4, grad_accum=1, ppo_epochs=1)
  c.sft.steps = 0
  c.eval.every = 0
  c.checkpoint.every = 0
  c.log.update(diagnostics_every=0, cards_every=0, tensorboard=False, progress=False)
  for item in sys.argv[2:]:
    key, value = item.split("=")
    section, name = key.split(".")
    old = c[section][name]
    c[section][name] = value == "True" if isinstance(old, bool) else type(old)(value)
  with tempfile.TemporaryDirectory() as workdir:
    rows = train(c, workdir)
  rows = [r for r in rows if r["step"] > 1]
  keys = ("time/generate", "time/verify", "time/logprobs", "time/update", "time/step")
  out = {k: round(float(np.median([r[k] for r in rows])), 3) for k in keys}
  out.update(root=root, args=sys.argv[2:], response_len_mean=rows[-1]["response_len_mean"], load=os.getloadavg()[0])
  print(json.dumps(out))


if __name__ == "__main__":
  main()
