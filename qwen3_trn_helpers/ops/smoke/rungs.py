"""The bodies of the rungs that check one layer of the stack in their own process (or,
for the collectives, in each of torchrun's ranks): each prints one ``ok:``, ``fail:``
or ``skip:`` line and exits 0, 1 or :data:`SKIP` (``python -m qwen3_trn_helpers.ops.smoke
RUNG``, ops/smoke/__main__.py).
"""

from __future__ import annotations

import math
import os
import socket
import sys

from ...trn2 import PHYSICAL_CORES_PER_CHIP

SKIP = 77  # exit status of a rung that does not apply here (as automake's tests)


def _skip(reason: str) -> None:
    print(f"skip: {reason}")
    sys.exit(SKIP)


def _torchtitan_line() -> str:
    """torchtitan's version and folder, and a warning when AWS's fork is installed too."""
    from ...stack import torchtitan_stack

    stack = torchtitan_stack()
    line = f"torchtitan {stack.version} from {stack.location}"
    return line + (f"; warning: {stack.warning}" if stack.warning else "")


def rung_environment() -> None:
    import shutil
    from importlib import metadata, util

    missing = []
    if util.find_spec("triton") is None:
        missing.append("triton (torchtitan 0.3.0 imports it)")
    titan = _torchtitan_line()
    if shutil.which("neuron-ls") is None:
        if missing:
            print(f"fail: missing {', '.join(missing)}: pip install triton")
            sys.exit(1)
        _skip(f"no neuron-ls: not a Neuron machine (triton present; {titan})")
    versions = {}
    for package in ("torch-neuronx", "neuronx-cc", "nki"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            missing.append(package)
    for module in (
        "nkilib.core.moe.moe_cte.moe_cte",
        "nkilib.experimental.moe.bwd.blockwise_mm_backward",
    ):
        try:
            __import__(module)
        except Exception as e:  # ImportError, or a kernel module failing at import
            missing.append(f"{module} ({type(e).__name__})")
    if shutil.which("neuronx-cc") is None:  # torch-neuronx looks the compiler up on PATH
        missing.append(
            "neuronx-cc on PATH (activate the Neuron venv, or rerun scripts/setup.sh from it)"
        )
    from ...device import neuron_ls_query

    chips, how = neuron_ls_query()
    if not chips:
        missing.append(how if chips is None else f"{how}: no devices listed")
    if missing:
        print(f"fail: missing {'; '.join(missing)}; {titan}")
        sys.exit(1)
    listed = ", ".join(f"{k} {v}" for k, v in versions.items())
    print(f"ok: {len(chips)} chips ({how}); {listed}; triton and nki-library MoE kernels "
          f"import; {titan}")  # fmt: skip


def expected_device_count(chips: int, lnc: int, environ) -> tuple[int, str]:
    """(count, why): what ``torch.neuron.device_count()`` must say in this process.

    torch-neuronx counts the *visible* logical cores (``nrt_get_visible_vnc_count``,
    NeuronDevice.cpp): those ``NEURON_RT_VISIBLE_CORES`` names (a class's share gives
    the one-process rung the share's first core), else every core at the LNC.
    """
    from ...runs.neuron_cores import CLASS_SLICE_ENV

    visible = environ.get("NEURON_RT_VISIBLE_CORES")
    if visible:
        count = 0
        for part in visible.split(","):
            first, _, last = part.strip().partition("-")
            count += int(last or first) - int(first) + 1
        share = environ.get(CLASS_SLICE_ENV)
        whose = f"the first core of your share {CLASS_SLICE_ENV}={share}" if share else "named"
        return count, f"NEURON_RT_VISIBLE_CORES={visible}: {whose}"
    return chips * PHYSICAL_CORES_PER_CHIP // lnc, f"{chips} chips at LNC {lnc}"


def rung_registration() -> None:
    import torch
    import torch.distributed as dist

    from ...device import privateuse1_backend_name

    name = privateuse1_backend_name()
    if name != "neuron":
        _skip(f"PrivateUse1 backend is {name!r}: torch-neuronx is not loaded here")
    problems = []
    count = torch.neuron.device_count()  # type: ignore[attr-defined]
    from ...device import neuron_ls
    from ...trn2 import lnc_from_env

    chips = len(neuron_ls() or [])  # 16 on a trn2.48xlarge, 1 on a trn2.3xlarge
    expected, why = expected_device_count(chips, lnc_from_env(), os.environ)
    if count != expected:
        problems.append(f"{count} devices, expected {expected} ({why})")
    if str(torch.accelerator.current_accelerator()) not in ("neuron", "neuron:0"):
        problems.append(f"torch.accelerator is {torch.accelerator.current_accelerator()}")
    backend = dist.Backend.default_device_backend_map.get("neuron")
    if backend != "neuron":
        problems.append(f"process-group backend for neuron is {backend!r}")
    from torchtitan.tools import utils

    if utils.device_type != "neuron":
        problems.append(f"torchtitan chose {utils.device_type!r}")
    if problems:
        print(f"fail: {'; '.join(problems)}")
        sys.exit(1)
    print(f"ok: {count} neuron devices, process group 'neuron', torchtitan on neuron")


def rung_collectives() -> None:
    """Under torchrun, 2 ranks (or one per node): all_reduce, one FSDP2 step of a small
    MLP, all_gather; the first rank of each node says so, naming its node."""
    import gc

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from ...device import detect_device_type
    from ...training.ranks import end_process_groups, rank_place

    device_type = detect_device_type()
    backend = (
        "gloo" if device_type == "cpu" else dist.Backend.default_device_backend_map.get(device_type)
    )
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if device_type == "cpu":
        device = torch.device("cpu")
    else:  # after init_process_group each rank owns one device, index LOCAL_RANK (or
        # its only one, in a class's share: NEURON_RT_VISIBLE_CORES names one core)
        seen = getattr(torch, device_type).device_count()
        device = torch.device(device_type, rank_place().local_rank % seen)
    x = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(x)
    expected = world * (world + 1) / 2
    if not torch.allclose(x.cpu(), torch.full((4,), expected)):
        print(f"fail: all_reduce gave {x.cpu().tolist()}, expected {expected}")
        sys.exit(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model.to(device)
    fully_shard(model)
    # as torchtitan trains: it normalises the loss itself and sets FSDP's divide factor
    # to 1, so gradients are reduce-scattered with PREMUL_SUM (distributed/fsdp.py)
    model.set_gradient_divide_factor(1.0)
    if device_type == "cpu":
        model.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randn(8, 64, device=device)
    loss = model(data).pow(2).mean()
    loss.backward()
    optimizer.step()
    # the step reached every rank's shard: after it, the ranks' losses agree and are finite
    after = model(data).pow(2).mean().detach().reshape(1)
    gathered = [torch.zeros_like(after) for _ in range(world)]
    dist.all_gather(gathered, after)
    place = rank_place()  # (torchrun's variables: every rank of the ladder has them)
    nodes = place.nodes
    fabric_ok, fabric = True, ""
    if nodes > 1:  # every rank of every node: each node's bus bandwidth, against a floor
        from ..fabric import check_here

        fabric_ok, fabric = check_here(device, place.local_world_size)
    # Every rank done with its collectives, and the sharded model freed, before the
    # process group goes: destroyed right after the all_gather with the model alive, a
    # gloo rank aborted at exit in 3-4 of 12 runs here ("terminate called without an
    # active exception", after the checks had passed); with a barrier, or the model
    # freed first, in none of 10 and 22. Even so the group's C++ threads outlive it: the
    # process then leaves without interpreter shutdown (training/ranks.py leave).
    del model, optimizer, loss
    gc.collect()
    end_process_groups()  # then the process leaves without interpreter shutdown (below)
    values = [g.item() for g in gathered]
    if not all(math.isfinite(v) and v == values[0] for v in values):
        print(f"fail: after one FSDP2 step the ranks' losses differ or are not finite: {values}")
        sys.exit(1)
    node = place.node
    where = f"node {node} of {nodes} ({socket.gethostname()}): " if nodes > 1 else ""
    if not fabric_ok:  # every rank of the node fails; its first one says why
        if place.local_rank == 0:
            print(f"fail: {where}{fabric}")
        sys.exit(1)
    if place.local_rank == 0:
        said = f"{world} ranks on {device_type} ({backend}): all_reduce and an FSDP2 step"
        print(f"ok: {where}{said}" + (f"; {fabric}" if fabric else ""))


def _nki_vs_reference(experts: int, top_k: int, tokens: int = 256) -> tuple[float, str]:
    """(largest relative error, its tensor): NKI op vs reference, forward and gradients,
    at Qwen3-30B-A3B's expert width (H 2048, I 768) and block size 256, for ``tokens``
    tokens (4,096, the preset's sequence, gives the block count training launches)."""
    import torch

    from ...model.moe_blockwise import blockwise_experts_reference, blockwise_mapping
    from ...model.nki_moe import blockwise_experts_nki

    torch.manual_seed(0)
    T, H, I, E, K, B = tokens, 2048, 768, experts, top_k, 256  # noqa: E741 (the kernel's names)
    ids = torch.stack([torch.randperm(E)[:K] for _ in range(T)])
    scores = torch.softmax(torch.randn(T, K), -1)
    pos, b2e = blockwise_mapping(ids, E, B)
    aff = torch.zeros(T + 1, E).scatter(1, ids, scores)
    x = torch.cat([torch.randn(T, H) * 0.1, torch.zeros(1, H)])
    gate_up = torch.randn(E, H, 2, I) * 0.02
    down = torch.randn(E, I, H) * 0.02
    results = []
    for fn, dev in ((blockwise_experts_reference, "cpu"), (blockwise_experts_nki, "neuron")):
        inputs = [t.to(dev, torch.bfloat16).requires_grad_() for t in (x, aff, gate_up, down)]
        out = fn(*inputs, pos.to(dev), b2e.to(dev), B)
        out.float().pow(2).sum().backward()
        results.append([out.float().cpu()] + [t.grad.float().cpu() for t in inputs])
    names = ("output", "d_hidden", "d_affinities", "d_gate_up", "d_down")
    errors = []
    for name, ref, got in zip(names, *results, strict=True):
        scale = ref.abs().max().item() or 1.0
        errors.append(((ref - got).abs().max().item() / scale, name))
    return max(errors)


def rung_nki_moe_kernel() -> None:
    """The NKI op against the reference: 4 experts (top-2), then Qwen3-30B-A3B's 128
    experts (top-8), the count the 30b-a3b preset trains with, at 256 tokens and at the
    preset's 4,096 (the real block count: 255 blocks of 256)."""
    from ...device import detect_device_type

    if detect_device_type() != "neuron":
        _skip("needs a NeuronCore (the NKI kernels run only on Trainium)")
    worst = 0.0
    for experts, top_k, tokens in ((4, 2, 256), (128, 8, 256), (128, 8, 4096)):
        err, name = _nki_vs_reference(experts, top_k, tokens)
        if err > 2e-2:
            print(f"fail: {experts} experts, top-{top_k}, {tokens} tokens: {name} differs "
                  f"from the reference by {err:.2e} (relative)")  # fmt: skip
            sys.exit(1)
        worst = max(worst, err)
    print(f"ok: NKI MoE = reference within {worst:.1e} (relative, bf16), fwd and grads, "
          "4 and 128 experts, 256 and 4,096 tokens")  # fmt: skip
