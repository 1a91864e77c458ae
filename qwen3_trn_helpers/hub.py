"""The Hugging Face hub switched off around one command: every test and most commands
run offline (our standard), and only a user's request for real weights or a hub corpus
turns it on."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

#: the hub clients' offline switches read at import: (module, attribute)
_OFFLINE_SWITCHES = (
    ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_HUB_OFFLINE"),
    ("datasets.config", "HF_DATASETS_OFFLINE"),
)


@contextmanager
def hub_offline(on: bool = True) -> Iterator[None]:
    """The Hugging Face hub off for the duration of one call (a CLI command), then back.

    Offline, a missing local file is an error at once rather than ~50 s of hub retries.
    The switch is the environment variable (children, torchrun's ranks, inherit it) and
    the constants huggingface_hub and datasets read from it once, at import; both are
    restored afterwards, so a notebook that calls ``cli.main`` keeps its own setting.
    A user's explicit ``HF_HUB_OFFLINE`` is left as it is.
    """
    if not on or "HF_HUB_OFFLINE" in os.environ:
        yield
        return
    import huggingface_hub.constants  # noqa: F401  (so its switch exists to be set)

    imported_before = {name for name, _ in _OFFLINE_SWITCHES if name in sys.modules}
    with ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, HF_HUB_OFFLINE="1"))
        for name, attr in _OFFLINE_SWITCHES:
            if name in imported_before and hasattr(sys.modules[name], attr):
                stack.enter_context(mock.patch.object(sys.modules[name], attr, True))
        try:
            yield
        finally:
            # a client first imported inside read "offline" at import: set it back
            hub = sys.modules["huggingface_hub.constants"]
            for name, attr in _OFFLINE_SWITCHES:
                if name not in imported_before and name in sys.modules:
                    setattr(sys.modules[name], attr, hub.HF_HUB_OFFLINE)
