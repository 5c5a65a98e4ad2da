"""Shared by the benchmarks: best-of-N timing, and writing one section of BENCHMARKS.md while
leaving the other sections as they are."""

import datetime
import os
import platform
import re
import sys
import time

BENCHMARKS_MD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "BENCHMARKS.md")


def best_time(fn, repeats: int, warmup: bool = False) -> float:
  """The shortest wall time of `repeats` calls of fn() (after one untimed call if `warmup`)."""
  if warmup:
    fn()
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t0)
  return best


def force_cpu_devices(n: int) -> None:
  """Splits the host CPU into `n` jax devices (n > 1), for rows sharded one device per core.

  XLA:CPU runs a program's non-matmul ops (attention's batched dots, rope, sampling) on one thread;
  several host devices run them side by side. XLA_FLAGS is read when jax's CPU backend starts, so
  this must run before anything touches jax.devices().
  """
  if n > 1:
    flag = f"--xla_force_host_platform_device_count={n}"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()


def machine() -> str:
  """A one-line description of this machine."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def header(command: str | None = None) -> str:
  """The command, date and machine lines every section starts with."""
  command = command or "python " + " ".join(sys.argv)
  today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  return f"Command: `{command}`\nDate: {today}\nMachine: {machine()}\n"


def update_section(title: str, body: str, path: str = BENCHMARKS_MD) -> None:
  """Replaces (or appends) the section `## {title}` of BENCHMARKS.md with `body`."""
  text = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
  section = f"## {title}\n\n{body.rstrip()}\n"
  pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
  if pattern.search(text):
    text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
  else:
    text = text.rstrip() + "\n\n" + section
  with open(path, "w") as f:
    f.write(text)
