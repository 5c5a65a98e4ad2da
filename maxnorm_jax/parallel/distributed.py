"""Multi-host initialisation: one program per host joined by `jax.distributed`.

On a TPU pod slice `jax.distributed.initialize()` finds its peers by itself. On CPUs (a local
"CPU pod" of several processes, see launch/cpu_pod.py) the launcher passes the coordinator and
this process's rank in environment variables:

  MAXNORM_COORDINATOR=127.0.0.1:PORT  MAXNORM_NUM_PROCESSES=N  MAXNORM_PROCESS_ID=i
"""

from __future__ import annotations

import os

ENV_COORDINATOR = "MAXNORM_COORDINATOR"
ENV_NUM_PROCESSES = "MAXNORM_NUM_PROCESSES"
ENV_PROCESS_ID = "MAXNORM_PROCESS_ID"
ENV_TPU_POD = "MAXNORM_TPU_POD"  # set to 1 by launch/tpu_pod.sh


def initialize_from_env(environ: dict[str, str] | None = None) -> bool:
  """Joins the processes named by the environment; returns True when it did.

  Must run before anything touches a JAX device. Without the variables (a single process) it
  does nothing. A partial or malformed set of variables is an error that names the variable.
  """
  env = os.environ if environ is None else environ
  import jax

  if env.get(ENV_TPU_POD) == "1":
    jax.distributed.initialize()
    return True
  names = (ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID)
  present = [n for n in names if env.get(n)]
  if not present:
    return False
  missing = [n for n in names if not env.get(n)]
  if missing:
    raise ValueError(f"multi-process run: {present} set but {missing} missing")
  try:
    num_processes = int(env[ENV_NUM_PROCESSES])
    process_id = int(env[ENV_PROCESS_ID])
  except ValueError as e:
    raise ValueError(f"{ENV_NUM_PROCESSES} and {ENV_PROCESS_ID} must be integers: {e}") from None
  if not 0 <= process_id < num_processes:
    raise ValueError(f"{ENV_PROCESS_ID}={process_id} must lie in [0, {ENV_NUM_PROCESSES}={num_processes})")
  if jax.config.jax_platforms in (None, "", "cpu"):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(env[ENV_COORDINATOR], num_processes=num_processes, process_id=process_id)
  return True
