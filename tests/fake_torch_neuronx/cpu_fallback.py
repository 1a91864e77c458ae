"""An opt-in CPU fallback for the double's ``neuron`` device: tensors that compute.

The probe of issue 29 (item 6): how far does our training step get with tensors on a
PrivateUse1 device named ``neuron`` built on torch's Python backend route? Off by
default (the double has no kernels, so a tensor made on ``neuron`` fails); on when the
environment sets ``FAKE_TORCH_NEURONX_CPU_FALLBACK=1``.

The route is torch's own, experimental one, as in torch's test
``test/test_privateuseone_python_backend.py`` and in ``qwen3_trn_helpers/lessons/
toy_device.py``: a ``neuron`` tensor is a PrivateUse1 tensor with no values of its own
(made through DLPack on the right index, tensors.py; always contiguous); its values are
a CPU tensor kept for it, found through its storage; the
memory operators (``empty.memory_format``, ``empty_strided``, ``_copy_from``) have
kernels of their own and every other operator reaches one fallback
(``Library("_", "IMPL").fallback``) that runs it on the CPU.

A view keeps its strides and aliases its CPU values (see ``wrap``): a first try kept a
transposed CPU tensor behind a contiguous wrapper and failed at the next ``view``. Each
tensor is made on the index torch-neuronx would give it, and its bytes are counted per
index (tensors.py, the allocator); an operator's first run needs ``neuronx-cc`` on PATH
(compiler.py), as torch-neuronx compiles each eager operator to a NEFF.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

ENABLE_VAR = "FAKE_TORCH_NEURONX_CPU_FALLBACK"

#: operators the fallback caught, by name (a test can read what ran on the "device")
caught: Counter[str] = Counter()


#: where ``record`` writes as the fallback meets each new operator (None: nowhere)
record_to: str | None = None


def record(folder: str) -> None:
    """Write what the fallback caught into ``folder`` (the double's record).

    Called as each new operator is first caught, not only at exit: a rank that ran
    collectives leaves with ``os._exit`` (training/ranks.py ``leave``), so atexit
    handlers never run there."""
    import json
    import os
    from pathlib import Path

    path = Path(folder) / f"fallback_rank{os.environ.get('RANK', '0')}.json"
    path.write_text(json.dumps({"caught": caught}))


def install(device: str = "neuron") -> None:
    """Register the memory kernels and the CPU fallback for PrivateUse1 (named ``device``)."""
    import torch

    from .compiler import compiled_for
    from .tensors import RAW, allocate, new_tensor

    META = torch._C.DispatchKeySet(torch._C.DispatchKey.Meta)

    def is_dev(x: Any) -> bool:
        return isinstance(x, torch.Tensor) and x.device.type == device

    def unwrap(x: Any) -> Any:
        if is_dev(x):
            raw = RAW[x.untyped_storage()._cdata]
            if x.shape == raw.shape and x.stride() == raw.stride() and not x.storage_offset():
                return raw
            # a view torch made without dispatching (unsqueeze, squeeze, expand... build
            # a TensorImpl on the same storage, alias_with_sizes_and_strides): the same
            # view of the (contiguous) CPU tensor
            return raw.as_strided(x.shape, x.stride(), raw.storage_offset() + x.storage_offset())
        if isinstance(x, list | tuple):
            return type(x)(unwrap(v) for v in x)
        if isinstance(x, torch.device) and x.type == device:
            return torch.device("cpu")
        return x

    def wrap(x: Any, index: int) -> Any:
        if isinstance(x, torch.Tensor):
            if x.is_contiguous() and not x.storage_offset():
                return new_tensor(x, index)
            # a view (transposed, sliced...): the wrapper is a contiguous 1-D tensor over
            # the CPU tensor's whole storage, and the view is made of it with its sizes,
            # strides and offset by the Meta kernel of as_strided (which only sets
            # metadata; the CPU one checks the wrapper's storage). A first try wrapped
            # the view as a contiguous tensor and failed at the next ``view``.
            flat = torch.empty(0, dtype=x.dtype).set_(
                x.untyped_storage(), 0, (x.untyped_storage().nbytes() // x.itemsize,)
            )
            base = new_tensor(flat, index)
            return torch.ops.aten.as_strided.default.redispatch(
                META, base, tuple(x.shape), x.stride(), x.storage_offset()
            )
        if isinstance(x, list | tuple):
            return type(x)(wrap(v, index) for v in x)
        return x

    def index_of(args: tuple, kwargs: dict) -> int:
        """The device an operator's outputs go to: its first ``neuron`` input's, else
        the ``device`` it names, else the current one."""
        for a in (*args, *kwargs.values()):
            for v in a if isinstance(a, list | tuple) else (a,):
                if is_dev(v):
                    return v.device.index or 0
        named = kwargs.get("device")
        if isinstance(named, torch.device) and named.type == device and named.index is not None:
            return named.index
        return torch.neuron.current_device()  # type: ignore[attr-defined]

    def fallback(op, *args, **kwargs):
        caught[op.name()] += 1
        if caught[op.name()] == 1:
            compiled_for(op.name())  # an operator's first run compiles its NEFF
            if record_to is not None:
                record(record_to)
        cpu_args = unwrap(args)
        cpu_kwargs = {k: unwrap(v) for k, v in kwargs.items()}
        out = op(*cpu_args, **cpu_kwargs)
        for a, c in zip(args, cpu_args, strict=True):  # in place: the wrapper itself
            if is_dev(a) and out is c:
                return resync(a, c)
        for k, v in kwargs.items():  # out= variants return their out tensor
            if is_dev(v) and out is cpu_kwargs[k]:
                return resync(v, cpu_kwargs[k])
        return wrap(out, index_of(args, kwargs))

    def resync(dev: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        """An in-place or out= operator resized the CPU tensor (``resize_``, ``arange.out``
        on an empty out): the wrapper's sizes must follow. Its C++ TensorImpl is shared
        with callers, so it is updated in place: ``Tensor.data = …`` shallow-copies a new
        wrapper's sizes and storage into it (torch/csrc/autograd/variable.cpp,
        ``VariableHooks::set_data``)."""
        if dev.shape != raw.shape or dev.stride() != raw.stride():
            dev.data = wrap(raw, dev.device.index or 0)
        return dev

    lib = torch.library.Library("_", "IMPL")
    lib.fallback(fallback, "PrivateUse1")
    install.lib = lib  # type: ignore[attr-defined]  (kept alive: dropping it deregisters)

    def index_named(named: Any) -> int:
        if isinstance(named, torch.device) and named.index is not None:
            return named.index
        return torch.neuron.current_device()  # type: ignore[attr-defined]

    def empty(size, *, dtype=None, layout=None, device=None, pin_memory=None,
              memory_format=None):  # fmt: skip
        values = torch.empty(size, dtype=dtype or torch.get_default_dtype())
        return allocate(values, index_named(device))

    def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
        values = torch.empty(size, dtype=dtype or torch.get_default_dtype())
        return allocate(values, index_named(device))

    def copy_from(src, dst, non_blocking=False):
        values = unwrap(src)
        (unwrap(dst) if is_dev(dst) else dst).copy_(values)
        return dst

    torch.library.impl("aten::empty.memory_format", "privateuseone")(empty)
    torch.library.impl("aten::empty_strided", "privateuseone")(empty_strided)
    torch.library.impl("aten::_copy_from", "privateuseone")(copy_from)
    keep_storage_on_resize(device)
    to_the_current_device(device)


def to_the_current_device(device: str) -> None:
    """``Tensor.to("neuron")``, ``torch.tensor(..., device="neuron")`` and
    ``torch.as_tensor`` land on the current device, as torch-neuronx's device guard
    gives it (NeuronGuardImpl.h:29-31: ``getDevice`` is ``current_device()``).

    torch fills a missing index from the registered guard before ``_to_copy`` runs
    (``ensure_has_index``, ATen's TensorConversions.cpp; ``torch.tensor`` copies through
    the same ``to``); the Python route's guard always answers 0 (torch/csrc/acc/
    Module.cpp ``PythonDeviceGuard::getDevice``), so on rank 1 an object collective's
    ``tensor.to("neuron")`` or ``torch.tensor([0], device="neuron")`` (distributed_c10d.py
    ``_object_to_tensor``, ``scatter_object_list``) would land on ``neuron:0``, which
    torch-neuronx never does. The double gives the index the real guard would, in the
    three Python calls that reach ``ensure_has_index`` (the factories, ``torch.empty``
    and the like, pass no index to the allocator, which takes the current device)."""
    import torch

    original = torch.Tensor.to

    def named(value: Any) -> Any:
        if isinstance(value, str) and value == device:
            return torch.device(device, torch.neuron.current_device())  # type: ignore[attr-defined]
        if isinstance(value, torch.device) and value.type == device and value.index is None:
            return torch.device(device, torch.neuron.current_device())  # type: ignore[attr-defined]
        return value

    def to(self, *args: Any, **kwargs: Any) -> Any:
        args = tuple(named(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = named(kwargs["device"])
        if kwargs.get("non_blocking") and self.device.type == device:
            # to the host without blocking: torch pins the host copy, through the host
            # allocator torch-neuronx registers (NeuronHooksInterface.h:34-37), which
            # the Python route's hooks cannot offer; the double copies in order anyway
            kwargs["non_blocking"] = False
        return original(self, *args, **kwargs)

    torch.Tensor.to = to

    def with_device(factory):
        def made(*args: Any, **kwargs: Any) -> Any:
            if "device" in kwargs:
                kwargs["device"] = named(kwargs["device"])
            return factory(*args, **kwargs)

        return made

    # torch's device context (``with torch.device("meta")``) recognises a factory by
    # identity in a set it builds from the module's attributes on first use
    # (torch/utils/_device.py ``_device_constructors``, lru_cache): built after the
    # wrappers, it held them and not the functions the wrappers call, so inside the
    # context torch.tensor made CPU tensors (transformers then took the meta context for
    # none, initialised its rotary buffers on meta and left them zero: the rehearsal's
    # notebook 02 parity failed by 0.4). Built first, it holds torch's own functions.
    from torch.utils._device import _device_constructors

    _device_constructors()
    torch.tensor = with_device(torch.tensor)
    torch.as_tensor = with_device(torch.as_tensor)


def keep_storage_on_resize(device: str) -> None:
    """``UntypedStorage.resize_`` on PrivateUse1 calls the hooks' ``resizePrivateUse1Bytes``
    (aten/src/ATen/detail/PrivateUse1HooksInterface.h), which torch's Python hooks cannot
    implement (``torch._C._acc.PrivateUse1Hooks`` binds only ``is_available``,
    ``has_primary_context``, ``is_built``): "You should register
    `PrivateUse1HooksInterface` ... and implement `resizePrivateUse1Bytes`". FSDP2 frees
    and re-allocates each unsharded parameter that way (torch/distributed/fsdp/
    _fully_shard/_fsdp_param.py, ``free_storage``/``alloc_storage``). torch-neuronx
    implements it in C++; here a resize of a ``neuron`` storage keeps the memory (the
    values stay correct, only the memory is never handed back)."""
    import torch

    original = torch.UntypedStorage.resize_

    def resize_(self, size):
        if self.device.type == device:
            return self
        return original(self, size)

    torch.UntypedStorage.resize_ = resize_


class InOrderStream:
    """A stream of a device that runs every operator at once, in program order (the CPU
    behind the fallback): waiting and recording have nothing to do. FSDP2 asks its
    device module for ``Stream``/``Event``/``stream``/``current_stream``
    (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, lazy_init)."""

    def __init__(self, device: Any = None, priority: int = 0) -> None:
        self.priority = priority

    def wait_stream(self, stream: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> InOrderEvent:
        return (event or InOrderEvent()).record(self)

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class InOrderEvent:
    """An event on an :class:`InOrderStream`: done when recorded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record(self, stream: Any = None) -> InOrderEvent:
        return self

    def wait(self, stream: Any = None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


_current = InOrderStream()


class _StreamContext:
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __enter__(self) -> Any:
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        pass


def add_streams(module: Any) -> None:
    """Give the device module in-order streams and events (only with the fallback on)."""
    module.Stream = InOrderStream
    module.Event = InOrderEvent
    module.stream = _StreamContext
    module.current_stream = lambda device=None: _current
    module.default_stream = lambda device=None: _current
    module.synchronize = getattr(module, "synchronize", lambda device=None: None)
