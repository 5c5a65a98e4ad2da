"""Every citation of the design document points to a section that exists in docs/DESIGN.md."""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sections():
  with open(os.path.join(ROOT, "docs", "DESIGN.md")) as f:
    return {m.group(1) for m in re.finditer(r"^#{2,4} (\d+(?:\.\d+)*)\.? ", f.read(), re.M)}


def _tracked_text_files():
  out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
  return [p for p in out if p.endswith((".py", ".md", ".sh", ".toml")) and not p.startswith("docs/")]


def test_the_design_has_numbered_sections():
  assert {"1", "2", "3.1", "3.2", "3.3", "3.4", "3.5", "3.7", "3.8", "5", "6"} <= _sections()


def test_every_citation_names_an_existing_section():
  sections, bad, cited = _sections(), [], 0
  for path in _tracked_text_files():
    with open(os.path.join(ROOT, path), errors="replace") as f:
      text = f.read()
    for m in re.finditer(r"DESIGN(?:\.md)?(?: section|,)? ?§?\s*(\d+(?:\.\d+)*)", text):
      cited += 1
      if not m.group(0).startswith("DESIGN.md") or m.group(1).rstrip(".") not in sections:
        bad.append(f"{path}: {m.group(0)!r}")
  assert cited >= 10 and bad == []
