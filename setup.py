"""Build hook: ships configs/default.py inside the package (as maxnorm_jax/configs/default.py), so
`python -m maxnorm_jax.main` finds its default config in a non-editable install too. Everything
else about the package is in pyproject.toml."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED_CONFIGS = ("default.py",)


class BuildPyWithConfigs(build_py):
  def run(self):
    super().run()
    target = os.path.join(self.build_lib, "maxnorm_jax", "configs")
    self.mkpath(target)
    for name in SHIPPED_CONFIGS:
      self.copy_file(os.path.join("configs", name), os.path.join(target, name))


setup(cmdclass={"build_py": BuildPyWithConfigs})
