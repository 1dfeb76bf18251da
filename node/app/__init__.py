"""The long-running app: the training and bootstrap loops (runner.py) and `swarm local` with the process harness
tests and benchmarks share (local_swarm.py)."""
