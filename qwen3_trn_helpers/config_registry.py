"""Our configurations as a torchtitan config registry, for torchtitan's own entry point.

torchtitan's ``ConfigManager`` accepts a fully qualified ``--module`` and imports its
``config_registry``, so every configuration this course trains runs with no helper code
in the loop, the way torchtitan's docs launch training:

    torchrun --nproc_per_node 1 -m torchtitan.train \\
        --module qwen3_trn_helpers --config qwen3_trn_tiny_native --training.steps 20

and on a trn2.48xlarge, AWS's style, one rank per logical NeuronCore:

    torchrun --nproc_per_node 64 -m torchtitan.train \\
        --module qwen3_trn_helpers --config qwen3_trn_4b_native

tyro flags override any field (``--training.seq_len 2048``,
``--parallelism.tensor_parallel_degree 8``, ``--dump_folder runs/x``). Each function
plans the run exactly as ``qwen3-trn train`` does (training/spec.py) and returns the
same ``Trainer.Config`` (training/trainer.py): the same patches, and the same
``metrics.jsonl`` in the dump folder.
"""

from __future__ import annotations

from .training.plan import plan_run
from .training.ranks import ranks_per_node, world_size
from .training.spec import RunSpec


def build_config(variant: str, preset: str, dump_folder: str = "./outputs"):
    """``Trainer.Config`` for a variant and preset on the ranks torchrun started."""
    from .training.trainer import trainer_config

    per_node = ranks_per_node()  # torchrun across nodes: HSDP, as `qwen3-trn train`
    spec = RunSpec(
        variant=variant,
        preset=preset,
        nproc=per_node,
        nnodes=world_size() // per_node,
        out=dump_folder,
    )
    return trainer_config(plan_run(spec), dump_folder)


def qwen3_trn_tiny_native():
    """Tiny native Qwen3 (the real vocabulary), 10 steps at local batch 1: the CPU walkthrough."""
    return build_config("native", "tiny")


def qwen3_trn_tiny_transformers_v5():
    """The same tiny model through the Hugging Face Transformers v5 backend."""
    return build_config("transformers_v5", "tiny")


def qwen3_trn_tiny_nki_moe():
    """Tiny Qwen3 MoE with blockwise experts (PyTorch reference off Trainium)."""
    return build_config("nki_moe", "tiny_moe")


def qwen3_trn_4b_native():
    """Qwen3-4B-Instruct-2507's shape, TP 4 x FSDP 16 on 64 NeuronCores, seq 4096, C4."""
    return build_config("native", "4b")


def qwen3_trn_4b_transformers_v5():
    """The same 4B model and layout through the transformers backend."""
    return build_config("transformers_v5", "4b")


def qwen3_trn_30b_a3b_nki_moe():
    """Qwen3-30B-A3B's shape, FSDP 64, full activation checkpointing, NKI MoE experts."""
    return build_config("nki_moe", "30b-a3b")
