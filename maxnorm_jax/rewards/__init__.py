"""Host-side verifiers: math (math-verify under a hard deadline), code (sandboxed), built-in
tasks, and a pool of killable worker processes that scores batches while the device works.

    from maxnorm_jax.rewards import MathVerifier, CodeVerifier, VerifierPool, score_record
    MathVerifier(timeout_s=5).score(completion, gold)          # -> Score(reward, resolution, info)
    CodeVerifier(timeout_s=5, memory_mb=512).score(completion, tests)
    handle = VerifierPool(num_workers=2).submit([(completion, record), ...]); handle.result()

The sandbox's guarantees and limits: maxnorm_jax/rewards/SANDBOX.md.
"""

from maxnorm_jax.rewards.builtin import TASK_VERIFIERS, deadline_for, score_record, task_names, verifier_for
from maxnorm_jax.rewards.code_verifier import CodeVerifier, extract_code
from maxnorm_jax.rewards.extract import integer_answer, last_boxed
from maxnorm_jax.rewards.math_verifier import MathVerifier
from maxnorm_jax.rewards.pool import PoolHandle, VerifierPool
from maxnorm_jax.rewards.sandbox import Sandbox, SandboxResult, detect_mode
from maxnorm_jax.rewards.score import REJECTED, RejectionCounter, Score, check_reward

__all__ = [
  "CodeVerifier",
  "MathVerifier",
  "PoolHandle",
  "REJECTED",
  "RejectionCounter",
  "Sandbox",
  "SandboxResult",
  "Score",
  "TASK_VERIFIERS",
  "VerifierPool",
  "check_reward",
  "deadline_for",
  "detect_mode",
  "extract_code",
  "integer_answer",
  "last_boxed",
  "score_record",
  "task_names",
  "verifier_for",
]
