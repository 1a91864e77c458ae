"""Do the variants compute the same function? Logits from one Hugging Face folder, 3 ways.

1. transformers directly (``AutoModelForCausalLM``): the reference;
2. ``native``: torchtitan's Qwen3, built and loaded by torchtitan's Trainer and
   checkpointer (``initial_load_in_hf``, through ``Qwen3StateDictAdapter``);
3. ``transformers_v5``: the HF model inside torchtitan's transformers backend, built and
   loaded the same way.

Paths 2 and 3 are exactly the code a training run uses. All in float32 on the CPU
(or the current device), on a fixed batch, so differences are pure numerics.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

FIXED_TEXT = (
    "Trainium2 chips train Qwen3 with torchtitan. Each step reads a batch, runs the "
    "model forward and backward, and updates every weight with AdamW. "
)


@dataclass(frozen=True)
class ParityReport:
    max_abs_diff: dict[str, float]  # "native vs transformers" -> max |difference|
    logits_shape: tuple[int, ...]

    def worst(self) -> float:
        return max(self.max_abs_diff.values())

    def __str__(self) -> str:
        rows = [f"{k:<34} {v:.3e}" for k, v in self.max_abs_diff.items()]
        return f"fp32 logits {tuple(self.logits_shape)}, max |difference|:\n" + "\n".join(rows)


def fixed_batch(tokenizer_dir: Path, seq_len: int = 64, batch: int = 2) -> torch.Tensor:
    from ..assets import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    ids = tok.encode(FIXED_TEXT * (1 + seq_len // 20)).ids
    rows = [ids[i : i + seq_len] for i in range(0, batch * 7, 7)][:batch]
    return torch.tensor(rows, dtype=torch.long)


def transformers_logits(init_dir: Path, tokens: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    from ..model.hf_checkpoint import no_progress_bars

    with no_progress_bars():  # its "Loading weights 0/46" bar
        model = AutoModelForCausalLM.from_pretrained(
            init_dir, dtype=torch.float32, attn_implementation="sdpa"
        ).eval()
    with torch.no_grad():
        return model(tokens).logits


def torchtitan_logits(variant: str, init_dir: Path, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of the model a ``variant`` training run would start from (float32)."""
    from ..training.plan import plan_run
    from ..training.spec import RunSpec
    from ..training.trainer import trainer_session

    spec = RunSpec(
        variant=variant,
        init=str(init_dir),
        steps=1,
        seq_len=tokens.shape[1],
        mixed_precision="float32",  # torchtitan's FSDP default computes in bf16
        # on the CPU everywhere: a numerics check, and on trn2 it keeps the notebook
        # process from starting the Neuron runtime
        device="cpu",
    )
    plan = plan_run(spec)
    with tempfile.TemporaryDirectory() as out, trainer_session(plan, out) as trainer:
        trainer.checkpointer.load(step=trainer.config.checkpoint.load_step)
        model = trainer.model_parts[0].eval()
        with torch.no_grad():
            logits = plan.variant.logits(model, tokens.to(trainer.device))
        return logits.float().cpu()


def parity(init_dir: str | Path, seq_len: int = 64, isolate: bool | None = None) -> ParityReport:
    """Max |difference| of fp32 logits between the three ways to load ``init_dir``.

    ``isolate`` (default: only where this process sees Neuron) runs the check in a child
    process, so a notebook kernel on trn2 never builds a trainer itself.
    """
    from ..runs import child

    if child.isolated(isolate):
        return child.call(parity, init_dir, seq_len, isolate=False)
    from ..assets import resolve_tokenizer
    from ..model.hf_checkpoint import check_hf_checkpoint

    init_dir = Path(init_dir)
    check_hf_checkpoint(init_dir)
    tok_dir = init_dir if (init_dir / "tokenizer.json").exists() else resolve_tokenizer(None)
    tokens = fixed_batch(tok_dir, seq_len)
    ref = transformers_logits(init_dir, tokens)
    native = torchtitan_logits("native", init_dir, tokens)
    v5 = torchtitan_logits("transformers_v5", init_dir, tokens)

    def diff(a: torch.Tensor, b: torch.Tensor) -> float:
        return (a - b).abs().max().item()

    return ParityReport(
        max_abs_diff={
            "native vs transformers": diff(native, ref),
            "transformers_v5 vs transformers": diff(v5, ref),
            "native vs transformers_v5": diff(native, v5),
        },
        logits_shape=tuple(ref.shape),
    )
