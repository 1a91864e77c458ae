"""The CPU fallback's allocator: a ``neuron`` tensor on the index torch-neuronx would give
it, with its values in a CPU tensor kept for it, and the bytes each index holds.

torch's Python backend route has one way to make a PrivateUse1 tensor,
``torch._C._acc.create_empty_tensor``, and it always puts it on index 0
(torch/csrc/acc/Module.cpp, ``createEmptyTensor``: ``c10::Device(PrivateUse1, 0)``). On
that route rank 1 of a torchrun job would hold ``neuron:0`` tensors however right our
code was, and torch-neuronx's rule that a process may touch only ``neuron:LOCAL_RANK``
(device_module.vnc_id) could not be kept. So the double makes its tensors through DLPack
instead: a capsule for device kDLExtDev (12) and id ``index``, which
``torch._C._from_dlpack`` turns into a PrivateUse1 tensor on that index (torch's
DLConvertor maps kDLExtDev to PrivateUse1). Its storage's deleter is ours, called when
the storage dies: that is when the allocator's bytes are freed (NeuronCachingAllocator.cpp
:52-58 records the deallocation there too), so ``memory_stats`` reads real counts.

A limit of the route, not of torch-neuronx: the autograd engine keeps one ready queue per
device index the Python device guard reports (always 1), so backward on ``neuron:1``
needs autograd's multithreading off; the double turns it off in the main thread as it
loads (registration.py), as torchtitan 0.3.0 does itself (torchtitan/distributed/
utils.py:474-477).
"""

from __future__ import annotations

import ctypes

import torch

from .device_module import vnc_id

#: values of each neuron storage: storage id -> CPU tensor (contiguous, or a 1-D tensor
#: over a view's whole CPU storage)
RAW: dict[int, torch.Tensor] = {}
#: bytes held per PyTorch index: [current, peak] (DeviceMemoryStatsRegistry's, by index)
ALLOCATED: dict[int, list[int]] = {}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int),
        ("dtype", _DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
    ]  # fmt: skip


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                     ("deleter", _DELETER)]  # fmt: skip

#: what stays alive until torch calls the deleter: address -> (struct, shape, index,
#: storage id, CPU data pointer)
_LIVE: dict[int, tuple] = {}
#: CPU storages behind neuron storages: data pointer -> [wrappers, bytes] (a view an
#: operator returned shares its input's CPU storage: no new bytes on the device)
_CPU: dict[int, list[int]] = {}
_K_DL_EXT_DEV = 12  # DLPack's kDLExtDev: torch's PrivateUse1
_SPARE = ctypes.create_string_buffer(16)  # the data pointer of an empty tensor
_capsule = ctypes.pythonapi.PyCapsule_New
_capsule.restype = ctypes.py_object
_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _dl_code(dtype: torch.dtype) -> int:
    """DLPack's type code (dlpack.h: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
    kDLComplex 5, kDLBool 6)."""
    if dtype == torch.bool:
        return 6
    if dtype == torch.bfloat16:
        return 4
    if dtype.is_complex:
        return 5
    if dtype.is_floating_point:
        return 2
    return 1 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else 0


@_DELETER
def _freed(managed) -> None:
    """torch dropped a neuron storage: its values and its bytes go."""
    try:
        held = _LIVE.pop(ctypes.addressof(managed.contents), None)
        if held is not None:
            _, _, index, key, ptr = held
            RAW.pop(key, None)
            count = _CPU.get(ptr)
            if count is not None:
                count[0] -= 1
                if count[0] == 0:
                    del _CPU[ptr]
                    ALLOCATED.setdefault(index, [0, 0])[0] -= count[1]
    except Exception:  # (at interpreter shutdown the modules may be gone)
        pass


def new_tensor(values: torch.Tensor, index: int) -> torch.Tensor:
    """A contiguous ``neuron:index`` tensor of ``values``'s shape and dtype whose values
    are ``values`` (a contiguous CPU tensor, kept for it)."""
    shape = tuple(values.shape)
    m = _Managed()
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    m.dl_tensor.data = values.data_ptr() or ctypes.addressof(_SPARE)
    m.dl_tensor.device = _Device(_K_DL_EXT_DEV, index)
    m.dl_tensor.ndim = len(shape)
    m.dl_tensor.dtype = _DType(_dl_code(values.dtype), values.dtype.itemsize * 8, 1)
    m.dl_tensor.shape = dims
    m.deleter = _freed
    tensor = torch._C._from_dlpack(_capsule(ctypes.addressof(m), b"dltensor", None))
    key = tensor.untyped_storage()._cdata
    ptr = values.untyped_storage().data_ptr()
    _LIVE[ctypes.addressof(m)] = (m, dims, index, key, ptr)
    RAW[key] = values
    if ptr in _CPU:
        _CPU[ptr][0] += 1
    else:
        nbytes = values.untyped_storage().nbytes()
        _CPU[ptr] = [1, nbytes]
        held = ALLOCATED.setdefault(index, [0, 0])
        held[0] += nbytes
        held[1] = max(held[1], held[0])
    return tensor


def allocate(values: torch.Tensor, index: int) -> torch.Tensor:
    """What torch-neuronx's allocator does for ``empty`` on ``neuron:index``: the index
    must be this process's (``get_vnc_id``, NeuronCachingAllocator.cpp:49-50; a size-0
    tensor takes no memory and is not checked, :40-42), and the runtime starts."""
    from .device_module import start_runtime

    if values.numel():
        vnc_id(index)
        start_runtime()
    return new_tensor(values, index)


def reset_peak(index: int) -> None:
    held = ALLOCATED.setdefault(index, [0, 0])
    held[1] = held[0]
