"""The learning-rate schedule every run trains with: torchtitan's, chosen once here.

torchtitan's ``LRSchedulersContainer`` (warm-up-stable-decay): a linear warm-up over
``--warmup-steps``, the peak lr, then a linear decay to 0 over the last
:data:`DECAY_RATIO` of ``--steps``. Its ``LambdaLR`` is a pure function of the step and
the schedule's length (torchtitan saves only ``last_epoch``), so a resume with more
``--steps`` recomputes the lr on the longer schedule: a run that had decayed is sent
back to its peak. :func:`lr_factor` asks torchtitan's own scheduler what a step gets,
for the note a resume prints (training/resume.py).
"""

from __future__ import annotations

from typing import Any

#: the share of ``--steps`` the lr decays over (the rest: warm-up, then the peak)
DECAY_RATIO = 0.8


def lr_scheduler_config(warmup_steps: int) -> Any:
    """torchtitan's ``LRSchedulersContainer.Config`` for a run."""
    from torchtitan.components.optimizer import LRSchedulersContainer

    return LRSchedulersContainer.Config(
        warmup_steps=warmup_steps,
        decay_ratio=DECAY_RATIO,
        decay_type="linear",
        min_lr_factor=0.0,
    )


def lr_factor(done: int, steps: int, warmup_steps: int) -> float:
    """The share of the peak lr that step ``done + 1`` trains at, on a schedule of
    ``steps`` steps (torchtitan's scheduler, after ``done`` steps: a checkpoint of step
    ``done`` restores ``last_epoch = done``)."""
    import logging
    import warnings

    import torch

    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=1.0)
    root = logging.getLogger()  # (torchtitan warns through the root logger)
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        config = lr_scheduler_config(min(warmup_steps, steps))
        schedulers = config.build(optimizers=[optimizer], training_steps=steps)
    finally:
        root.setLevel(level)
    with warnings.catch_warnings():  # (torch's advice to call get_last_lr: we do)
        warnings.simplefilter("ignore", UserWarning)
        schedulers.load_state_dict({"last_epoch": done})
    return float(schedulers.schedulers[0].get_last_lr()[0])
