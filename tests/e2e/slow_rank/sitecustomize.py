"""Tests only: one rank that sleeps, for the watch and watchdog tests (tests/e2e/test_watch.py).

Given to a launch through PYTHONPATH, Python imports this at the start of every process
of it (the launcher, torchrun, each rank). In the rank whose RANK is
QWEN3_TRN_TEST_SLOW_RANK, torchtitan's ``Trainer.train_step`` sleeps
QWEN3_TRN_TEST_SLOW_S seconds before each step from step QWEN3_TRN_TEST_SLOW_FROM on: a
slowed rank (a few seconds) or a hung one (an hour). Every other process is untouched.
"""

import os
import sys

if os.environ.get("RANK") is not None and (
    os.environ.get("RANK") == os.environ.get("QWEN3_TRN_TEST_SLOW_RANK")
):
    import importlib.abc
    import importlib.machinery
    import time

    SLEEP_S = float(os.environ["QWEN3_TRN_TEST_SLOW_S"])
    FROM_STEP = int(os.environ.get("QWEN3_TRN_TEST_SLOW_FROM", "2"))

    def slowed(train_step):
        def train_step_after_a_sleep(self, data_iterator):
            if self.step >= FROM_STEP:
                time.sleep(SLEEP_S)
            return train_step(self, data_iterator)

        return train_step_after_a_sleep

    class _PatchTrainerOnImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "torchtitan.trainer":
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            run_module = spec.loader.exec_module

            def exec_module(module):
                run_module(module)
                module.Trainer.train_step = slowed(module.Trainer.train_step)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _PatchTrainerOnImport())
