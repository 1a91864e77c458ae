"""``torch.autocast(device_type="neuron")``, as torch-neuronx registers it: every operator
falls through the AutocastPrivateUse1 key (NeuronBindings.cpp:498-499), except those
CUDA's autocast runs in lower precision, which torch-neuronx registers from the same
list (amp/autocast_mode.cpp:20-24, ``AT_FORALL_LOWER_PRECISION_FP``): their floating
inputs on ``neuron`` are cast to the autocast dtype first. The double registers the
matrix products of that list (the ones our code and torchtitan call); its fp32 and
promote lists (:26-44) it leaves to fall through.
"""

from __future__ import annotations

from typing import Any

#: the lower-precision operators the double casts (a part of AT_FORALL_LOWER_PRECISION_FP)
LOWER_PRECISION = ("mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "mv",
                   "addmv", "einsum", "scaled_dot_product_attention")  # fmt: skip


def install(device: str = "neuron") -> None:
    import torch

    key = torch._C.DispatchKey.AutocastPrivateUse1
    lib = torch.library.Library("_", "IMPL")
    lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    install.libs = [lib]  # type: ignore[attr-defined]  (kept alive: dropping one deregisters)
    aten = torch.library.Library("aten", "IMPL")
    install.libs.append(aten)  # type: ignore[attr-defined]

    def cast(x: Any, dtype: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == device:
            return x.to(dtype)
        if isinstance(x, list | tuple):
            return type(x)(cast(v, dtype) for v in x)
        return x

    def lower(name: str):
        overloads = getattr(torch.ops.aten, name)

        def kernel(*args: Any, **kwargs: Any) -> Any:
            dtype = torch.get_autocast_dtype(device)
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(key)):
                return overloads(
                    *cast(args, dtype), **{k: cast(v, dtype) for k, v in kwargs.items()}
                )

        return kernel

    for name in LOWER_PRECISION:
        aten.impl(name, lower(name), "AutocastPrivateUse1")
