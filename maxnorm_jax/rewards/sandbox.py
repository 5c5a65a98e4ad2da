"""Running an untrusted Python program: fresh folder, scrubbed environment, rlimits, namespaces.

`Sandbox.run(source, ...)` runs `source` with a Python interpreter and returns a `SandboxResult`
(exit status, stdout, stderr, timeout flag, wall time, the isolation used). The guarantees of each
isolation mode are in SANDBOX.md next to this file. In short:

- "root" (running as root, the default there): `setpriv --pdeathsig KILL` -> `unshare --net --pid
  --fork --kill-child --mount --mount-proc --ipc --uts` -> `/bin/sh` as the namespace's init (it
  stays root, so the namespace dies with it and with us) -> private tmpfs mounts over /tmp,
  /var/tmp, /dev/shm and /run/lock -> `prlimit` (CPU, address space, processes, file size, open
  files, no core) -> `setpriv` to a fresh unprivileged uid/gid (a random one per run, so that
  RLIMIT_NPROC, which counts every process of a uid host-wide, is this run's alone) -> python -I.
- "userns" (not root, user namespaces allowed): the same namespaces inside `unshare
  --map-root-user`; no uid change (the program runs as the caller's uid mapped to root in its
  own user namespace).
- "none" (not root and no user namespaces): a plain subprocess in its own session with the same
  rlimits, killed as a process group at the deadline; no network or pid isolation.

The mode is chosen once per process by probing (`detect_mode`) unless given explicitly.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

MODES = ("root", "userns", "none")

# The namespace init's script. It stays root inside the namespace (so the kill-on-parent-death
# signal unshare set on it survives), prepares the mounts, copies the program into a private
# tmpfs and runs it under rlimits as the sandbox user; when the program exits, init exits and
# the kernel kills whatever the program left behind in the pid namespace. The copied files stay
# root's (readable, not writable); the folder itself belongs to the sandbox user.
_INIT_SCRIPT = r"""
set -e
H="$1"; U="$2"; MB="$3"; shift 3
mount -t tmpfs -o size=${MB}m,mode=0700,uid=$U,gid=$U,nosuid,nodev sandbox /var/tmp
cp -R "$H"/program/. /var/tmp/
mount -a -T "$H/masks.fstab"
cd /var/tmp
set +e
"$@"
rc=$?
# Anything still running in the namespace (other than this init and zombies) was left behind.
for p in /proc/[0-9]*; do
  n=${p#/proc/}
  [ "$n" = 1 ] && continue
  st=""
  read -r st < "$p/stat" 2>/dev/null || continue
  # The state follows the LAST ")": the command name before it may itself hold ") Z ".
  case "${st##*)}" in " Z "*) continue;; esac
  exit 125
