"""NumPy references of the advantage estimators of docs/DESIGN.md §3.2, written independently of the JAX
code: `loop_advantages` goes group by group in Python (the obvious, slow form); the
`vectorised_advantages` form uses masked NumPy array operations over [P, G].

Both return advantages [P, G] (zero where masked or where the group is invalid). They cover the
stateless estimators; AVSPO's reference is `loop_avspo`.
"""

import math

import numpy as np

LOOP_NAMES = (
  "grpo",
  "dr_grpo",
  "rloo",
  "maxnorm_rloo",
  "maxnorm_dr_grpo",
  "p90",
  "gopo",
  "f_grpo",
  "reinforce_pp",
  "reinforce_pp_baseline",
  "grpo_beta_comp",
)
VECTORISED_NAMES = ("grpo", "dr_grpo", "rloo", "maxnorm_rloo", "maxnorm_dr_grpo", "p90")


def _group(name, r, p):
  """(u, s, c) of one group's valid rewards r [n] (n >= 2, not all equal)."""
  n = len(r)
  centred = r - r.mean()
  if name in ("grpo", "grpo_beta_comp", "f_grpo"):
    s = np.std(r, ddof=p.get("std_ddof", 1)) + p.get("eps", 1e-6)
    c = centred / s
    if name == "f_grpo":
      p_hat = np.mean(r >= p.get("success_threshold", 0.5))
      c = c * (1.0 - p_hat) ** p.get("gamma", 1.0)
    return centred, s, c
  if name == "dr_grpo":
    return centred, 1.0, centred
  if name == "rloo":
    u = np.array([r[i] - np.delete(r, i).mean() for i in range(n)])
    return u, 1.0, u
  if name in ("maxnorm_rloo", "maxnorm_dr_grpo", "p90"):
    if name == "maxnorm_dr_grpo":
      u = centred
    else:
      u = np.array([r[i] - np.delete(r, i).mean() for i in range(n)])
    if name == "p90":
      ref = np.quantile(np.abs(u), p.get("quantile", 0.9))
    else:
      ref = np.max(np.abs(u))
    s = max(p.get("tau_res", 1e-2), ref)
    return u, s, u / s
  if name == "gopo":
    order = sorted(range(n), key=lambda i: -r[i])
    rank = np.empty(n)
    for pos, i in enumerate(order):
      rank[i] = pos + 1
    if p.get("ties", "average") == "average":
      for v in set(r.tolist()):
        rank[r == v] = rank[r == v].mean()
    adv = 2.0 - 4.0 * (rank - 1.0) / (n - 1)
    return adv, 1.0, adv
  if name in ("reinforce_pp", "reinforce_pp_baseline"):
    return (r if name == "reinforce_pp" else centred), None, None
  raise ValueError(name)


def loop_advantages(name, rewards, mask=None, **params) -> np.ndarray:
  """Advantages [P, G] computed one group at a time in a Python loop."""
  rewards = np.asarray(rewards, np.float64)
  mask = np.ones(rewards.shape, bool) if mask is None else np.asarray(mask, bool)
  out = np.zeros_like(rewards)
  us, valids, scales = {}, [], {}
  for q in range(rewards.shape[0]):
    r = rewards[q][mask[q]]
    if len(r) < 2 or r.max() == r.min():
      continue
    u, s, c = _group(name, r, params)
    us[q], scales[q] = u, s
    valids.append(q)
    if c is not None:
      out[q, mask[q]] = c
  if name in ("reinforce_pp", "reinforce_pp_baseline") and valids:
    all_u = np.concatenate([us[q] for q in valids])
    mu, sd = all_u.mean(), all_u.std(ddof=params.get("std_ddof", 1))
    for q in valids:
      out[q, mask[q]] = (us[q] - mu) / (sd + params.get("eps", 1e-6))
  return out


