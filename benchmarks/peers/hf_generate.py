"""transformers `generate` on the peer checkpoint: all rows in one batch, sampling at a temperature
(top-k and top-p off), on seeded random prompt ids; prints one JSON object (benchmarks/peers/common.py).

  .venv-bench/bin/python benchmarks/peers/hf_generate.py --model runs/bench_ckpt [--eos off] [--repeats 3]

--eos off: the end-of-sequence id is not a stop token, every row makes --new-tokens tokens;
--eos on: a row stops after the model's eos id (its length counts it), up to --new-tokens.
"""

import json
import sys

import numpy as np
import torch
import transformers
from common import generation_args, json_stdout, prompt_ids, result, timed


def main():
  args = generation_args(__doc__)
  out_json = json_stdout()
  torch.set_num_threads(args.threads)
  model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype)).eval()
  gen = model.generation_config
  eos = gen.eos_token_id
  gen.update(
    eos_token_id=eos if args.eos == "on" else None,
    pad_token_id=gen.pad_token_id if gen.pad_token_id is not None else 0,
    do_sample=True,
    temperature=args.temperature,
    top_k=0,
    top_p=1.0,
    max_new_tokens=args.new_tokens,
  )
  ids = torch.from_numpy(prompt_ids(args.rows, args.prompt_len, model.config.vocab_size, args.seed))
  mask = torch.ones_like(ids)

  def run(r):
    torch.manual_seed(args.seed + r)
    with torch.inference_mode():
      return model.generate(ids, attention_mask=mask, generation_config=gen)[:, args.prompt_len :].numpy()

  times = []
  for r in range(args.repeats + 1):
    out, seconds = timed(lambda: run(r))
    print(f"run {r}{' (warm-up)' if r == 0 else ''}: {seconds:.2f} s", file=sys.stderr)
    if r:
      times.append(seconds)
  if args.eos == "on":
    ended = out == eos
    lengths = np.where(ended.any(1), ended.argmax(1) + 1, out.shape[1])
  else:
    lengths = np.full(args.rows, out.shape[1])
  print(
    json.dumps(
      result(args, lengths, times, peer="transformers", torch=torch.__version__, version=transformers.__version__)
    ),
    file=out_json,
    flush=True,
  )


if __name__ == "__main__":
  main()
