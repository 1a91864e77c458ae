"""torchtitan itself, for the notebooks: its Trainer.Config, model configs, LR schedule and
its own command line. Everything shown is the object torchtitan builds or runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def _fields(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in names}


def config_sections(config) -> dict[str, dict[str, Any]]:
    """The parts of a ``Trainer.Config`` a training run is decided by, section by section."""
    group = config.optimizer.param_groups[0]
    checkpoint = config.checkpoint
    ac = config.activation_checkpoint
    return {
        "optimizer": {"name": group.optimizer_name, **group.optimizer_kwargs},
        "lr_scheduler": _fields(
            config.lr_scheduler, ("warmup_steps", "decay_ratio", "decay_type", "min_lr_factor")
        ),
        "training": _fields(
            config.training,
            (
                "local_batch_size",
                "seq_len",
                "steps",
                "max_norm",
                "mixed_precision_param",
                "mixed_precision_reduce",
            ),
        ),  # fmt: skip
        "parallelism": _fields(
            config.parallelism, ("data_parallel_shard_degree", "tensor_parallel_degree")
        ),
        "activation_checkpoint": {"policy": type(ac).__qualname__ if ac else "none"},
        "checkpoint": _fields(
            checkpoint, ("enable", "interval", "initial_load_path", "initial_load_in_hf")
        ),
        "dataloader": _fields(config.dataloader, ("dataset", "dataset_path")),
        "loss": {"class": type(config.loss).__qualname__},
        "override": {"imports": config.override.imports},
        "metrics": _fields(config.metrics, ("log_freq", "enable_tensorboard", "jsonl_file")),
    }


def section_rows(config) -> list[dict[str, object]]:
    """One row per setting: section | field | value (for a notebook table)."""
    return [
        {"section": section, "field": field, "value": str(value)}
        for section, values in config_sections(config).items()
        for field, value in values.items()
    ]


def model_summary(model_config, attention: str | None = None) -> dict[str, object]:
    """The numbers of a torchtitan Qwen3 model config (as its Config classes hold them).

    torchtitan's Qwen3 config names FlexAttention; the ``--override.imports`` of a run
    replaces it when the trainer is built. Pass the plan's ``attention`` ("document",
    "causal" or "flex") and the row shows the attention config that actually runs,
    made by the same override function.
    """
    layer = model_config.layers[0]
    attention_config = layer.attention
    inner = attention_config.inner_attention
    if attention is not None:
        from ..model import attention as overrides

        swap = {"document": overrides.document_sdpa, "causal": overrides.causal_sdpa}
        if attention in swap:
            inner = swap[attention](inner)
    attention = attention_config
    mlp = getattr(layer, "feed_forward", None)
    moe = getattr(layer, "moe", None)
    row: dict[str, object] = {
        "layers": len(model_config.layers),
        "dim": model_config.dim,
        "heads": attention.n_heads,
        "kv heads": attention.n_kv_heads,
        "head dim": attention.head_dim,
        "vocab": model_config.vocab_size,
        "rope theta": attention.rope.theta,
        "tied embeddings": model_config.enable_weight_tying,
        "inner attention": type(inner).__qualname__,
    }
    if mlp is not None:
        row["mlp hidden"] = mlp.w1.out_features
    if moe is not None:
        row["experts"] = moe.num_experts
        row["expert hidden"] = moe.routed_experts.inner_experts.hidden_dim
    return row


def lr_schedule(config) -> list[float]:
    """The learning rate at each step, from torchtitan's own scheduler for ``config``."""
    import torch

    model = torch.nn.Linear(1, 1)
    optimizers = config.optimizer.build(model_parts=[model])
    schedulers = config.lr_scheduler.build(
        optimizers=optimizers, training_steps=config.training.steps
    )
    rates = []
    for _ in range(config.training.steps):
        rates.append(optimizers.optimizers[0].param_groups[0]["lr"])
        optimizers.step()
        schedulers.step()
    return rates


def torchtitan_entry_point(
    config: str, out: str | Path, *overrides: str, timeout: float = 600
) -> tuple[str, list[dict[str, Any]], float]:
    """Run ``python -m torchtitan.train --module qwen3_trn_helpers --config NAME ...``.

    torchtitan's own ``main()`` parses the flags (tyro), builds the Trainer and trains;
    our package only supplies the config. Returns (the command, the metrics it wrote,
    seconds).
    """
    from ..runs.child import run_child
    from ..runs.launch import shell_command
    from ..runs.neuron_cores import one_process_share_environment
    from ..training.metrics_file import read_metrics

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = ["python", "-m", "torchtitan.train", "--module", "qwen3_trn_helpers",
           "--config", config, "--dump_folder", str(out), *overrides]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    env = one_process_share_environment(env)  # a class sharing a trn2: the share's first core
    from ..without_triton import entry_point_argv

    # as typed; without triton and its start-up hook (a Mac set up by hand), the same
    # torchtitan main() with the hook run first (without_triton.entry_point_argv)
    argv = [sys.executable, *entry_point_argv(cmd[3:])]
    result = run_child(argv, log=out / "torchtitan.log", env=env, timeout=timeout).check(
        "torchtitan.train"
    )
    return shell_command(cmd), read_metrics(out / "metrics.jsonl"), result.seconds
