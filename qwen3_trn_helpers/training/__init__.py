"""The training layer: what torchtitan builds for one run. The run spec and its plan
(``plan_run``), the trainer config and session, the patches that run torchtitan on a CPU,
compile settings, checkpoints, metrics and the memory estimate. Below ``runs/``, which
decides where and how a run executes."""
