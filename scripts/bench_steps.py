"""Step time of every way to train the tiny Qwen3 here, side by side in one run (CPU).

    .venv/bin/python scripts/bench_steps.py [--steps 12] [--rounds 2] [--json FILE]

Configurations, all on the tiny shape (4 layers, dim 128, the 151,936-token vocabulary),
sequence length 256, local batch 1, the same batches from torchtitan's dataloader over
the embedded corpus, bf16 compute:

- native, transformers_v5, nki_moe (blockwise and torchtitan's grouped_mm experts):
  through ``qwen3_trn_helpers.run``, i.e. torchtitan's Trainer with FSDP2 mixed precision;
- plain loop: what a user would otherwise write: transformers' ``Qwen3ForCausalLM``
  (SDPA attention), ``torch.optim.AdamW`` with torchtitan's settings, bf16 autocast,
  gradient clipping at 1.0, no torchtitan at all.
- plain loop, heap kept: the same loop inside ``keep_freed_memory_while_training``, the
  glibc setting every CPU run of ours trains under (training/host_memory.py): what of
  native's lead over the plain loop is the allocator, and what is the step itself.

Rounds alternate the configurations so a slow moment of the machine hits all alike;
each reports the median step time of steps 3..N (the first two warm up). Achieved
FLOP/s uses torchtitan's FLOPs per token (6 x matmul parameters + attention) and is
shown against this machine's measured bf16 matmul peak, not an accelerator's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TORCHTITAN_CONFIGS = {
    "native": dict(variant="native"),
    "transformers_v5": dict(variant="transformers_v5"),
    "nki_moe blockwise": dict(variant="nki_moe", moe_impl="blockwise"),
    "nki_moe grouped_mm": dict(variant="nki_moe", moe_impl="grouped_mm"),
}
SEQ_LEN = 256


def torchtitan_steps(steps: int, out: Path, **kwargs) -> list[float]:
    from qwen3_trn_helpers import run

    result = run(steps=steps, out=str(out), progress=False, **kwargs)
    return [m["step_time_s"] for m in result.metrics]


def plain_loop_steps(steps: int, on_step: Callable[[], None] | None = None) -> list[float]:
    """transformers + torch only, fed the batches torchtitan's dataloader makes.

    ``on_step`` is called after each step (profile_steps.py switches perf on and off)."""
    import torch
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from transformers import AutoModelForCausalLM

    from qwen3_trn_helpers.assets import ensure_tokenizer
    from qwen3_trn_helpers.data.corpus import dataset_args
    from qwen3_trn_helpers.model.shapes import TINY

    torch.manual_seed(0)
    config = TINY.hf_config()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1
    )
    tokenizer = HuggingFaceTokenizer.Config().build(tokenizer_path=str(ensure_tokenizer()))
    name, path = dataset_args("embedded")
    loader = HuggingFaceTextDataLoader.Config(dataset=name, dataset_path=path).build(
        dp_world_size=1, dp_rank=0, tokenizer=tokenizer, seq_len=SEQ_LEN, local_batch_size=1
    )
    times = []
    batches = iter(loader)
    for _ in range(steps):
        inputs, labels = next(batches)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(inputs["input"]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        times.append(time.perf_counter() - start)
        if on_step is not None:
            on_step()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--only", nargs="+", help="configurations to run (default: all)", metavar="NAME"
    )
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from qwen3_trn_helpers.cpu_peak import cpu_matmul_peak
    from qwen3_trn_helpers.lessons.scaling import params_and_flops_per_token
    from qwen3_trn_helpers.model.shapes import TINY, TINY_MOE
    from qwen3_trn_helpers.training.host_memory import keep_freed_memory_while_training

    names = args.only or [*TORCHTITAN_CONFIGS, "plain loop", "plain loop, heap kept"]
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in names:
                if name.startswith("plain loop"):
                    with keep_freed_memory_while_training(name == "plain loop, heap kept"):
                        times[name] += plain_loop_steps(args.steps)[2:]
                    continue
                out = Path(tmp) / f"{name.replace(' ', '_')}-{r}"
                times[name] += torchtitan_steps(args.steps, out, **TORCHTITAN_CONFIGS[name])[2:]
    peak = cpu_matmul_peak()
    flops = {
        name: params_and_flops_per_token(TINY_MOE if "moe" in name else TINY, SEQ_LEN)[1]
        for name in times
    }
    results = {}
    print(f"{'configuration':<24}{'ms/step':>9}{'GFLOP/s':>10}{'% of peak':>11}")
    for name, ts in times.items():
        step = statistics.median(ts)
        gflops = flops[name] * SEQ_LEN / step / 1e9
        results[name] = {"ms_per_step": round(step * 1000, 1), "gflops": round(gflops, 1)}
        print(f"{name:<24}{step * 1000:9.1f}{gflops:10.1f}{100 * gflops * 1e9 / peak:10.1f}%")
    print(f"measured bf16 matmul peak of this CPU: {peak / 1e9:,.0f} GFLOP/s")
    med = {name: results[name]["ms_per_step"] for name in results}
    pairs = {
        "native / transformers_v5": ("native", "transformers_v5"),
        "native / plain loop": ("native", "plain loop"),
        "native / plain loop, heap kept": ("native", "plain loop, heap kept"),
        "nki_moe blockwise / grouped_mm": ("nki_moe blockwise", "nki_moe grouped_mm"),
    }
    ratios = {k: med[a] / med[b] for k, (a, b) in pairs.items() if a in med and b in med}
    for name, value in ratios.items():
        print(f"{name:<32} {value:.2f}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"results": results, "ratios": ratios, "peak_gflops": peak / 1e9}, indent=2)
        )


if __name__ == "__main__":
    main()
