"""The runs layer: how a planned run executes. In this process or through torchrun, the
run folder (owner, lock, resume), child processes, weights, the dry run, rendezvous and
the Slurm and Kubernetes jobs. Above ``training/``; the lessons and the CLI sit on it."""
