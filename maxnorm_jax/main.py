"""CLI of maxnorm_jax: `python -m maxnorm_jax.main --workdir=DIR`.

Until the trainer lands, the main job runs the bandit lab (`maxnorm_jax.lab.run`): it prints
seed 000's Table 3 for every estimator, the learning claims and the arcsine check, and writes
its PNG figures into the workdir.
"""

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", "runs/default", "Directory for the job's outputs.")


def main(argv):
  del argv
  from maxnorm_jax.lab import run  # after flag parsing, so --help stays fast

  result = run.run(FLAGS.workdir)
  print(f"lab finished in {result.seconds:.1f} s")


if __name__ == "__main__":
  app.run(main)
