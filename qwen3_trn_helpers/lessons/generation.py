"""What a model says: the next tokens from the weights a run ended with.

Notebook 03's two 10-step runs export their final weights in Hugging Face format
(``export_hf``, torchtitan's checkpointer); here transformers loads each folder and
continues one prompt (its likeliest next tokens, and a seeded sample), so the class sees
what the two losses mean as text. On
a CPU these are the tiny models (the local checkpoint and random init, after 10 steps);
on trn2 the 4B runs' exports, loaded on the host CPU (no NeuronCore is touched).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

PROMPT = "The history of the city"


def exported_folder(result: Any) -> Path:
    """A Hugging Face folder for a run's final weights: torchtitan's export plus the
    config and tokenizer transformers needs to load it."""
    from ..assets import ensure_tokenizer
    from ..errors import Qwen3TrnError

    step = result.out / "checkpoint" / f"step-{result.spec.steps}"
    weights = sorted(step.glob("*.safetensors"))
    if not weights:
        raise Qwen3TrnError(
            f"{result.out} holds no exported weights; run it with export_hf=True "
            "(qwen3-trn train --export-hf)"
        )
    folder = Path(tempfile.mkdtemp(prefix="qwen3-trn-say-"))
    for file in weights + sorted(step.glob("*.index.json")):
        shutil.copy2(file, folder / file.name)
    result.plan.shape.hf_config().save_pretrained(folder)
    tokenizer = ensure_tokenizer()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tokenizer / name, folder / name)
    return folder


def continuation(folder: Path, prompt: str = PROMPT, new_tokens: int = 12) -> dict[str, str]:
    """What the weights in ``folder`` say after ``prompt``: the five likeliest next tokens
    with their probabilities, and ``new_tokens`` sampled (top-50, seed 0: the same weights
    say the same thing on one machine). Greedy decoding would show little: a small model
    repeats its most frequent token (a newline) whatever it learned."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        probs = model(ids).logits[0, -1].softmax(-1)
        top = probs.topk(5)
        torch.manual_seed(0)
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            do_sample=True,
            top_k=50,
            pad_token_id=tok.eos_token_id,
        )
    likeliest = ", ".join(
        f"{tok.decode([int(i)])!r} {p:.0%}" for p, i in zip(top.values, top.indices, strict=True)
    )
    sampled = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    return {"likeliest next tokens": likeliest, "sampled continuation": sampled}


def what_the_models_say(
    runs: dict[str, Any], prompt: str = PROMPT, new_tokens: int = 12
) -> list[dict[str, str]]:
    """One row per run (init -> RunResult): the prompt's continuation by its final weights."""
    rows = []
    for init, result in runs.items():
        folder = exported_folder(result)
        try:
            text = continuation(folder, prompt, new_tokens)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        rows.append({"model (after 10 steps)": init, **text})
    return rows
