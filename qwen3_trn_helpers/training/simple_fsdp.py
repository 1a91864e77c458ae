"""SimpleFSDP: torchtitan 0.3.0's compiler-first data parallelism, for compiled runs.

AWS's TorchTitan-on-Neuron best practices say "With TorchTitan, use SimpleFSDP for
torch.compile work" (shared/RESEARCH_TRN2.md, compile on Neuron). In torchtitan 0.3.0
SimpleFSDP lives in ``torchtitan.experiments.graph_trainer``: each parameter is a
DTensor sharded on the data-parallel mesh, turned into a replicated one by a
parametrization (``simple_fsdp.ReplicateComputation``: an all-gather forward, a
reduce-scatter backward), so the whole model, collectives included, is one graph for
``torch.compile``, instead of FSDP2's hooks around each separately compiled block.

Its ``GraphTrainer`` compiles in one of two modes (``graph_trainer/compile.py``):
``jit`` hands the whole model to ``torch.compile(backend=...)``, so a dynamo backend
(``neuron`` on trn2, inductor here) lowers it; ``aot_fx_trace`` (its default) traces
forward, loss and backward with ``make_fx`` and runs the traced graph itself, with no
dynamo backend at all, so it could never reach TorchNeuron's compiler. We use ``jit``.

This module is thin and below training/trainer.py (which defines
``Qwen3TrnGraphTrainer``, torchtitan's ``GraphTrainer`` under our run scope, beside our
two other trainers): :func:`graph_trainer_fields` turns our ``Trainer.Config`` into a
GraphTrainer config the way torchtitan's own ``to_graph_trainer_config`` does.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

#: graph_trainer's compile mode that hands the model to a dynamo backend (see above)
MODE = "jit"


def graph_trainer_fields(base: Any) -> dict[str, Any]:
    """The fields of a GraphTrainer config for ``base``, a compiled run's config.

    As torchtitan's ``graph_trainer.configs.to_graph_trainer_config``: the model class
    becomes graph_trainer's ``GraphTrainerQwen3Model`` (its ``init_states`` runs with
    the parametrization off) with every field of ours kept, parallelisation becomes
    graph_trainer's ``parallelize_qwen3`` (SimpleFSDP, then the compile), and
    ``spmd_backend`` is ``partial_dtensor`` (what it sets). Unlike it we keep our model
    config rather than a flavor of torchtitan's registry, our loss and our compile
    backend, and use the ``jit`` mode.
    """
    from torchtitan.experiments.graph_trainer.configs import GraphTrainerCompileConfig
    from torchtitan.experiments.graph_trainer.qwen3.model import GraphTrainerQwen3Model
    from torchtitan.experiments.graph_trainer.qwen3.parallelize import parallelize_qwen3

    from ..errors import ConfigError

    if not base.compile.enable:
        raise ConfigError("SimpleFSDP is the compiled path: pass --compile")
    d = {f.name: getattr(base, f.name) for f in fields(base)}
    model = base.model_spec.model
    d["model_spec"] = replace(
        base.model_spec,
        parallelize_fn=parallelize_qwen3,
        model=GraphTrainerQwen3Model.Config(
            **{f.name: getattr(model, f.name) for f in fields(model)}
        ),
    )
    d["parallelism"] = replace(base.parallelism, spmd_backend="partial_dtensor")
    d["compile"] = GraphTrainerCompileConfig(
        enable=True,
        components=list(base.compile.components),
        backend=base.compile.backend,
        mode=MODE,
    )
    return d
