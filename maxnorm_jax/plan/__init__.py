"""Ahead-of-time plans of one RL step on a TPU slice (or this machine's CPU devices): per-chip
memory of every compiled piece against the chip's HBM, FLOPs and a roofline step time.

`python -m maxnorm_jax.plan --config=configs/default.py:model=qwen3-32b,task=math500 --topology=v5p-128`
"""
