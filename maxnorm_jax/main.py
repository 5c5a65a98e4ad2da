"""CLI: `python -m maxnorm_jax.main --config=configs/default.py[:args] --workdir=DIR [--config.x.y=v]`.

Trains a policy with the RL trainer (`maxnorm_jax.train.train`) from an ml-collections config; a
run started again with the same command resumes from its latest checkpoint. Without --config it
uses configs/default.py (the built-in default: the tiny model on a built-in task).

Exit status: 0 when the run reached train.steps (it prints "done: WORKDIR" and writes
WORKDIR/FINISHED.json); 75 (EX_TEMPFAIL) when SIGTERM stopped it after saving its step ("preempted:
..."; run the same command to resume); 1 on an error. The bandit lab
that reproduces the seeds' tables in seconds is `python -m maxnorm_jax.lab --workdir=DIR`.
"""

import os
import sys

from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags


def default_config_path() -> str:
  """configs/default.py: the copy an installed package ships (maxnorm_jax/configs/, see setup.py),
  else the source tree's (an editable install or a checkout on PYTHONPATH)."""
  package = os.path.dirname(os.path.abspath(__file__))
  for path in (
    os.path.join(package, "configs", "default.py"),
    os.path.join(os.path.dirname(package), "configs", "default.py"),
  ):
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(f"no configs/default.py in {package} or next to it; pass --config=PATH")


DEFAULT_CONFIG = default_config_path()

FLAGS = flags.FLAGS
if "workdir" not in FLAGS:  # maxnorm_jax.lab's CLI defines it too
  flags.DEFINE_string("workdir", "runs/default", "Directory for checkpoints, metrics and cards.")
config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "A config file with get_config(arg).", lock_config=True)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from maxnorm_jax.parallel.distributed import initialize_from_env

  initialize_from_env()  # before anything touches a device
  from maxnorm_jax.train.loop import PREEMPTED_EXIT_CODE, Preempted, train

  # orbax and grain log every save at INFO; the run's own messages are warnings or the progress bar.
  absl_logging.set_verbosity(absl_logging.WARNING)
  try:
    rows = train(FLAGS.config, FLAGS.workdir)
  except Preempted as e:
    print(f"{e} (workdir {FLAGS.workdir})", flush=True)
    sys.exit(PREEMPTED_EXIT_CODE)
  evals = [r["eval/reward_mean"] for r in rows if r.get("eval/reward_mean") is not None]
  if rows and evals:
    print(f"eval/reward_mean: {' -> '.join(f'{v:.3f}' for v in evals)}")
  print(f"done: {FLAGS.workdir}")


if __name__ == "__main__":
  app.run(main)
