"""Field mappings of widely used RLVR datasets, by name (config: data.fields = "gsm8k" or a dict).

- "default": prompt/answer/tests/task columns as named.
- "gsm8k": question, answer after "####"; task "math".
- "math500" (MATH / MATH-500 / hendrycks-style with an extracted answer): problem, answer; task "math".
- "deepmath" (DeepMath-103K): question, final_answer; task "math".
- "livecodebench" (code_generation_lite): question_content, public_test_cases (a JSON string of
  {input, output, testtype}); no answer; task "code".
The `samples/` directory holds a few rows of each format, written for the tests.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from maxnorm_jax.data.records import FieldMap

FIELD_PRESETS: dict[str, FieldMap] = {
  "default": FieldMap(),
  "gsm8k": FieldMap(prompt="question", answer="answer", tests=None, task=None, task_value="math", answer_after="####"),
  "math500": FieldMap(prompt="problem", answer="answer", tests=None, task=None, task_value="math"),
  "deepmath": FieldMap(prompt="question", answer="final_answer", tests=None, task=None, task_value="math"),
  "livecodebench": FieldMap(
    prompt="question_content",
    answer=None,
    tests="public_test_cases",
    task=None,
    task_value="code",
    required=("prompt", "tests"),
  ),
}

SAMPLES_DIR = os.path.join(os.path.dirname(__file__), "samples")

#: sample file of each preset (a few rows in the dataset's own format)
SAMPLE_FILES = {
  "gsm8k": os.path.join(SAMPLES_DIR, "gsm8k_sample.jsonl"),
  "math500": os.path.join(SAMPLES_DIR, "math500_sample.jsonl"),
  "deepmath": os.path.join(SAMPLES_DIR, "deepmath_sample.jsonl"),
  "livecodebench": os.path.join(SAMPLES_DIR, "livecodebench_sample.jsonl"),
}


def field_map(spec: str | Mapping[str, Any] | FieldMap | None) -> FieldMap:
  """A FieldMap from a preset name, a config dict or a FieldMap (None: the default columns)."""
  if spec is None or isinstance(spec, FieldMap):
    return spec or FieldMap()
  if isinstance(spec, str):
    if spec not in FIELD_PRESETS:
      raise KeyError(f"data.fields: unknown preset {spec!r}; known: {sorted(FIELD_PRESETS)}")
    return FIELD_PRESETS[spec]
  return FieldMap.from_config(spec)
