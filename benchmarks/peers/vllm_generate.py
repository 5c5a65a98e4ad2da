"""vLLM's CPU backend on the peer checkpoint: all rows submitted at once as token-id prompts (no
tokenizer work, no detokenisation), n=1 per request, sampling at a temperature (top-k and top-p off);
prints one JSON object (benchmarks/peers/common.py) with the engine's start-up time apart.

  .venv-bench/bin/python benchmarks/peers/vllm_generate.py --model runs/bench_ckpt [--eos off] [--repeats 3]

--eos off: ignore_eos, every row makes --new-tokens tokens; --eos on: a row stops after the model's eos id.
VLLM_CPU_OMP_THREADS_BIND (default cores 0..threads-1) and VLLM_CPU_KVCACHE_SPACE (GiB, default 1) are
read from the environment when set.
"""

import json
import os
import sys

import numpy as np
from common import generation_args, json_stdout, prompt_ids, result, timed


def main():
  args = generation_args(__doc__)
  out_json = json_stdout()
  os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
  os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
  os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
  import vllm
  from vllm.inputs import TokensPrompt

  with open(os.path.join(args.model, "config.json")) as f:
    config = json.load(f)
  vocab_size, eos = config["vocab_size"], config["eos_token_id"]
  llm, startup = timed(
    lambda: vllm.LLM(
      model=args.model,
      dtype=args.dtype,
      seed=args.seed,
      skip_tokenizer_init=True,
      max_model_len=args.prompt_len + args.new_tokens,
      max_num_seqs=args.rows,
      max_num_batched_tokens=max(args.rows * args.prompt_len, 2048),
    )
  )
  prompts = [
    TokensPrompt(prompt_token_ids=p.tolist()) for p in prompt_ids(args.rows, args.prompt_len, vocab_size, args.seed)
  ]
  params = vllm.SamplingParams(
    n=1,
    temperature=args.temperature,
    top_k=0,
    top_p=1.0,
    max_tokens=args.new_tokens,
    ignore_eos=args.eos == "off",
    stop_token_ids=[eos] if args.eos == "on" else None,  # without a tokenizer vLLM has no eos id of its own
    detokenize=False,
  )
  times = []
  for r in range(args.repeats + 1):
    outs, seconds = timed(lambda: llm.generate(prompts, params, use_tqdm=False))
    print(f"run {r}{' (warm-up)' if r == 0 else ''}: {seconds:.2f} s", file=sys.stderr)
    if r:
      times.append(seconds)
  lengths = np.array([len(o.outputs[0].token_ids) for o in outs])
  import torch

  print(
    json.dumps(
      result(args, lengths, times, peer="vllm", torch=torch.__version__, version=vllm.__version__, startup_s=startup)
    ),
    file=out_json,
    flush=True,
  )


if __name__ == "__main__":
  main()
