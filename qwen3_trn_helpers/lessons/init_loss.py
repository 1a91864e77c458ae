"""Why a randomly initialised Qwen3 starts at loss ln V + sigma^2 / 2 (notebook 03).

If the output layer produces logits that look like independent Gaussian noise with
standard deviation sigma over V tokens, the cross-entropy of the right token is on
average log-sum-exp minus the right token's logit: E[log sum_v e^z_v] - E[z_y]
~= ln V + sigma^2 / 2 - 0. Before the last layer Qwen3 applies an RMSNorm (with weights
1 at init), so every hidden vector has root-mean-square 1, and a logit is a dot product
of that unit-rms vector with a row of the output layer: sigma = init_std x sqrt(dim).

torchtitan initialises Qwen3's output layer with std 0.02, so sigma = 0.02 sqrt(dim):
0.23 for the tiny model (loss ln V + 0.03) and 1.01 for Qwen3-4B (ln V + 0.51 = 12.44;
AWS measured 12.43). :func:`measure_init` checks the prediction on a real model, built
and initialised by torchtitan's own Trainer.
"""

from __future__ import annotations

import math
import tempfile

from ..model.shapes import Qwen3Shape

TORCHTITAN_OUTPUT_INIT_STD = 0.02  # torchtitan.models.qwen3: _LINEAR_INIT


def predicted_sigma(dim: int, init_std: float = TORCHTITAN_OUTPUT_INIT_STD) -> float:
    return init_std * math.sqrt(dim)


def predicted_loss(sigma: float, vocab: int) -> float:
    return math.log(vocab) + sigma**2 / 2


def measure_init(
    variant: str, shape: Qwen3Shape, seq_len: int = 64, isolate: bool | None = None
) -> dict[str, float]:
    """Logit std and cross-entropy of a freshly initialised model on a batch of text.

    The model is built and initialised by the Trainer a run would use (float32, CPU),
    so this is the step-1 loss before any update, measured on its own. On trn2 (or with
    ``isolate=True``) it runs in a child process, keeping the notebook off Neuron.
    """
    from ..runs import child

    if child.isolated(isolate):
        return child.call(measure_init, variant, shape, seq_len, isolate=False)
    import torch

    from ..training.plan import plan_run
    from ..training.spec import RunSpec
    from ..training.trainer import trainer_session
    from .logits_parity import fixed_batch

    spec = RunSpec(variant=variant, steps=1, seq_len=seq_len, mixed_precision="float32",
                   device="cpu", attention="causal")  # fmt: skip
    plan = plan_run(spec, shape=shape)
    tokens = fixed_batch(plan.tokenizer_dir, seq_len + 1, batch=2)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    with (
        tempfile.TemporaryDirectory() as out,
        trainer_session(plan, out, metrics_file="") as trainer,
    ):
        model = trainer.model_parts[0].eval()
        with torch.no_grad():
            logits = plan.variant.logits(model, inputs).float()
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return {"sigma": logits.std().item(), "loss": loss.item()}
