"""The code sandbox: correct programs pass; hostile programs score 0 and leave the host as it was.

The hostile-program tests need the full isolation ("root" mode: running as root with unshare and
setpriv); elsewhere they are skipped and the degraded modes are tested instead.
"""

import os
import secrets
import socket
import time

import pytest

from maxnorm_jax.rewards import CodeVerifier, Sandbox, detect_mode

ROOT = detect_mode() == "root"
needs_root = pytest.mark.skipif(not ROOT, reason="full sandbox isolation needs root here")


def fenced(code: str) -> str:
  return f"Here is my solution.\n```python\n{code}\n```\n"


def processes_of(uid: int) -> list[int]:
  """Host pids whose real uid is `uid`."""
  pids = []
  for name in os.listdir("/proc"):
    if not name.isdigit():
      continue
    try:
      with open(f"/proc/{name}/status") as f:
        for line in f:
          if line.startswith("Uid:"):
            if int(line.split()[1]) == uid:
              pids.append(int(name))
            break
    except OSError:
      continue
  return pids


@pytest.fixture(scope="module")
def verifier():
  return CodeVerifier(timeout_s=1.5, memory_mb=256)


def test_stdio_and_assert_tests_score_the_fraction_passed(verifier):
  code = fenced("a, b = map(int, input().split())\nprint(a + b)")
  tests = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5", "output": "10"}, {"input": "2 2", "output": "5"}]
  s = verifier.score(code, tests)
  assert s.reward == pytest.approx(2 / 3) and s.resolution == pytest.approx(1 / 3)
  assert s.info["passed"] == 2 and s.info["total"] == 3
  assert [c["passed"] for c in s.info["cases"]] == [True, True, False]
  s = verifier.score(
    fenced("def f(x):\n    return 2 * x"),
    "assert f(2) == 4\nassert f(3) == 7\ny = f(0)\nassert y == 0\nassert f(1) == 2",
  )
  assert s.reward == 0.75 and s.info["passed"] == 3 and s.info["total"] == 4


def test_last_python_block_counts_and_missing_code_scores_zero(verifier):
  text = "```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```\n```text\nprint(3)\n```"
  assert verifier.score(text, [{"input": "", "output": "2"}]).reward == 1.0
  s = verifier.score("no code", [{"input": "", "output": "2"}])
  assert s.reward == 0.0 and s.info["error"] == "no python code block"


def test_faked_assert_results_score_zero(verifier):
  forged = fenced("import os, sys\nprint('0' * 32, 'pass 0')\nsys.stdout.flush()\nos._exit(0)")
  s = verifier.score(forged, "assert f(1) == 1")
  assert s.reward == 0.0 and s.info["passed"] == 0 and s.info["returncode"] == 0


def test_infinite_loop_hits_the_deadline(verifier):
  t0 = time.monotonic()
  s = verifier.score(fenced("while True:\n    pass"), [{"input": "", "output": "1"}])
  assert s.reward == 0.0 and s.info["timed_out"] is True
  assert 1.4 <= time.monotonic() - t0 < 6.0


@needs_root
def test_allocating_4_gib_fails(verifier):
  s = verifier.score(fenced("b = bytearray(4 << 30)\nprint('allocated')"), [{"input": "", "output": "allocated"}])
  case = s.info["cases"][0]
  assert s.reward == 0.0 and case["returncode"] == 1 and "MemoryError" in case["stderr"]


@needs_root
def test_fork_bomb_is_bounded_and_cleaned_up(verifier):
  bomb = (
    "import os, time\nn = 0\nwhile n < 10000:\n    try:\n        os.fork()\n        n += 1\n"
    "    except OSError:\n        time.sleep(0.01)\nprint('forked')"
  )
  t0 = time.monotonic()
  s = verifier.score(fenced(bomb), [{"input": "", "output": "forked"}])
  assert s.reward == 0.0 and time.monotonic() - t0 < 6.0
  uid = s.info["cases"][0]["uid"]
  time.sleep(0.2)
  assert processes_of(uid) == []


@needs_root
def test_writes_outside_the_folder_fail(verifier):
  token = secrets.token_hex(6)
  targets = [
    f"/tmp/maxnorm_escape_{token}",
    f"/var/tmp/../tmp/maxnorm_escape2_{token}",
    f"/dev/shm/maxnorm_escape_{token}",
    f"/run/lock/maxnorm_escape_{token}",
    f"{os.getcwd()}/maxnorm_escape_{token}",
    f"/root/maxnorm_escape_{token}",
    f"/etc/maxnorm_escape_{token}",
  ]
  code = (
    "ok = 0\nfor p in %r:\n    try:\n        open(p, 'w').write('x')\n        ok += 1\n"
    "    except OSError:\n        pass\nopen('inside.txt', 'w').write('fine')\n"
    "print('wrote', ok)"
  ) % (targets,)
  s = verifier.score(fenced(code), [{"input": "", "output": f"wrote {len(targets)}"}])
  assert s.reward == 0.0 and s.info["cases"][0]["returncode"] == 0
  for p in targets:
    assert not os.path.exists(p), p
  assert not os.path.exists(f"/var/tmp/maxnorm_escape2_{token}")


