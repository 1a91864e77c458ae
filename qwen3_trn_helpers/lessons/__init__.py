"""What the notebooks show: each lesson's helpers, under one name.

The notebooks import from ``qwen3_trn_helpers`` (the package's API) and from here (the
lessons), nothing deeper, so a reader meets two modules, not twenty. Each name is
imported from its lesson module when first asked for; importing this is cheap.
"""

from __future__ import annotations

from ..faces import lazy_face

#: each name and the lesson module that defines it
EXPORTS = {
    "AWS_STEP1": "reproduction",
    "capture_report": "graph_capture",
    "eager_ops": "graph_capture",
    "eager_vs_compiled": "graph_capture",
    "inductor_code": "graph_capture",
    "steady_state": "graph_capture",
    "step_time_figure": "graph_capture",
    "check_environment": "preflight",
    "checks_table": "preflight",
    "compile_settings": "graph_capture",
    "device_round_trip": "registration",
    "kernel_holds_no_neuroncore": "..runs.child",
    "loss_figure": "plots",
    "lr_schedule": "torchtitan_view",
    "measure_init": "init_loss",
    "memory_figure": "scaling",
    "mesh_figure": "scaling",
    "missing": "preflight",
    "model_summary": "torchtitan_view",
    "NotebookFigure": "plots",
    "packing_figure": "moe_blocks",
    "padding_fraction": "moe_blocks",
    "padding_rows": "moe_blocks",
    "params_and_flops_per_token": "scaling",
    "parity": "logits_parity",
    "planner_anchors": "layouts",
    "predicted_loss": "init_loss",
    "predicted_sigma": "init_loss",
    "reproduce": "reproduction",
    "reproduction_specs": "reproduction",
    "scratch_folder": "scratch",
    "section_rows": "torchtitan_view",
    "self_check": "quiz_questions",
    "stack_figure": "stack_diagram",
    "Table": "..tables",
    "tokens_per_s_for_mfu": "scaling",
    "torchtitan_command": "scaling",
    "torchtitan_entry_point": "torchtitan_view",
    "toy_backend_demo": "registration",
    "toy_device_training": "toy_device",
    "TrainingPanel": "panel",
    "trn2_launch_command": "scaling",
    "trn2_plan": "scaling",
    "trn2_torchrun_command": "scaling",
    "what_the_models_say": "generation",
}
__all__ = sorted(EXPORTS)


__getattr__, __dir__ = lazy_face(__name__, EXPORTS)
