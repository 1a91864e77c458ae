"""A toy device that computes: PyTorch's Python route for a PrivateUse1 backend.

TorchNeuron's design in miniature. TorchNeuron registers Trainium as PrivateUse1
(named ``neuron``), runs the operators it has Neuron kernels for, and sends the rest to
the CPU. Here the same routes are built in Python with PyTorch's own, experimental,
API (``torch.utils.backend_registration._setup_privateuseone_for_python_backend``, as
in torch's test ``test/test_privateuseone_python_backend.py``):

* it registers PrivateUse1 under TorchNeuron's own name, ``neuron``, so the code reads
  as it would on a trn2 (``x.to("neuron")``);
* a toy ``neuron`` tensor holds no values, only a shape and a dtype; its values are a CPU
  tensor the device keeps for it (its "device memory");
* a few operators have **kernels of their own**, registered with ``torch.library`` for
  the PrivateUse1 key (the matrix products, as Neuron's Tensor Engine would run them);
* **everything else** reaches one fallback (``Library("_", "IMPL").fallback``) that
  unwraps the arguments, runs the operator on the CPU, wraps the results and counts
  what it caught.

It is plainly a toy: nothing is faster, and it runs in a child process, because a
process can rename PrivateUse1 only once. That child is also why the name ``neuron`` is
safe: it starts with device-backend autoload off (``TORCH_DEVICE_BACKEND_AUTOLOAD=0``),
so even on a trn2, where torch-neuronx is installed and would claim PrivateUse1 as
``neuron`` at ``import torch``, it never loads there; the child checks that PrivateUse1
is still unnamed and torch_neuronx absent before it registers, starts no Neuron runtime,
and exits when the steps are done. The notebook's kernel, and every real run, never see
the toy. ``toy_device_training`` starts the child and returns what it measured next to
the same steps on the CPU.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import Any

#: the name the toy registers: TorchNeuron's, safe in a child without torch-neuronx
NAME = "neuron"


def _child(steps: int, seed: int) -> dict[str, Any]:
    """In the child: register the device, train a small model on it and on the CPU."""
    import torch
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    from ..errors import ConfigError

    taken = torch._C._get_privateuse1_backend_name()
    if taken != "privateuseone" or "torch_neuronx" in sys.modules:
        raise ConfigError(
            f"the toy device needs a free PrivateUse1, but this process has {taken!r} "
            "(torch_neuronx loaded): run it through toy_device_training(), whose child "
            "process sets TORCH_DEVICE_BACKEND_AUTOLOAD=0"
        )
    _setup_privateuseone_for_python_backend(NAME)
    caught: Counter[str] = Counter()
    own: Counter[str] = Counter()

    # A toy tensor is an empty PrivateUse1 tensor (shape and dtype only); its values
    # live in a CPU tensor, found through the tensor's storage. (Not a Python attribute:
    # autograd keeps saved outputs as shallow copies, new Python objects sharing the
    # storage.)
    raw_of: dict[int, torch.Tensor] = {}

    def is_toy(x: Any) -> bool:
        return isinstance(x, torch.Tensor) and x.device.type == NAME

    def unwrap(x: Any) -> Any:
        if is_toy(x):
            return raw_of[x.untyped_storage()._cdata]
        if isinstance(x, list | tuple):
            return type(x)(unwrap(v) for v in x)
        if isinstance(x, torch.device) and x.type == NAME:
            return torch.device("cpu")
        return x

    def wrap(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            toy = torch._C._acc.create_empty_tensor(tuple(x.shape), x.dtype)
            raw_of[toy.untyped_storage()._cdata] = x
            return toy
        if isinstance(x, list | tuple):
            return type(x)(wrap(v) for v in x)
        return x

    def fallback(op, *args, **kwargs):
        """Any operator without a kernel of the toy's own: run it on the CPU, count it."""
        caught[op.name()] += 1
        cpu_args = unwrap(args)
        cpu_kwargs = {k: unwrap(v) for k, v in kwargs.items()}
        out = op(*cpu_args, **cpu_kwargs)
        # an in-place or out= operator changed the raw tensor: return the wrapper itself
        for a, c in zip(args, cpu_args, strict=True):
            if is_toy(a) and out is c:
                return a
        for k, v in kwargs.items():  # out= variants return their out tensor
            if is_toy(v) and out is cpu_kwargs[k]:
                return v
        return wrap(out)

    lib = torch.library.Library("_", "IMPL")  # the global namespace: fallbacks live there
    lib.fallback(fallback, "PrivateUse1")

    def own_kernel(name: str):
        def register(fn):
            def kernel(*args, **kwargs):
                own[name] += 1
                return fn(*args, **kwargs)

            torch.library.impl(name, "privateuseone")(kernel)
            return fn

        return register

    @own_kernel("aten::empty.memory_format")
    def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):  # fmt: skip
        return wrap(torch.empty(size, dtype=dtype or torch.get_default_dtype()))

    @own_kernel("aten::empty_strided")
    def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
        return wrap(torch.empty_strided(size, stride, dtype=dtype or torch.get_default_dtype()))

    @own_kernel("aten::_copy_from")
    def copy_from(src, dst, non_blocking=False):
        values = unwrap(src)
        if is_toy(dst):
            unwrap(dst).copy_(values)
        else:
            dst.copy_(values)
        return dst

    @own_kernel("aten::mm")
    def mm(a, b):
        return wrap(unwrap(a) @ unwrap(b))

    @own_kernel("aten::addmm")
    def addmm(bias, a, b, *, beta=1, alpha=1):
        return wrap(torch.addmm(unwrap(bias), unwrap(a), unwrap(b), beta=beta, alpha=alpha))

    @own_kernel("aten::t")
    def t(a):
        return wrap(unwrap(a).t())

    # the same model, data and optimizer on both devices
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    y = torch.randint(0, 4, (8,))
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def train(device: str) -> tuple[list[float], dict[str, torch.Tensor]]:
        """SGD on ``device``. The parameters are moved with ``Tensor.to`` and passed to
        the module with ``torch.func.functional_call``: ``Module.to`` would re-wrap them
        as ``nn.Parameter`` and lose the toy tensor's Python side (its ``raw``)."""
        params = {n: v.to(device, copy=True).requires_grad_() for n, v in initial.items()}
        inputs, labels = x.to(device), y.to(device)
        losses, grads = [], {}
        for _ in range(steps):
            logits = torch.func.functional_call(model, params, (inputs,))
            loss = torch.nn.functional.cross_entropy(logits, labels)
            loss.backward()
            grads = {n: p.grad.to("cpu") for n, p in params.items()}
            with torch.no_grad():
                for p in params.values():
                    p.sub_(0.1 * p.grad)  # SGD, lr 0.1: in place, on the device
                    p.grad = None
            losses.append(loss.to("cpu").item())
        return losses, grads

    cpu_losses, cpu_grads = train("cpu")
    caught.clear()
    toy_losses, toy_grads = train(NAME)
    return {
        "device": str(wrap(torch.zeros(1)).device),
        "privateuse1 name": torch._C._get_privateuse1_backend_name(),
        "cpu_losses": cpu_losses,
        "toy_losses": toy_losses,
        "max_grad_diff": max((toy_grads[n] - cpu_grads[n]).abs().max().item() for n in cpu_grads),
        "own_kernels": dict(own),
        "fell_back": dict(caught.most_common()),
    }


def toy_device_training(steps: int = 3, seed: int = 0, timeout_s: float = 120) -> dict:
    """Train a small MLP for ``steps`` SGD steps on the toy ``neuron`` device and on the
    CPU, in a child process; return both losses, the largest gradient difference and the
    operator counts (own kernels, and what the CPU fallback caught).

    The child runs with autoload off, so torch-neuronx (installed on a trn2) stays out
    of it and the name ``neuron`` is the toy's alone there."""
    from ..runs import child

    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    # the one child runner: its process group stopped on any stop, one error line
    return child.call(_child, int(steps), int(seed), env=env, timeout=timeout_s)


if __name__ == "__main__":
    print(json.dumps(toy_device_training(), indent=1))