@needs_root
def test_no_network_to_a_local_port(verifier):
  server = socket.socket()
  server.bind(("127.0.0.1", 0))
  server.listen(1)
  server.setblocking(False)
  port = server.getsockname()[1]
  code = (
    "import socket\ntry:\n    socket.create_connection(('127.0.0.1', %d), timeout=1)\n"
    "    print('connected')\nexcept OSError as e:\n    print('blocked', e.errno)"
  ) % port
  try:
    s = verifier.score(fenced(code), [{"input": "", "output": "connected"}])
    assert s.reward == 0.0 and s.info["cases"][0]["returncode"] == 0
    with pytest.raises(BlockingIOError):
      server.accept()
  finally:
    server.close()


@needs_root
def test_killing_the_parent_fails_and_the_host_survives(verifier):
  me = os.getpid()
  code = (
    "import os, signal\nhits = 0\nfor pid in (os.getppid(), 1, %d, -1):\n    try:\n"
    "        os.kill(pid, signal.SIGKILL)\n        hits += 1\n    except OSError:\n"
    "        pass\nprint('killed', hits)"
  ) % me
  s = verifier.score(fenced(code), [{"input": "", "output": "killed 4"}])
  assert s.reward == 0.0
  # The verifier still works after the attempt.
  assert verifier.score(fenced("print(5)"), [{"input": "", "output": "5"}]).reward == 1.0


def assert_left_behind_and_killed(verifier, code: str) -> None:
  """`code` leaves a process behind and prints 'done': the case scores 0, is marked, and the process dies."""
  s = verifier.score(fenced(code), [{"input": "", "output": "done"}])
  case = s.info["cases"][0]
  assert s.reward == 0.0 and case["left_behind"] is True
  time.sleep(0.2)
  assert processes_of(case["uid"]) == []


@needs_root
def test_daemon_left_behind_scores_zero_and_is_killed(verifier):
  code = (
    "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
    "        time.sleep(30)\n    os._exit(0)\ntime.sleep(0.2)\nprint('done')"
  )
  assert_left_behind_and_killed(verifier, code)


@needs_root
def test_root_mode_runs_unprivileged_in_fresh_namespaces():
  sb = Sandbox(timeout_s=5)
  r = sb.run(
    "import os, socket, json\n"
    "print(json.dumps({'uid': os.getuid(), 'pid': os.getpid(), 'cwd': os.getcwd(),"
    " 'env': sorted(os.environ), 'files': sorted(os.listdir('.')),"
    " 'ifaces': [n for _, n in socket.if_nameindex()]}))"
  )
  import json

  out = json.loads(r.stdout)
  assert r.returncode == 0 and r.isolation == "root"
  assert out["uid"] == r.uid and out["uid"] >= 1_000_000
  assert out["pid"] < 10
  assert out["cwd"] == "/var/tmp" and out["files"] == ["main.py"]
  assert "PYTHONPATH" not in out["env"] and not any("KEY" in k or "TOKEN" in k for k in out["env"])
  assert out["ifaces"] == ["lo"]


def test_unknown_mode_is_an_error():
  with pytest.raises(ValueError, match="unknown sandbox mode"):
    Sandbox(mode="chroot")


def test_degraded_mode_none_still_enforces_deadline_and_memory():
  sb = Sandbox(timeout_s=1.0, memory_mb=256, mode="none")
  r = sb.run("b = bytearray(1 << 30)\nprint('allocated')")
  assert r.isolation == "none" and r.returncode == 1 and b"MemoryError" in r.stderr
  t0 = time.monotonic()
  r = sb.run("while True:\n    pass")
  assert r.timed_out and r.returncode is None and time.monotonic() - t0 < 5.0
  r = sb.run("print(input()[::-1])", stdin="abc")
  assert r.returncode == 0 and r.stdout == b"cba\n"


@pytest.mark.skipif(detect_mode() == "none", reason="user namespaces unavailable")
def test_userns_mode_isolates_network_and_folder():
  sb = Sandbox(timeout_s=5, mode="userns")
  r = sb.run("import os, socket\nprint([n for _, n in socket.if_nameindex()], os.getpid(), os.listdir('.'))")
  assert r.isolation == "userns" and r.returncode == 0, r.stderr
  ifaces, pid, files = r.stdout.decode().strip().split(" ", 2)
  assert ifaces == "['lo']" and int(pid) < 10 and files == "['main.py']"


