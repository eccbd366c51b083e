"""`clusterfit calibrate`: measure the performance model's kernels on the user's GPUs and write a profile.

- ``probe``: PyTorch timings of GEMMs (bf16 / fp8), decode and prefill attention, MoE grouped GEMMs, copy and read
  streams on one GPU (adapted from the probes behind the shipped H200 measurements).
- ``allreduce``: NCCL all-reduce timings across the visible GPUs (torch.distributed, torch.multiprocessing spawn).
- ``fit``: the least-squares fit of the model's curves (shared with benchmarks/fit_kernels.py).
- ``run``: the command: environment checks, timing, fit, the profile JSON (clusterfit.profile).

Importing this package imports neither torch nor scipy; ``run.require_libraries`` does, with an install hint.
"""
