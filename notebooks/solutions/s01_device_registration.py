"""Solutions to the exercises of 01_device_registration."""

import torch


def is_trainium_registered() -> bool:
    """Exercise 1: the PrivateUse1 slot is named 'neuron' once TorchNeuron has loaded."""
    return torch._C._get_privateuse1_backend_name() == "neuron"


def autocast_error(device_type: str = "cpu", n: int = 64, seed: int = 0) -> float:
    """Exercise 2: max |bf16 autocast matmul - fp32 matmul| for n x n random matrices."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, generator=gen).to(device_type)
    b = torch.randn(n, n, generator=gen).to(device_type)
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
        low = a @ b
    return (low.float() - a @ b).abs().max().item()


if __name__ == "__main__":
    print(is_trainium_registered(), autocast_error())
