"""Small dataset files for tests and examples."""

import json


def write_arith_jsonl(path, n: int = 120) -> str:
  """Writes n distinct arith rows ("a+b=", answer a+b, id "row<i>") as JSONL at path -> str(path)."""
  with open(path, "w") as f:
    for i in range(n):
      a, b = divmod(i, 11)
      f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b), "task": "arith", "id": f"row{i}"}) + "\n")
  return str(path)
