"""`python -m maxnorm_jax.lab --workdir=DIR`: the bandit lab (Table 3, the claims, the arcsine check)."""

from absl import app, flags

FLAGS = flags.FLAGS
if "workdir" not in FLAGS:  # maxnorm_jax.main defines it too
  flags.DEFINE_string("workdir", "runs/lab", "Directory for the lab's figures and summary.json.")


def main(argv):
  del argv
  from maxnorm_jax.lab import run  # after flag parsing, so --help stays fast

  result = run.run(FLAGS.workdir)
  print(f"lab finished in {result.seconds:.1f} s")


if __name__ == "__main__":
  app.run(main)
