"""launch/tpu_pod.sh --dry-run: the gcloud commands it would run, and its usage errors."""

import os
import shlex
import subprocess

from launch_helpers import LAUNCH, ROOT

SCRIPT = str(LAUNCH / "tpu_pod.sh")
MAIN_ARGS = ["--config=configs/default.py:method=grpo", "--workdir=gs://bucket/run 1", "--config.seed=3"]


def run_script(*args, tmp_path, env_extra=None):
  """Runs the script with a fake gcloud first on PATH that records any call."""
  fake = tmp_path / "bin"
  fake.mkdir(exist_ok=True)
  marker = tmp_path / "gcloud_called"
  (fake / "gcloud").write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexit 1\n')
  (fake / "gcloud").chmod(0o755)
  env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ['PATH']}", **(env_extra or {}))
  proc = subprocess.run(["bash", SCRIPT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
  assert not marker.exists(), "the script ran gcloud"
  return proc


def commands(stdout):
  lines = stdout.splitlines()
  assert lines and all(line.startswith("+ ") for line in lines), stdout
  return [shlex.split(line[2:]) for line in lines]


def find(cmds, *words):
  found = [c for c in cmds if c[: len(words)] == list(words)]
  assert len(found) >= 1, (words, cmds)
  return found


def test_dry_run_prints_create_copy_run_delete(tmp_path):
  flags = [
    "--name",
    "mx-run",
    "--zone",
    "us-east5-a",
    "--accelerator-type",
    "v5p-32",
    "--project",
    "proj",
    "--spot",
    "--dry-run",
  ]
  proc = run_script(*flags, "--", *MAIN_ARGS, tmp_path=tmp_path)
  assert proc.returncode == 0, proc.stderr
  cmds = commands(proc.stdout)
  gcloud = [c for c in cmds if c[0] == "gcloud"]
  for c in gcloud:  # every gcloud command names the slice, its zone and project
    assert "mx-run" in " ".join(c) and c[c.index("--zone") + 1] == "us-east5-a", c
    assert c[c.index("--project") + 1] == "proj", c

  (create,) = find(cmds, "gcloud", "compute", "tpus", "tpu-vm", "create", "mx-run")
  assert create[create.index("--accelerator-type") + 1] == "v5p-32"
  # The plan runs first, on this machine, for the slice's topology with the run's --config arguments.
  (plan,) = [c for c in cmds if "maxnorm_jax.plan" in c]
  assert cmds.index(plan) < cmds.index(create)
  assert "--topology=v5p-32" in plan and "JAX_PLATFORMS=cpu" in plan
  assert plan[-2:] == ["--config=configs/default.py:method=grpo", "--config.seed=3"]
  assert create[create.index("--version") + 1] == "v2-alpha-tpuv5"
  assert "--spot" in create

  (scp,) = find(cmds, "gcloud", "compute", "tpus", "tpu-vm", "scp")
  assert "--worker=all" in scp and any(a.startswith("mx-run:") for a in scp)

  ssh = find(cmds, "gcloud", "compute", "tpus", "tpu-vm", "ssh", "mx-run")
  assert all("--worker=all" in c for c in ssh)
  remote = [c[c.index("--command") + 1] for c in ssh]
  assert any("pip install" in r and "jax[tpu]" in r and "-e ." in r for r in remote), remote
  main = [shlex.split(r) for r in remote if "maxnorm_jax.main" in r]
  assert len(main) == 1
  assert "MAXNORM_TPU_POD=1" in main[0]
  assert main[0][-len(MAIN_ARGS) :] == MAIN_ARGS  # the arguments survive both levels of quoting

  (delete,) = find(cmds, "gcloud", "compute", "tpus", "tpu-vm", "delete", "mx-run")
  assert "--quiet" in delete
  names = [c[4] for c in gcloud]
  assert names[0] == "create" and names[-1] == "delete"
  assert names.index("scp") < max(i for i, n in enumerate(names) if n == "ssh")


def test_dry_run_with_git_clone_and_keep(tmp_path):
  proc = run_script(
    "--dry-run",
    "--keep",
    "--skip-plan",
    "--name",
    "mx2",
    "--zone",
    "europe-west4-a",
    "--accelerator-type",
    "v6e-8",
    "--git",
    "https://example.com/maxnorm.git",
    "--ref",
    "main",
    "--",
    "--x=1",
    tmp_path=tmp_path,
  )
  assert proc.returncode == 0, proc.stderr
  cmds = commands(proc.stdout)
  assert not [c for c in cmds if "scp" in c or "delete" in c or "maxnorm_jax.plan" in c]
  (create,) = find(cmds, "gcloud", "compute", "tpus", "tpu-vm", "create", "mx2")
  assert create[create.index("--version") + 1] == "v2-alpha-tpuv6e" and "--spot" not in create
  remote = [c[c.index("--command") + 1] for c in find(cmds, "gcloud", "compute", "tpus", "tpu-vm", "ssh", "mx2")]
  assert any("git clone" in r and "https://example.com/maxnorm.git" in r and "checkout -q main" in r for r in remote)
  assert remote[-1].endswith("-m maxnorm_jax.main --x=1")


def test_a_plan_that_does_not_fit_creates_no_slice(tmp_path):
  fake_python = tmp_path / "plan_python"
  fake_python.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/plan_args"\nexit 1\n')
  fake_python.chmod(0o755)
  flags = ["--name", "mx", "--zone", "z", "--accelerator-type", "v5litepod-16"]
  proc = run_script(*flags, "--", *MAIN_ARGS, tmp_path=tmp_path, env_extra={"MAXNORM_PLAN_PYTHON": str(fake_python)})
  assert proc.returncode == 1
  assert "the plan for v5litepod-16 failed (exit 1); no slice was created" in proc.stderr
  args = (tmp_path / "plan_args").read_text().split()
  assert args[:3] == ["-m", "maxnorm_jax.plan", "--topology=v5litepod-16"]


def test_missing_zone_is_a_usage_error(tmp_path):
  proc = run_script("--dry-run", "--name", "mx", "--accelerator-type", "v5p-32", "--", "--x", tmp_path=tmp_path)
  assert proc.returncode == 2
  assert "missing required flag(s): --zone" in proc.stderr and "usage:" in proc.stderr
  assert proc.stdout == ""


def test_other_usage_errors(tmp_path):
  base = ["--dry-run", "--zone", "z", "--accelerator-type", "v5p-32"]
  cases = {
    "unknown argument '--bogus'": [*base, "--name", "mx", "--bogus"],
    "must be lowercase": [*base, "--name", "Bad_Name"],
    "--name needs a value": [*base, "--name"],
    "no default --version": ["--dry-run", "--zone", "z", "--name", "mx", "--accelerator-type", "v9x-8"],
  }
  for message, args in cases.items():
    proc = run_script(*args, tmp_path=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
  assert run_script("--help", tmp_path=tmp_path).returncode == 0
