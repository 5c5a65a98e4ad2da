"""A child program for the cpu_pod tests (run as a script by launch/cpu_pod.py --script).

pod_probe.py ok          join the pod, check 2 processes x 2 devices, all-gather and psum
pod_probe.py fail        rank 1 exits 3; rank 0 prints its pid and sleeps (to be terminated)
pod_probe.py stubborn    as fail, but rank 0 ignores SIGTERM (to be killed)
pod_probe.py wait        each rank prints "ready" and sleeps; reports the SIGTERM it gets
"""

import os
import signal
import sys
import time


def ok() -> None:
  import numpy as np

  from maxnorm_jax.parallel.distributed import initialize_from_env

  assert initialize_from_env(), "MAXNORM_* variables missing"
  import jax
  import jax.numpy as jnp
  from jax.experimental import multihost_utils
  from jax.sharding import NamedSharding
  from jax.sharding import PartitionSpec as P

  pid = jax.process_index()
  assert jax.process_count() == 2, jax.process_count()
  assert jax.local_device_count() == 2, jax.local_device_count()
  assert jax.device_count() == 4, jax.device_count()
  gathered = multihost_utils.process_allgather(np.array([pid + 1], np.int32))
  mesh = jax.make_mesh((4,), ("d",))
  local = np.arange(2, dtype=np.float32) + 2 * pid
  x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("d")), local)
  total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(x)
  total = float(np.asarray(total.addressable_shards[0].data))
  print(f"RESULT process={pid} gathered={gathered.ravel().tolist()} psum={total}", flush=True)


def fail(ignore_term: bool) -> None:
  rank = int(os.environ["MAXNORM_PROCESS_ID"])
  if rank == 1:
    time.sleep(0.5)  # let rank 0 print its pid first
    print("failing with code 3", flush=True)
    sys.exit(3)
  if ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
  print(f"PID {os.getpid()}", flush=True)
  time.sleep(60)
  print("NOT KILLED", flush=True)


def wait() -> None:
  def on_term(signum, _frame):
    print(f"got signal {signum}", flush=True)
    sys.exit(0)

  signal.signal(signal.SIGTERM, on_term)
  print("ready", flush=True)
  time.sleep(60)
  print("NOT SIGNALLED", flush=True)


if __name__ == "__main__":
  mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
  if mode == "ok":
    ok()
  elif mode in ("fail", "stubborn"):
    fail(ignore_term=mode == "stubborn")
  elif mode == "wait":
    wait()
  else:
    sys.exit(f"pod_probe: unknown mode {mode!r}")
