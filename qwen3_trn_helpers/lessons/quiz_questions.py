"""The questions of each notebook's self-check, and ``self_check`` that shows them
(quiz.py: how a self-check is asked and answered).

Each checks one idea its notebook teaches; the reason given is the notebook's own
(tests/core/lessons/test_self_check.py keeps every notebook at 3 to 5 questions).
"""

from __future__ import annotations

from .quiz import Question, SelfCheck

Q = Question

QUESTIONS: dict[str, tuple[Question, ...]] = {
    "00": (
        Q(
            'How many tokens does Qwen3\'s tokenizer make of "12345"?',
            (
                "1: the number as one token",
                "2: groups of up to three digits",
                "5: one token per digit",
            ),
            2,
            "Qwen's pre-tokenizer splits numbers into single digits, so every digit is a "
            "token of its own (GPT-4's groups up to three).",
        ),
        Q(
            "Why does every run on a trn2 start in a child process, never in the "
            "notebook's kernel?",
            (
                "its runtime keeps the NeuronCores until that process exits",
                "a child process compiles its graphs faster than a notebook kernel",
                "Jupyter's kernel cannot import torch-neuronx at all",
            ),
            0,
            "A kernel that touched a NeuronCore would hold it from every later run, and a "
            "kernel lives for hours; a child gives its cores back when it exits.",
        ),
        Q(
            "About what share of the tiny preset's parameters is its embedding table?",
            (
                "about 10%, as in a large model",
                "about 96%: its layers are tiny",
                "about 50%, as much as its layers",
            ),
            1,
            "151,936 rows x 128 is 19.4 M parameters, 96% of the tiny model, and tied to "
            "the output layer: a CPU spends its time in that 151,936-way output layer.",
        ),
    ),
    "01": (
        Q(
            "After `rename_privateuse1_backend` alone, what does "
            "`_get_available_device_type()` return?",
            (
                "`None`: no device module answers yet",
                "`toydev`, the name it was just given",
                '`"cpu"`: PyTorch falls back to the CPU device',
            ),
            0,
            "A name is not a device: PyTorch reports a PrivateUse1 device only once a "
            "device module answers `is_available()`.",
        ),
        Q(
            "How does torchtitan come to train on `neuron` on a trn2?",
            (
                "it ships Neuron-specific code that it loads when it sees Trainium",
                "the user passes a flag that names the Neuron device",
                "it asks PyTorch's registry, where TorchNeuron put `neuron`",
            ),
            2,
            "torchtitan asks PyTorch's registry; autoload makes `import torch` load "
            "TorchNeuron, which registers the device and its module.",
        ),
        Q(
            "What happens to an operator TorchNeuron has no kernel for?",
            (
                "the run stops with an error that names it",
                "it runs on the CPU through the fallback: right, but slow",
                "it is skipped, and its result is left as zeros",
            ),
            1,
            "The dispatcher sends it to the CPU fallback (with a one-time warning), as "
            "the toy device's fallback caught GELU and the loss.",
        ),
        Q(
            "bf16 stores 7 mantissa bits (8 significant bits with the implicit one). About "
            "how far off is a bf16 product entry of size ~8?",
            (
                "about 0.0001: bf16 is near float32",
                "about 1: an eighth of the value",
                "about 0.03, that is 8 x 2^-8",
            ),
            2,
            "Relative rounding of about 2^-8 on a value of ~8 is ~0.03; the largest of "
            "4,096 entries is 3-4 times that.",
        ),
    ),
    "02": (
        Q(
            "How does `torchrun -m torchtitan.train` train this course's models?",
            (
                "through a training loop this course writes itself",
                "as a config registry: `--module qwen3_trn_helpers --config ...`",
                "through AWS's fork of torchtitan, patched for Neuron",
            ),
            1,
            "torchtitan's own Trainer runs; the package only contributes configs and two "
            "named overrides.",
        ),
        Q(
            "Without the rope patch, which comparisons with the same weights fail?",
            (
                "those that load through torchtitan's transformers backend",
                "native against transformers, the first of the three comparisons",
                "none: RoPE's buffer is recomputed anyway",
            ),
            0,
            "torchtitan's transformers backend leaves RoPE's `inv_freq` uninitialised; "
            "the loaders that do not use it still agree.",
        ),
        Q(
            "Blockwise MoE pads 47% of the tiny MoE's expert slots. Why do blockwise and "
            "grouped_mm run within noise of each other?",
            (
                "the kernel's loop skips the padded slots",
                "grouped_mm pads its expert groups to fixed blocks just as much",
                "the padded FLOPs are about 1% of the output layer's",
            ),
            2,
            "88 MFLOP of padded slots over 4 layers against 10 GFLOP for the 151,936-way "
            "output layer: the step time is elsewhere.",
        ),
    ),
    "03": (
        Q(
            "Why is random init's step-1 loss (12.43 for the 4B) above ln V = 11.93?",
            (
                "the loss adds a weight-decay term at step 1",
                "the learning rate is too high for the first step of a run",
                "random logits are confidently wrong: ln V + sigma^2/2",
            ),
            2,
            "With sigma = 0.02 sqrt(d) the logits' spread adds sigma^2 / 2 nats to a "
            "uniform guess's ln V.",
        ),
        Q(
            "A loss of 6.54 is a perplexity of about",
            ("6.5, the loss itself", "690, e to the 6.54", "151,936, the vocabulary"),
            1,
            "Perplexity is e^loss: e^6.54 is about 690 equally likely tokens.",
        ),
        Q(
            "Does the step-1 loss change with the learning rate?",
            (
                "no: it is computed before the first update",
                "yes: a higher learning rate lowers it",
                "yes: a higher learning rate raises it",
            ),
            0,
            "The step-1 loss is computed before the first update, so only later steps "
            "see the learning rate.",
        ),
    ),
    "04": (
        Q(
            "How many training ranks does one trn2.48xlarge give at LNC 2?",
            (
                "64: 16 chips x 4 logical cores",
                "16: one rank per chip",
                "128: one per physical core",
            ),
            0,
            "16 chips x 4 logical NeuronCores (each two physical cores fused) = 64 ranks.",
        ),
        Q(
            "With FSDP x TP = 64 fixed, which terms shrink when TP doubles?",
            (
                "parameters, gradients and AdamW state",
                "every term, the Neuron runtime's own share included",
                "activations, logits and the gathered layer",
            ),
            2,
            "The fp32 state is sharded 64 ways whatever the split; TP splits what each "
            "rank computes on.",
        ),
        Q(
            "Why can TP not go above 8 for Qwen3-4B?",
            (
                "a Trainium2 chip has 8 physical cores",
                "TP must divide its 8 key/value heads",
                "FSDP needs at least 8 ranks to shard",
            ),
            1,
            "Each TP rank takes whole key/value heads, so TP divides 8.",
        ),
    ),
    "05": (
        Q(
            "On four nodes with HSDP, how much does each rank hold compared with one node?",
            (
                "a quarter: four nodes share the model",
                "the same: each node is a whole replica",
                "four times as much: a copy per node",
            ),
            1,
            "Each node is a replica of the one-node TP 4 x FSDP 16 layout; only the "
            "once-a-step gradient average crosses nodes.",
        ),
        Q(
            "A job checkpointing every 250 steps dies at step 900 and is requeued with "
            "`--resume auto`. How many steps are computed twice?",
            (
                "150: it resumes after step 750",
                "0: it resumes at step 900",
                "900: it starts over from step 1",
            ),
            0,
            "It continues after its newest complete checkpoint, step 750: steps 751-900 run again.",
        ),
        Q(
            "What numbers the nodes of a several-node run?",
            (
                "the order of Slurm's node list",
                "their IP addresses, sorted from the lowest up",
                "torchrun's rendezvous, as they arrive",
            ),
            2,
            "The agents meet at `--rdzv-endpoint` and agree on each node's rank there.",
        ),
    ),
    "06": (
        Q(
            "How many ATen operators does eager mode dispatch for `rms_silu`?",
            (
                "5, as dynamo's `op_count` says",
                "1: eager mode fuses the chain",
                "7, with 6 intermediate tensors",
            ),
            2,
            "pow, mean, add, rsqrt, mul, mul, silu: seven, with six intermediate tensors. "
            "Dynamo's `op_count` says 5 because it leaves out method calls (`x.pow`, "
            "`.mean`).",
        ),
        Q(
            "What breaks a graph?",
            (
                "any call to a Python function inside it",
                "a tensor's value read into Python, as `.item()` in an `if`",
                "a change of dtype, such as `.to(torch.bfloat16)`",
            ),
            1,
            "Dynamo cannot record a Python branch on a value; it runs it in Python and "
            "starts a new graph (an error under `fullgraph=True`).",
        ),
        Q(
            "Why is a second compiled run's first step cheaper, even after a kernel restart?",
            (
                "inductor keeps its generated code in a cache on disk",
                "dynamo keeps its graphs in the kernel's memory",
                "the second run compiles a smaller part of the model than the first",
            ),
            0,
            "The compile cache folder outlives the process; dynamo traces again, inductor "
            "reads what it wrote.",
        ),
    ),
}


def self_check(notebook: str) -> SelfCheck:
    """The self-check of notebook ``notebook`` ("00" to "06")."""
    if notebook not in QUESTIONS:
        raise ValueError(f"no self-check for notebook {notebook!r}: one of {sorted(QUESTIONS)}")
    return SelfCheck(f"Self-check, notebook {notebook}", QUESTIONS[notebook])