def loop_kl_weight(rewards, mask=None, beta_comp_max=10.0, **params) -> np.ndarray:
  """grpo_beta_comp's kl_weight [P] (1 for invalid non-empty groups), by a loop."""
  rewards = np.asarray(rewards, np.float64)
  mask = np.ones(rewards.shape, bool) if mask is None else np.asarray(mask, bool)
  scales = {}
  for q in range(rewards.shape[0]):
    r = rewards[q][mask[q]]
    if len(r) >= 2 and r.max() > r.min():
      scales[q] = _group("grpo", r, params)[1]
  ref = np.median(list(scales.values())) if scales else 0.0
  w = np.where(mask.any(-1), 1.0, 0.0)
  for q, s in scales.items():
    w[q] = min(max(ref / s, 1.0), beta_comp_max)
  return w


def vectorised_advantages(name, rewards, mask=None, **params) -> np.ndarray:
  """Advantages [P, G] with masked NumPy array operations (no loop over groups)."""
  rewards = np.asarray(rewards, np.float32)
  mask = np.ones(rewards.shape, bool) if mask is None else np.asarray(mask, bool)
  r = np.where(mask, rewards, 0.0)
  n = mask.sum(-1)
  mean = r.sum(-1) / np.maximum(n, 1)
  centred = np.where(mask, r - mean[:, None], 0.0)
  hi = np.where(mask, r, -np.inf).max(-1)
  lo = np.where(mask, r, np.inf).min(-1)
  valid = (n >= 2) & (hi > lo)
  if name == "grpo":
    ddof = params.get("std_ddof", 1)
    std = np.sqrt((centred**2).sum(-1) / np.maximum(n - ddof, 1))
    c = centred / (std + params.get("eps", 1e-6))[:, None]
  elif name == "dr_grpo":
    c = centred
  else:
    loo = centred * (n / np.maximum(n - 1, 1))[:, None]
    u = centred if name == "maxnorm_dr_grpo" else loo
    if name == "rloo":
      c = u
    else:
      a = np.abs(u)
      if name == "p90":
        srt = np.sort(np.where(mask, a, np.inf), -1)
        pos = params.get("quantile", 0.9) * np.maximum(n - 1, 0)
        lo_i = np.floor(pos).astype(int)
        hi_i = np.minimum(lo_i + 1, np.maximum(n - 1, 0))
        v_lo = np.take_along_axis(srt, lo_i[:, None], -1)[:, 0]
        v_hi = np.take_along_axis(srt, hi_i[:, None], -1)[:, 0]
        ref = v_lo + (pos - lo_i) * (v_hi - v_lo)
      else:
        ref = np.where(mask, a, 0.0).max(-1)
      s = np.maximum(params.get("tau_res", 1e-2), ref)
      c = u / s[:, None]
  return np.where(mask & valid[:, None], c, 0.0)


def loop_avspo(
  rewards, mask, tau_adapt, *, std_ddof=1, eps=1e-6, tau_collapse=1e-6, alpha=0.5, r_anchor=0.1
) -> np.ndarray:
  """AVSPO advantages [P, G] for a given incoming threshold, one group at a time."""
  rewards = np.asarray(rewards, np.float64)
  mask = np.asarray(mask, bool)
  groups = [rewards[q][mask[q]] for q in range(rewards.shape[0])]
  eligible = [len(r) >= 2 for r in groups]
  collapsed = [len(r) >= 2 and np.std(r) < tau_collapse for r in groups]
  acr = sum(collapsed) / max(sum(eligible), 1)
  out = np.zeros_like(rewards)
  for q, r in enumerate(groups):
    if collapsed[q] and acr > tau_adapt:
      n = len(r)
      k_count = max(1, min(n, math.ceil(n * acr**alpha)))
      r_obs = r.mean()
      ks = np.arange(1, k_count + 1)
      v = r_obs * (1 - ks / (k_count + 1)) if r_obs > 0 else np.minimum(1.0, r_anchor * ks)
      both = np.concatenate([r, v])
      out[q, mask[q]] = (r - both.mean()) / (both.std() + eps)
    elif len(r) >= 2 and r.max() > r.min():
      out[q, mask[q]] = (r - r.mean()) / (np.std(r, ddof=std_ddof) + eps)
  return out
