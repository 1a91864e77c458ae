"""One rank of the SimpleFSDP-vs-FSDP2 comparison (tests/e2e/test_simple_fsdp.py), run by
torchrun: the tiny native Qwen3, compiled, fp32, built by our trainer config either as
it is (FSDP2, each block compiled) or turned into torchtitan's GraphTrainer (SimpleFSDP,
the whole model compiled). Rank 0 writes each step's loss and times to OUT/steps.json.

Times per step: wall (perf_counter) and this rank's CPU time (process_time, user+sys of
all its threads), because the machine is shared and wall time is distorted by load.

    torchrun --standalone --nproc-per-node 2 tests/e2e/simple_fsdp_rank.py simple_fsdp OUT
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", choices=("fsdp2", "simple_fsdp"))
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    from torch._dynamo.utils import counters
    from torch.distributed.fsdp import FSDPModule

    from qwen3_trn_helpers.training.plan import plan_run
    from qwen3_trn_helpers.training.ranks import rank
    from qwen3_trn_helpers.training.spec import RunSpec
    from qwen3_trn_helpers.training.trainer import quiet_torchtitan, trainer_config

    spec = RunSpec(preset="tiny", steps=args.steps, nproc=2, compile=True, device=args.device,
                   mixed_precision="float32", attention="causal", out=args.out)  # fmt: skip
    plan = plan_run(spec)
    config = trainer_config(plan, args.out, data_parallel=args.path)
    times: list[dict[str, float]] = []
    with quiet_torchtitan(False):
        trainer = config.build()
        step = trainer.train_step

        def timed(data_iterator) -> None:
            cpu, wall = time.process_time(), time.perf_counter()
            step(data_iterator)
            times.append({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall})

        trainer.train_step = timed
        try:
            trainer.train()
            model = trainer.model_parts[0]
            # what shards the model: FSDP2's modules, or SimpleFSDP's parametrized classes
            sharded_by = sorted(
                {
                    "FSDP2" if isinstance(m, FSDPModule) else "SimpleFSDP"
                    for m in model.modules()
                    if isinstance(m, FSDPModule) or "SimpleFSDP" in type(m).__name__
                }
            )
            graphs = int(counters["stats"]["unique_graphs"])
        finally:
            trainer.close()
    if rank() == 0:
        metrics = Path(args.out, "metrics.jsonl").read_text().splitlines()
        lines = [json.loads(line) for line in metrics]
        record = {"path": args.path, "trainer": type(trainer).__name__,
                  "losses": [ln["loss"] for ln in lines],
                  "grad_norms": [ln["grad_norm"] for ln in lines],
                  "sharded_by": sharded_by, "graphs_compiled": graphs, "times": times}  # fmt: skip
        Path(args.out, "steps.json").write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    from qwen3_trn_helpers.training.ranks import leave

    leave(main())
