"""The runs layer: how a planned run executes. In this process or through torchrun, the
run folder (owner, lock, resume), child processes, weights, rendezvous, and the run
flags of the command line. Above ``training/``; the cluster tools (``ops/``), the lessons
and the CLI sit on it."""
