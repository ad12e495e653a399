"""``python -m pyrms.bench``: RMSNorm kernels against the copy ceiling and against other implementations.

Counts the bytes each call must move, measures the device-to-device copy bandwidth in the same run,
validates every implementation's output against a float64 reference before timing it, then times
device time per launch (CUDA events around batches of launches queued behind a spin kernel, inputs
rotated so the working set exceeds L2), the launch floor (an empty kernel and a one-row copy, back to
back and in a CUDA graph, without and with programmatic dependent launch), host time per call, and CUDA
graph replay. Prints tables and a PASS/FAIL check of each target (targets.json, and each op's own with its
declaration); writes JSON
(and a PNG where matplotlib exists).

Layout, one job per module:
  cli        command line and the no-GPU message
  run        the sections of a run, in order, and the files it writes
  config     shape grids, option parsing (pure)
  ops        what an op's declaration says (each op's is its family's pyrms/ops/<family>/bench.py, found
             through the registry): what it reads and writes, byte counts, implementations, its own
             targets (pure)
  stats      medians, spread, rotation counts, row sampling (pure)
  results    one Record per (op, dtype, shape, implementation) (pure)
  targets    the project's targets (targets.json, the ops' own) as PASS/FAIL/N/A (pure)
  report     tables, JSON, plot (pure but for the files it writes)
  env        device and version facts
  timing     the spin kernel and the event timer
  problem    device buffers for one (op, dtype, shape): rotation sets, fill, poison, downloads
  validate   each op's float64 reference against an output: the relative error
  impls      what an implementation is (torch_impls: what PyTorch's and Triton's share); registry
             finds an (op, implementation)
  ceiling    device-to-device copy bandwidth
  eager      PyTorch's eager RMSNorm (and its residual add): the baseline every benchmark spells once
  lab        what the lab benches under tools/ share: a row's like-for-like figures, their JSON file
  floor      the launch floor: its kernels, measurement and lookups
  host       host time per call, and CUDA graph capture against one-by-one launches
  sweep      the shape sweep: build, validate, warm up, time each implementation
"""