done
exit $rc
"""

#: Host folders hidden behind empty read-only tmpfs mounts (root/userns modes): the world-writable
#: ones, and /run (with /var/run, its usual link), where the host's unix-domain sockets live (dbus,
#: docker, systemd); a socket elsewhere that others may write to stays reachable (SANDBOX.md).
_MASKED_DIRS = ("/tmp", "/dev/shm", "/run", "/var/run", "/run/lock", "/var/lock", "/dev/mqueue")


def _mask_targets(dirs=_MASKED_DIRS) -> list[str]:
  """The real folders to mask: links resolved, duplicates and folders inside another dropped."""
  real = sorted({os.path.realpath(d) for d in dirs if os.path.isdir(d)})
  return [d for d in real if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in real)]


#: The init's exit status when the program left processes behind (they are killed regardless).
LEFTOVER_STATUS = 125


@dataclasses.dataclass
class SandboxResult:
  """What a sandboxed run did.

  Attributes:
    returncode: the program's exit status (negative: killed by that signal; None if it never
      finished before the deadline).
    stdout, stderr: captured output (truncated to the sandbox's output cap).
    timed_out: True when the wall-clock deadline was reached and the process tree was killed.
    wall_s: wall-clock seconds from start to the end of the process tree.
    isolation: the mode used ("root", "userns", "none").
    uid: the uid the program ran as.
    left_behind: True when the program exited leaving processes running in its namespace (they
      were killed with it); only detected in the "root" and "userns" modes.
  """

  returncode: int | None
  stdout: bytes
  stderr: bytes
  timed_out: bool
  wall_s: float
  isolation: str
  uid: int
  left_behind: bool = False


def _run_quiet(argv: list[str], timeout: float = 10.0) -> bool:
  try:
    r = subprocess.run(
      argv,
      stdin=subprocess.DEVNULL,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
      timeout=timeout,
      env=_base_env(),
    )
    return r.returncode == 0
  except (OSError, subprocess.TimeoutExpired):
    return False


def _base_env() -> dict[str, str]:
  return {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
  }


@functools.lru_cache(maxsize=None)
def detect_mode() -> str:
  """The strongest isolation this process can use: "root", "userns" or "none" (probed once)."""
  tools = all(shutil.which(t, path=_base_env()["PATH"]) for t in ("unshare", "setpriv", "prlimit", "mount"))
  if not tools:
    return "none"
  ns = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--ipc", "--uts"]
  if os.geteuid() == 0 and _run_quiet(ns + ["setpriv", "--reuid=1000123", "--regid=1000123", "--clear-groups", "true"]):
    return "root"
  if _run_quiet(["unshare", "--map-root-user"] + ns[1:] + ["mount", "-t", "tmpfs", "none", "/tmp"]):
    return "userns"
  return "none"


def others_can_execute(path: str) -> bool:
  """True when a user with no special rights can reach and execute `path` (mode bits only)."""
  path = os.path.realpath(path)
  try:
    if not os.stat(path).st_mode & stat.S_IXOTH:
      return False
    d = os.path.dirname(path)
    while True:
      if not os.stat(d).st_mode & stat.S_IXOTH:
        return False
      if d == "/":
        return True
      d = os.path.dirname(d)
  except OSError:
    return False


_WARNED: set[str] = set()


def _warn_once(mode: str) -> None:
  if mode not in _WARNED:
    _WARNED.add(mode)
    logging.getLogger(__name__).warning(
      "code sandbox runs in degraded mode %r (%s); see maxnorm_jax/rewards/SANDBOX.md",
      mode,
      "no uid change" if mode == "userns" else "no namespaces: no network or process isolation",
    )


def _interpreter_candidates(unprivileged: bool = False) -> list[str]:
  """Interpreters to try, this process's own first; with `unprivileged`, only those that a uid
  without rights can execute (a venv whose python lives in root's home is skipped)."""
  seen, out = set(), []
  for p in (
    os.path.realpath(sys.executable),
    "/usr/bin/python3",
    "/usr/local/bin/python3",
    shutil.which("python3") or "",
  ):
    if unprivileged and p and not others_can_execute(p):
      continue
    if p and os.path.exists(p) and p not in seen:
      seen.add(p)
      out.append(p)
  return out


def _namespace_argv(host: str, uid: int, tmpfs_mb: int, inner: list[str], map_root: bool) -> list[str]:
  """The command that runs `inner` as _INIT_SCRIPT's child in fresh net/pid/mount/ipc/uts namespaces.

  With map_root the namespaces are a user namespace's (unprivileged mode: uid 0 inside is the caller);
  without it the caller is root and `inner` drops to `uid` itself. setpriv's parent-death signal kills
  the namespace if this process dies.
  """
  namespaces = ["--map-root-user"] if map_root else []
  namespaces += ["--net", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--ipc", "--uts"]
  init = ["/bin/sh", "-c", _INIT_SCRIPT, "init", host, str(uid), str(tmpfs_mb)]
  return ["setpriv", "--pdeathsig", "KILL", "--", "unshare", *namespaces, "--", *init, *inner]


class Sandbox:
  """Runs untrusted Python programs under a wall-clock deadline, rlimits and namespaces.

  Args:
    timeout_s: wall-clock deadline per run; the whole process tree is killed at it.
    memory_mb: RLIMIT_AS (address space) of the program, in MiB.
    max_processes: RLIMIT_NPROC of the sandbox uid (all its processes and threads together).
    max_file_mb: RLIMIT_FSIZE: no file (stdout included) may grow past this.
    max_open_files: RLIMIT_NOFILE.
    tmpfs_mb: size of the private working folder (root/userns modes).
    output_limit: bytes of stdout/stderr kept.
    mode: "auto" (probe) or one of MODES; asking for more than the host allows raises.
    python: interpreter to run programs with; by default the first candidate that works in the
      sandbox (in "root" mode this must be executable by an unprivileged uid, which a venv
      pointing into /root/.pyenv is not; /usr/bin/python3 usually is).
  """

  def __init__(
    self,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_processes: int = 16,
    max_file_mb: int = 16,
    max_open_files: int = 64,
    tmpfs_mb: int = 64,
    output_limit: int = 1 << 20,
    mode: str = "auto",
    python: str | None = None,
  ):
    self.timeout_s = float(timeout_s)
    self.memory_mb = int(memory_mb)
    self.max_processes = int(max_processes)
    self.max_file_mb = int(max_file_mb)
    self.max_open_files = int(max_open_files)
    self.tmpfs_mb = int(tmpfs_mb)
    self.output_limit = int(output_limit)
    detected = detect_mode()
    if mode == "auto":
      mode = detected
    if mode not in MODES:
      raise ValueError(f"unknown sandbox mode {mode!r}; expected 'auto' or one of {MODES}")
    if MODES.index(mode) < MODES.index(detected):
      raise RuntimeError(f"sandbox mode {mode!r} is not available here (best: {detected!r})")
    self.mode = mode
    self._python = python
    if mode != "root":
      _warn_once(mode)

  # --- interpreter -------------------------------------------------------------------------

  @property
  def python(self) -> str:
    """The interpreter programs run with (found by a probe run on first use)."""
    if self._python is None:
      self._python = self._find_python()
    return self._python

  def _find_python(self) -> str:
    for cand in _interpreter_candidates(unprivileged=self.mode == "root"):
      r = self._run_argv(cand, "print(6 * 7)\n", b"", None, 20.0)
      if r.returncode == 0 and r.stdout.strip() == b"42":
        return cand
    raise RuntimeError(
      f"no Python interpreter runs inside the {self.mode!r} sandbox (tried "
      f"{_interpreter_candidates(self.mode == 'root')}); pass python= an interpreter the sandbox user can execute"
    )

  # --- running -----------------------------------------------------------------------------

  def run(
    self,
    source: str,
    stdin: bytes | str = b"",
    files: dict[str, str] | None = None,
    timeout_s: float | None = None,
    pass_fd_data: bytes | None = None,
  ) -> SandboxResult:
    """Runs `source` as main.py in a fresh folder with `files` beside it.

    Args:
      source: the Python program.
      stdin: bytes (or str) fed on standard input.
      files: extra files (name -> text) written next to the program.
      timeout_s: this run's deadline (default: the sandbox's).
      pass_fd_data: if given, these bytes wait in a pipe whose file descriptor number is the
        program's sys.argv[1] (read once): a channel for a secret that the program under test
        cannot read back later.
    """
    return self._run_argv(self.python, source, stdin, files, timeout_s or self.timeout_s, pass_fd_data)

  def _limits(self, timeout_s: float) -> list[str]:
    cpu = max(1, int(timeout_s + 1.999))
    mb = 1 << 20
    return [
      "prlimit",
      f"--cpu={cpu}",
      f"--as={self.memory_mb * mb}",
      f"--nproc={self.max_processes}",
      f"--fsize={self.max_file_mb * mb}",
      f"--nofile={self.max_open_files}",
      "--core=0",
    ]

  def _run_argv(
    self,
    python: str,
    source: str,
    stdin: bytes | str,
    files: dict[str, str] | None,
    timeout_s: float,
    pass_fd_data: bytes | None = None,
  ) -> SandboxResult:
    if isinstance(stdin, str):
      stdin = stdin.encode()
    host = tempfile.mkdtemp(prefix="maxnorm_sandbox_")
    uid = os.getuid()
    try:
      prog_dir = os.path.join(host, "program")
      os.mkdir(prog_dir)
      with open(os.path.join(prog_dir, "main.py"), "w") as f:
        f.write(source)
      for name, text in (files or {}).items():
        if os.path.basename(name) != name or name in ("", ".", ".."):
          raise ValueError(f"sandbox file names must be plain names, got {name!r}")
        with open(os.path.join(prog_dir, name), "w") as f:
          f.write(text)
      masks = _mask_targets()
      with open(os.path.join(host, "masks.fstab"), "w") as f:
        for d in masks:
          f.write(f"empty {d} tmpfs size=1m,mode=0755,ro,nosuid,nodev,noexec 0 0\n")
      env = _base_env()
      r_fd = -1
      if pass_fd_data is not None:
        r_fd, w_fd = os.pipe()
        os.write(w_fd, pass_fd_data)
        os.close(w_fd)
      py = [python, "-I", "main.py"] + ([str(r_fd)] if r_fd >= 0 else [])
      if self.mode == "root":
        uid = random.randrange(1_000_000, 1_900_000)
        env["HOME"] = "/var/tmp"
        inner = (
          self._limits(timeout_s)
          + [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--no-new-privs",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
          ]
          + py
        )
        argv = _namespace_argv(host, uid, self.tmpfs_mb, inner, map_root=False)
        cwd = "/"
      elif self.mode == "userns":
        env["HOME"] = "/var/tmp"
        inner = self._limits(timeout_s) + py
        argv = _namespace_argv(host, 0, self.tmpfs_mb, inner, map_root=True)
        cwd = "/"
      else:
        env["HOME"] = prog_dir
        argv = (self._limits(timeout_s) + py) if shutil.which("prlimit", path=env["PATH"]) else py
        cwd = prog_dir
      try:
        return self._spawn(argv, cwd, env, host, stdin, timeout_s, uid, r_fd)
      finally:
        if r_fd >= 0:
          os.close(r_fd)
    finally:
      shutil.rmtree(host, ignore_errors=True)

  def _spawn(self, argv, cwd, env, host, stdin, timeout_s, uid, r_fd) -> SandboxResult:
    in_path, out_path, err_path = (os.path.join(host, n) for n in ("stdin", "stdout", "stderr"))
    with open(in_path, "wb") as f:
      f.write(stdin)
    preexec = None
    if self.mode == "none" and argv[0] != "prlimit":
      preexec = self._preexec_limits(timeout_s)
    pass_fds = (r_fd,) if r_fd >= 0 else ()
    start = time.monotonic()
    timed_out = False
    with open(in_path, "rb") as fin, open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
      proc = subprocess.Popen(
        argv,
        stdin=fin,
        stdout=fout,
        stderr=ferr,
        cwd=cwd,
        env=env,
        start_new_session=True,
        close_fds=True,
        pass_fds=pass_fds,
        preexec_fn=preexec,
      )
      try:
        proc.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        timed_out = True
        self._kill_tree(proc)
    wall = time.monotonic() - start
    stdout = self._read_capped(out_path)
    stderr = self._read_capped(err_path)
    left = not timed_out and self.mode != "none" and proc.returncode == LEFTOVER_STATUS
    return SandboxResult(
      returncode=None if timed_out else proc.returncode,
      stdout=stdout,
      stderr=stderr,
      timed_out=timed_out,
      wall_s=wall,
      isolation=self.mode,
      uid=uid,
      left_behind=left,
    )

  def _kill_tree(self, proc: subprocess.Popen) -> None:
    """SIGKILLs the run's process group (and with it, via --kill-child, its pid namespace)."""
    try:
      os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
    proc.wait()

  def _read_capped(self, path: str) -> bytes:
    try:
      with open(path, "rb") as f:
        return f.read(self.output_limit)
    except OSError:
      return b""

  def _preexec_limits(self, timeout_s: float):
    cpu = max(1, int(timeout_s + 1.999))
    mb = 1 << 20
    limits = [
      (resource.RLIMIT_CPU, cpu),
      (resource.RLIMIT_AS, self.memory_mb * mb),
      (resource.RLIMIT_NPROC, self.max_processes),
      (resource.RLIMIT_FSIZE, self.max_file_mb * mb),
      (resource.RLIMIT_NOFILE, self.max_open_files),
      (resource.RLIMIT_CORE, 0),
    ]

    def apply():
      for which, value in limits:
        resource.setrlimit(which, (value, value))

    return apply
