"""check_reward: NaN, infinite, out-of-range and non-numeric rewards are rejected and counted."""

import math

import numpy as np
import pytest

from maxnorm_jax.rewards import REJECTED, RejectionCounter, Score, check_reward


@pytest.mark.parametrize(
  "value,reason",
  [
    (math.nan, "nan"),
    (np.float32("nan"), "nan"),
    (math.inf, "inf"),
    (-math.inf, "inf"),
    (1.0000001, "out_of_range"),
    (-1e-9, "out_of_range"),
    ("0.5x", "type"),
    ("0.7", "type"),  # a numeric string is still a string (issue 12.9)
    (b"0.5", "type"),
    (10**400, "out_of_range"),  # float() overflows (issue 12.1)
    ({"reward": 0.5, "info": 7}, "info"),
    ({"reward": 0.5, "resolution": "0.5"}, "resolution"),
    (None, "type"),
    (1j, "type"),
    (Score(math.nan), "nan"),
    ({"reward": 2.0}, "out_of_range"),
    ({"reward": 0.5, "resolution": 0.0}, "resolution"),
  ],
)
def test_bad_rewards_are_rejected_and_counted(value, reason):
  counter = RejectionCounter()
  before = REJECTED.counts().get(reason, 0)
  s = check_reward(value, counter)
  assert not s.valid
  assert s.reward == 0.0
  assert s.info["rejected"] == reason
  assert counter.counts() == {reason: 1}
  assert REJECTED.counts()[reason] == before + 1


@pytest.mark.parametrize(
  "value,reward,resolution",
  [
    (0.0, 0.0, 1.0),
    (1.0, 1.0, 1.0),
    (np.float64(0.25), 0.25, 1.0),
    (True, 1.0, 1.0),
    (Score(0.75, 0.25, {"a": 1}), 0.75, 0.25),
    ({"reward": 0.5, "resolution": 0.5}, 0.5, 0.5),
  ],
)
def test_good_rewards_pass(value, reward, resolution):
  counter = RejectionCounter()
  s = check_reward(value, counter)
  assert s.valid and s.reward == reward and s.resolution == resolution
  assert counter.total == 0


def test_counter_reset():
  c = RejectionCounter()
  c.add("nan")
  c.add("nan")
  c.add("inf")
  assert c.total == 3 and c.counts() == {"nan": 2, "inf": 1}
  c.reset()
  assert c.total == 0
