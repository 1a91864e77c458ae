"""A rank under torchrun with the double loaded: starts the ``neuron`` process group
(torch-neuronx's runtime setup, the root communicator), records what it used, ends."""

from __future__ import annotations

import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("neuron")
    dist.destroy_process_group()