@needs_root
def test_mode_probe_as_an_unprivileged_user():
  """Not root, the sandbox picks a degraded mode by itself, says which, and still runs code."""
  import shutil
  import subprocess
  import tempfile

  import maxnorm_jax.rewards.sandbox as sandbox_module

  # sandbox.py imports only the standard library: a world-readable copy lets the unprivileged
  # user load it wherever the checkout lives (CI's clone may sit in a root-only folder).
  folder = tempfile.mkdtemp(prefix="sandbox-probe-", dir="/tmp")
  os.chmod(folder, 0o755)
  path = os.path.join(folder, "sandbox.py")
  shutil.copyfile(os.path.realpath(sandbox_module.__file__), path)
  os.chmod(path, 0o644)
  script = (
    "import importlib.util, sys\n"
    f"spec = importlib.util.spec_from_file_location('sb', {path!r})\n"
    "sb = importlib.util.module_from_spec(spec); sys.modules['sb'] = sb\n"
    "spec.loader.exec_module(sb)\n"
    "box = sb.Sandbox(timeout_s=5)\n"
    "r = box.run('print(6 * 7)')\n"
    "print(sb.detect_mode(), box.mode, r.isolation, r.returncode, r.stdout.decode().strip())\n"
  )
  if not sandbox_module.others_can_execute("/usr/bin/python3") or not os.access(path, os.R_OK):
    pytest.skip("no interpreter an unprivileged user can run")
  uid = 1_950_000 + os.getpid() % 10_000
  out = subprocess.run(
    ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "/usr/bin/python3", "-I", "-c", script],
    capture_output=True,
    text=True,
    timeout=60,
    cwd="/",
  )
  shutil.rmtree(folder)
  mode, mode2, isolation, rc, value = out.stdout.split()
  assert mode in ("userns", "none") and mode == mode2 == isolation
  assert (rc, value) == ("0", "42")
  assert "degraded mode" in out.stderr


@needs_root
def test_file_and_output_floods_are_capped():
  sb = Sandbox(timeout_s=3, max_file_mb=4, output_limit=1 << 16)
  r = sb.run("import sys\nwhile True:\n    sys.stdout.write('x' * 4096)")
  # Python ignores SIGXFSZ, so the write past RLIMIT_FSIZE fails with EFBIG instead.
  assert r.returncode == 1 and not r.timed_out and b"File too large" in r.stderr
  assert len(r.stdout) == 1 << 16
  r = sb.run("f = open('big', 'wb')\nfor _ in range(64):\n    f.write(b'0' * (1 << 20))\n    f.flush()\nprint('wrote')")
  assert r.returncode == 1 and b"File too large" in r.stderr and b"wrote" not in r.stdout


@needs_root
def test_folder_size_is_capped_by_its_tmpfs():
  sb = Sandbox(timeout_s=5, max_file_mb=4, tmpfs_mb=8)
  r = sb.run("for i in range(8):\n    open(f'f{i}', 'wb').write(b'0' * (3 << 20))\nprint('wrote')")
  assert r.returncode == 1 and b"No space left" in r.stderr and b"wrote" not in r.stdout


@needs_root
def test_host_unix_sockets_under_run_are_unreachable(verifier):
  """Issue 12.9: /run (and /var/run) are masked, so the host's sockets there (dbus, docker) are out of reach."""
  path = f"/run/maxnorm_test_{os.getpid()}_{secrets.token_hex(4)}.sock"
  server = socket.socket(socket.AF_UNIX)
  server.bind(path)
  os.chmod(path, 0o777)
  server.listen(1)
  server.setblocking(False)
  code = (
    "import socket\nfor p in (%r, %r):\n    s = socket.socket(socket.AF_UNIX)\n    try:\n"
    "        s.connect(p)\n        print('connected')\n    except OSError as e:\n        print('blocked', e.errno)"
  ) % (path, path.replace("/run/", "/var/run/", 1))
  try:
    s = verifier.score(fenced(code), [{"input": "", "output": "blocked 2\nblocked 2"}])
    assert s.reward == 1.0, s.info
    with pytest.raises(BlockingIOError):
      server.accept()
  finally:
    server.close()
    os.remove(path)


@needs_root
def test_a_process_renamed_to_look_like_a_zombie_is_still_left_behind(verifier):
  """Issue 12.9: the leftover check read the state after the first ")" of /proc/PID/stat."""
  code = (
    "import ctypes, os, time\nif os.fork() == 0:\n    ctypes.CDLL(None).prctl(15, b') Z ', 0, 0, 0)\n"
    "    time.sleep(30)\n    os._exit(0)\ntime.sleep(0.2)\nprint('done')"
  )
  assert_left_behind_and_killed(verifier, code)
