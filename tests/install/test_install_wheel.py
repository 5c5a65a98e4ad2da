"""A non-editable install works on its own: the wheel ships the default config, and training needs
no test extra (no torch, no transformers)."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = """
import importlib.util, sys
from maxnorm_jax import main
spec = importlib.util.spec_from_file_location("default_config", main.DEFAULT_CONFIG)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
c = module.get_config("runlocal=True")
print(main.DEFAULT_CONFIG)
print(c.method, c.model.kind, c.train.steps)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
  src = tmp_path_factory.mktemp("src")
  files = subprocess.run(
    ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
  ).stdout.split()
  for rel in files:
    if os.path.isfile(os.path.join(ROOT, rel)):
      os.makedirs(os.path.dirname(src / rel), exist_ok=True)
      shutil.copy2(os.path.join(ROOT, rel), src / rel)
  out = tmp_path_factory.mktemp("wheel")
  pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
  subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", str(src), "-w", str(out)], check=True)
  (path,) = [out / n for n in os.listdir(out) if n.endswith(".whl")]
  return path


def test_the_wheel_ships_the_default_config_and_an_install_loads_it(wheel, tmp_path):
  with zipfile.ZipFile(wheel) as z:
    assert "maxnorm_jax/configs/default.py" in z.namelist()
  site = tmp_path / "site"
  pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
  subprocess.run(pip + ["install", "--no-deps", "--target", str(site), str(wheel)], check=True)
  env = dict(os.environ, PYTHONPATH=str(site), JAX_PLATFORMS="cpu")
  run = subprocess.run(
    [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
  )
  assert run.returncode == 0, run.stderr[-2000:]
  path, values = run.stdout.split("\n")[-3:-1]
  assert path == str(site / "maxnorm_jax" / "configs" / "default.py")
  assert values == "maxnorm_rloo tiny 3"


def test_training_requirements_have_no_test_extras(wheel):
  with zipfile.ZipFile(wheel) as z:
    meta = z.read("maxnorm_jax-0.1.0.dist-info/METADATA").decode()
  requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
  always = [r for r in requires if "extra ==" not in r]
  assert any(r.startswith("jax") for r in always) and any(r.startswith("optax") for r in always)
  for heavy in ("torch", "transformers", "pytest", "datasets"):
    assert not [r for r in always if r.split(">")[0].split("=")[0].split("<")[0].strip() == heavy], heavy
    assert [r for r in requires if r.startswith(heavy) and 'extra == "test"' in r], heavy
