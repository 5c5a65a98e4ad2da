"""CodeVerifier: the last fenced Python block of a completion, run in the sandbox against tests.

Two test formats:
- stdin/stdout: a list of {"input": str, "output": str}; each case is one sandboxed run, and it
  passes when the program exits 0, leaves no process behind, and its stdout equals the expected output up to trailing
  whitespace on each line and trailing blank lines.
- assert-style: a string of Python statements; every top-level `assert` is one test, the other
  statements are set-up run in order. The program and the tests run in one sandboxed harness
  that reports each passed assert with a per-run secret it reads from a pipe before the program
  starts (so printing fake results, or exiting early with status 0, scores 0).

reward = passed / total (resolution 1/total); info lists passed, total, and per case whether it
timed out or crashed.
"""

from __future__ import annotations

import ast
import re
import secrets
from typing import Any

from maxnorm_jax.rewards.sandbox import Sandbox
from maxnorm_jax.rewards.score import Score

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)
_PY_LANGS = {"", "python", "py", "python3", "py3"}

_HARNESS = r"""
import ast, os, sys
def _main():
    fd = int(sys.argv[1])
    nonce = os.read(fd, 64).decode().strip()
    os.close(fd)
    out = os.fdopen(os.dup(1), "w")
    tests = open("tests.py").read()
    src = open("solution.py").read()
    g = {"__name__": "__main__", "__builtins__": __builtins__}
    try:
        exec(compile(src, "solution.py", "exec"), g)
    except SystemExit:
        pass
    except BaseException as e:
        print("solution raised", type(e).__name__, e, file=sys.stderr)
    k = 0
    for node in ast.parse(tests).body:
        code = compile(ast.Module([node], []), "tests.py", "exec")
        ok = True
        try:
            exec(code, g)
        except BaseException as e:
            ok = False
            print("test failed", type(e).__name__, e, file=sys.stderr)
        if isinstance(node, ast.Assert):
            if ok:
                out.write(f"{nonce} pass {k}\n")
                out.flush()
            k += 1
_main()
"""


def extract_code(completion: str) -> str | None:
  """The last fenced code block whose language is Python (or unnamed); None if there is none."""
  blocks = [body for lang, body in _FENCE.findall(completion) if lang.lower() in _PY_LANGS]
  return blocks[-1] if blocks else None


def _normalise(text: str) -> str:
  lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
  while lines and not lines[-1]:
    lines.pop()
  return "\n".join(lines)


def count_asserts(tests: str) -> int:
  """The number of top-level assert statements in an assert-style test string."""
  return sum(isinstance(node, ast.Assert) for node in ast.parse(tests).body)


def _case_info(r, passed) -> dict[str, Any]:
  """What a case's record keeps of a SandboxResult (the last 500 bytes of stderr)."""
  return {
    "passed": passed,
    "timed_out": r.timed_out,
    "returncode": r.returncode,
    "left_behind": r.left_behind,
    "uid": r.uid,
    "wall_s": round(r.wall_s, 4),
    "stderr": r.stderr[-500:].decode("utf-8", "replace"),
  }


class CodeVerifier:
  """Scores a completion's last Python block against tests, inside a `Sandbox`.

  Args:
    timeout_s: wall-clock deadline of each sandboxed run (one per stdin/stdout case, one for all
      assert-style tests).
    memory_mb: address-space limit of the program.
    **sandbox_kwargs: other `Sandbox` arguments (max_processes, max_file_mb, mode, python, ...).
  """

  def __init__(self, timeout_s: float = 5.0, memory_mb: int = 512, **sandbox_kwargs: Any):
    self.sandbox = Sandbox(timeout_s=timeout_s, memory_mb=memory_mb, **sandbox_kwargs)
    self.timeout_s = float(timeout_s)

  def deadline_s(self, tests: Any) -> float:
    """An upper bound of the wall time score() may take on these tests (for pool deadlines)."""
    runs = len(tests) if isinstance(tests, list) else 1
    return runs * (self.timeout_s + 2.0) + 5.0

  def score(self, completion: str, tests: list[dict[str, str]] | str) -> Score:
    """reward = fraction of tests passed by the completion's last fenced Python block."""
    code = extract_code(completion)
    if isinstance(tests, str):
      try:
        total = count_asserts(tests)
      except SyntaxError as e:
        return Score(0.0, 1.0, {"error": f"tests do not parse: {e}"}, valid=False)
    else:
      total = len(tests)
    if total == 0:
      return Score(0.0, 1.0, {"error": "no tests"}, valid=False)
    resolution = 1.0 / total
    base = {"total": total, "isolation": self.sandbox.mode}
    if code is None:
      return Score(0.0, resolution, {**base, "passed": 0, "error": "no python code block"})
    if isinstance(tests, str):
      info = self._run_asserts(code, tests, total)
    else:
      info = self._run_stdio(code, tests)
    info = {**base, **info}
    return Score(info["passed"] / total, resolution, info)

  def _run_stdio(self, code: str, tests: list[dict[str, str]]) -> dict[str, Any]:
    cases = []
    for case in tests:
      r = self.sandbox.run(code, stdin=str(case.get("input", "")))
      ok = (
        not r.timed_out
        and r.returncode == 0
        and not r.left_behind
        and _normalise(r.stdout.decode("utf-8", "replace")) == _normalise(str(case.get("output", "")))
      )
      cases.append(_case_info(r, passed=ok))
    return {"passed": sum(c["passed"] for c in cases), "cases": cases, "timed_out": any(c["timed_out"] for c in cases)}

  def _run_asserts(self, code: str, tests: str, total: int) -> dict[str, Any]:
    nonce = secrets.token_hex(16)
    r = self.sandbox.run(_HARNESS, files={"solution.py": code, "tests.py": tests}, pass_fd_data=nonce.encode() + b"\n")
    passed = set()
    for line in r.stdout.decode("utf-8", "replace").splitlines():
      parts = line.split()
      if len(parts) == 3 and parts[0] == nonce and parts[1] == "pass" and parts[2].isdigit():
        passed.add(int(parts[2]))
    passed = {k for k in passed if k < total} if not r.left_behind else set()
    return _case_info(r, passed=len(passed))
