"""Scaling out on a trn2.48xlarge: plans, memory per core, MFU and the launch commands.

Everything here is resolved for device ``"neuron"`` on any machine (``plan_run(...,
device_type="neuron")``): the same code decides what a trn2 runs, so a CPU can show and
test it. Nothing pretends to compute on a NeuronCore.
"""

from __future__ import annotations

from ..model.presets import PRESETS, Preset
from ..model.shapes import Qwen3Shape
from ..model.variants import VARIANTS
from ..training.launch import shell_command, torchrun_command
from ..training.spec import Plan, RunSpec, plan_run
from ..trn2 import TRN2, Topology


def trn2_plan(variant: str, preset: str | None = None, **params) -> Plan:
    """What a trn2.48xlarge would run: the variant's full-size preset on its 64 ranks."""
    name = preset or VARIANTS[variant].trn2_preset
    world = params.pop("nproc", PRESETS[name].world_size)
    spec = RunSpec(variant=variant, preset=name, nproc=world, out="runs/trn2", **params)
    return plan_run(spec, device_type="neuron")


def params_and_flops_per_token(shape: Qwen3Shape, seq_len: int) -> tuple[int, int]:
    """torchtitan's own count (``get_nparams_and_flops``) on a meta-device model.

    FLOPs per token = 6 x (parameters a token passes through, embeddings excluded) +
    12 x layers x heads x head_dim x seq_len for attention: forward and backward.
    """
    import torch

    from ..model.variants import native_model_config

    config = native_model_config(shape)
    with torch.device("meta"):
        model = config.build()
    return config.get_nparams_and_flops(model, seq_len)


def mfu_percent(
    tokens_per_s_per_core: float, flops_per_token: float, topology: Topology = TRN2
) -> float:
    """Model FLOPs utilisation: achieved / peak BF16 FLOPs of one logical core."""
    return 100 * tokens_per_s_per_core * flops_per_token / (topology.peak_tflops_per_core * 1e12)


def tokens_per_s_for_mfu(mfu: float, flops_per_token: float, topology: Topology = TRN2) -> float:
    return mfu / 100 * topology.peak_tflops_per_core * 1e12 / flops_per_token


def trn2_launch_spec(variant: str = "native", init: str = "pretrained", steps: int = 10):
    """The spec of one of AWS's two runs, as ``reproduce`` builds it for trn2."""
    from .reproduce import reproduction_specs

    base = RunSpec(variant=variant, steps=steps, out=f"runs/trn2-{variant}")
    return reproduction_specs(base, "neuron")[init]


def trn2_launch_command(variant: str = "native", init: str = "pretrained", steps: int = 10) -> str:
    """``qwen3-trn train`` for the AWS setup: it resolves the weights once, then torchrun."""
    spec = trn2_launch_spec(variant, init, steps)
    return "NEURON_LOGICAL_NC_CONFIG=2 " + shell_command(["qwen3-trn", "train", *spec.to_argv()])


def trn2_torchrun_command(variant: str = "native", steps: int = 10) -> str:
    """The torchrun line that command starts (for a random-init run, nothing to fetch)."""
    spec = trn2_launch_spec(variant, "random", steps)
    return "NEURON_LOGICAL_NC_CONFIG=2 " + shell_command(torchrun_command(spec, python="python"))


def torchtitan_command(config: str, nproc: int = 64, *overrides: str) -> str:
    """torchtitan's own entry point on our registry, as torchtitan's docs launch it."""
    cmd = ["torchrun", f"--nproc_per_node={nproc}", "-m", "torchtitan.train",
           "--module", "qwen3_trn_helpers", "--config", config, *overrides]  # fmt: skip
    return "NEURON_LOGICAL_NC_CONFIG=2 " + shell_command(cmd)


def preset_rows(presets: list[Preset] | None = None) -> list[dict[str, object]]:
    return [
        {
            "preset": p.name,
            "model": p.hub_id or "-",
            "ranks": p.world_size,
            "layout": p.layout.describe(p.world_size),
            "seq len": p.seq_len,
            "activation checkpointing": p.activation_checkpoint,
            "loss chunks": p.loss_chunks,
        }
        for p in (presets or list(PRESETS.values()))
    ]


def matched_corpora(folder, samples: int, seq_len: int = 256, tokenizer_dir=None):
    """Two orderings of the same documents, so 1 rank and 2 ranks see the same batches.

    torchtitan's dataloader gives rank r of R the r-th contiguous share of the
    documents, and packs each rank's documents into samples of ``seq_len`` tokens. With
    documents of exactly one sample each, 2 ranks at local batch 1 see (d0, d_n),
    (d1, d_n+1), ... at their steps; one rank at local batch 2 sees the same pairs if its
    corpus interleaves the two halves. Returns (interleaved for 1 rank, split for 2).
    Documents are cut from the embedded corpus at token boundaries that survive a
    decode/encode round trip.
    """
    import json
    from pathlib import Path

    from tokenizers import Tokenizer

    from ..assets import ensure_tokenizer
    from ..corpus import embedded_corpus_path, read_documents

    tok = Tokenizer.from_file(str(Path(tokenizer_dir or ensure_tokenizer()) / "tokenizer.json"))
    docs: list[str] = []
    for text in read_documents(embedded_corpus_path()):
        ids = tok.encode(text).ids
        for start in range(0, len(ids) - seq_len, seq_len):
            piece = tok.decode(ids[start : start + seq_len])
            if len(tok.encode(piece).ids) == seq_len:  # + <|im_end|> = seq_len + 1 tokens
                docs.append(piece)
            if len(docs) == 2 * samples:
                break
        if len(docs) == 2 * samples:
            break
    first, second = docs[:samples], docs[samples:]
    interleaved = [d for pair in zip(first, second, strict=True) for d in pair]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, order in (("one-rank.jsonl", interleaved), ("two-ranks.jsonl", first + second)):
        (folder / name).write_text("".join(json.dumps({"text": d}) + "\n" for d in order))
        paths.append(folder / name)
    return tuple(paths)
