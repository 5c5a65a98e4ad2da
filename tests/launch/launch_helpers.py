"""Shared helpers of the launch tests: the repository root and loading launch/*.py by path."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAUNCH = ROOT / "launch"
PROBE = pathlib.Path(__file__).resolve().parent / "pod_probe.py"


def load_launch_module(name: str):
  """Imports launch/<name>.py (launch/ is a folder of scripts, not a package)."""
  key = f"_launch_{name}"
  if key not in sys.modules:
    spec = importlib.util.spec_from_file_location(key, LAUNCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
  return sys.modules[key]
