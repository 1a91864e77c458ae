"""Cluster jobs: a run planned for the nodes it will run on (``plan``), then written as
the files a team's scheduler takes: a Slurm batch script (``slurm``), a Kubeflow
PyTorchJob or TrainJob (``kubernetes``), with what both share (``common``) and the
container a Slurm job's steps run in (``container``). Text only: nothing here launches."""
