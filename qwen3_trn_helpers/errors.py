"""Exceptions for mistakes a user can fix.

Every error raised on purpose by this package is a :class:`Qwen3TrnError`, so the CLI can
print one ``error: ...`` line for it (and a notebook a short message) instead of a
traceback from deep inside torchtitan. Each message names what was wrong, the value seen,
and what to do about it.
"""

from __future__ import annotations


class Qwen3TrnError(Exception):
    """Base class: a problem with the user's input or environment, not a bug."""


class ConfigError(Qwen3TrnError, ValueError):
    """An argument or config value is invalid (unknown variant, steps <= 0, ...)."""


class AssetError(Qwen3TrnError):
    """A tokenizer, corpus or checkpoint file is missing, corrupt or mismatched."""


class DeviceError(Qwen3TrnError):
    """The requested device is not available on this machine."""


class TrainingError(Qwen3TrnError):
    """Training stopped because the numbers went bad (for example a NaN loss)."""

    def __init__(self, message: str, *, step: int | None = None) -> None:
        super().__init__(message)
        self.step = step


class RunFolderError(Qwen3TrnError):
    """The output folder already holds another run's metrics."""


class NonFiniteLoss(TrainingError):
    """The loss became NaN or infinite; training stopped at that step."""

    def __init__(self, step: int, value: float) -> None:
        super().__init__(
            f"loss became {value} at step {step}; stopped there, metrics.jsonl holds every "
            "step before it. Lower --lr, or check the corpus and the checkpoint",
            step=step,
        )
        self.value = value
