"""Keep a notebook kernel on trn2 off the Neuron runtime: run a function in a child.

A few lessons build a torchtitan Trainer on the CPU inside the notebook (the parity
check, the initial-loss measurement, the dry run). On a CPU machine that is fine. On
trn2 the notebook process has torch-neuronx loaded, and anything that touches a
NeuronCore there would start the Neuron runtime, which keeps every core until the
kernel exits and makes torch-neuronx refuse later process groups. So on a machine that
sees Neuron those functions run in a child process instead and return their result as
JSON; :func:`kernel_holds_no_neuroncore` lets a notebook check it stayed off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

_RESULT = "@@qwen3-trn-result@@"
_CHILD = f"""
import importlib, json, sys
module, name = sys.argv[1].rsplit(":", 1)
result = getattr(importlib.import_module(module), name)(**json.loads(sys.argv[2]), isolate=False)
print({_RESULT!r} + json.dumps(result))
"""


def should_isolate(isolate: bool | None) -> bool:
    """``isolate`` if given; else whether this process sees Neuron (so: only on trn2)."""
    if isolate is not None:
        return isolate
    from ..device import neuron_available

    return neuron_available()


def call_in_child(target: str, timeout: float = 3600, **kwargs: Any) -> Any:
    """``module:function(**kwargs, isolate=False)`` in a child Python; its JSON result."""
    from .launch import one_process_share_environment

    args = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in kwargs.items()}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, target, json.dumps(args)],
        capture_output=True, text=True, timeout=timeout,
        env=one_process_share_environment(dict(os.environ)),  # a class's share of a trn2
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_RESULT)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-12:])
        raise RuntimeError(f"{target} failed in its child process:\n{tail}")
    return json.loads(lines[-1][len(_RESULT) :])


def kernel_holds_no_neuroncore() -> bool:
    """True unless neuron-ls lists this process among those holding NeuronCores."""
    from ..device import neuron_ls

    pid = os.getpid()
    for device in neuron_ls() or []:
        if any(p.get("pid") == pid for p in device.get("neuron_processes") or []):
            return False
    return True
