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
            ("1", "2 (groups of up to three digits)", "5"),
            2,
            "Qwen's pre-tokenizer splits numbers into single digits, so every digit is a "
            "token of its own (GPT-4's groups up to three).",
        ),
        Q(
            "Why does every run on a trn2 start in a child process, never in the "
            "notebook's kernel?",
            (
                "child processes are faster",
                "the Neuron runtime keeps the NeuronCores it started on until its process "
                "exits, and a kernel lives for hours",
                "Jupyter cannot import torch-neuronx",
            ),
            1,
            "A kernel that touched a NeuronCore would hold it from every later run; a "
            "child gives its cores back when it exits.",
        ),
        Q(
            "About what share of the tiny preset's parameters is the embedding table?",
            ("10%", "50%", "96%"),
            2,
            "151,936 rows x 128 is 19.4 M parameters, 96% of the tiny model, and tied to "
            "the output layer: a CPU spends its time in that 151,936-way output layer.",
        ),
    ),
    "01": (
        Q(
            "After `rename_privateuse1_backend` alone, what does "
            "`_get_available_device_type()` return?",
            ("the new name", "None", '"cpu"'),
            1,
            "A name is not a device: PyTorch reports a PrivateUse1 device only once a "
            "device module answers `is_available()`.",
        ),
        Q(
            "How does torchtitan come to train on `neuron` on a trn2?",
            (
                "it ships Neuron-specific code",
                "it asks PyTorch's `_get_available_device_type()`, which answers `neuron` "
                "once TorchNeuron is loaded",
                "only when the user passes a flag",
            ),
            1,
            "torchtitan asks PyTorch's registry; autoload makes `import torch` load "
            "TorchNeuron, which registers the device and its module.",
        ),
        Q(
            "What happens to an operator TorchNeuron has no kernel for?",
            (
                "the run fails",
                "it runs on the CPU through the fallback: correct, but slow",
                "it is skipped",
            ),
            1,
            "The dispatcher sends it to the CPU fallback (with a one-time warning), as "
            "the toy device's fallback caught GELU and the loss.",
        ),
        Q(
            "bf16 keeps 8 significant bits. About how far off is a bf16 product entry of size ~8?",
            ("~0.0001", "~0.03", "~1"),
            1,
            "Relative rounding of about 2^-8 on a value of ~8 is ~0.03; the largest of "
            "4,096 entries is 3-4 times that.",
        ),
    ),
    "02": (
        Q(
            "How does `torchrun -m torchtitan.train` train this course's models?",
            (
                "through a training loop of the course's own",
                "the package is a torchtitan config registry: `--module qwen3_trn_helpers "
                "--config ...`",
                "through a fork of torchtitan",
            ),
            1,
            "torchtitan's own Trainer runs; the package only contributes configs and two "
            "named overrides.",
        ),
        Q(
            "Without the rope patch, which comparison with the same weights fails?",
            (
                "native vs transformers",
                "those involving torchtitan's transformers backend (`transformers_v5`)",
                "none",
            ),
            1,
            "torchtitan's transformers backend leaves RoPE's `inv_freq` uninitialised; "
            "the loaders that do not use it still agree.",
        ),
        Q(
            "Blockwise MoE pads 47% of the tiny MoE's expert slots. Why do blockwise and "
            "grouped_mm run within noise of each other?",
            (
                "padding is free",
                "the padded slots' FLOPs are about 1% of the output layer's",
                "grouped_mm pads too",
            ),
            1,
            "88 MFLOP of padded slots over 4 layers against 10 GFLOP for the 151,936-way "
            "output layer: the step time is elsewhere.",
        ),
    ),
    "03": (
        Q(
            "Why is random init's step-1 loss (12.43 for the 4B) above ln V = 11.93?",
            (
                "a bug in the loss",
                "random logits are confidently wrong, not flat: ln V + sigma^2 / 2",
                "the learning rate is too high",
            ),
            1,
            "With sigma = 0.02 sqrt(d) the logits' spread adds sigma^2 / 2 nats to a "
            "uniform guess's ln V.",
        ),
        Q(
            "A loss of 6.54 is a perplexity of about",
            ("6.5", "690", "151,936"),
            1,
            "Perplexity is e^loss: e^6.54 is about 690 equally likely tokens.",
        ),
        Q(
            "Does the step-1 loss change with the learning rate?",
            ("yes, higher lr lowers it", "no", "yes, higher lr raises it"),
            1,
            "The step-1 loss is computed before the first update, so only later steps "
            "see the learning rate.",
        ),
    ),
    "04": (
        Q(
            "How many training ranks does one trn2.48xlarge give at LNC 2?",
            ("16", "64", "128"),
            1,
            "16 chips x 4 logical NeuronCores (each two physical cores fused) = 64 ranks.",
        ),
        Q(
            "With FSDP x TP = 64 fixed, which terms shrink when TP doubles?",
            (
                "parameters, gradients and AdamW",
                "activations, logits and the gathered layer",
                "all of them",
            ),
            1,
            "The fp32 state is sharded 64 ways whatever the split; TP splits what each "
            "rank computes on.",
        ),
        Q(
            "Why can TP not go above 8 for Qwen3-4B?",
            (
                "a trn2 chip has 8 cores",
                "TP must divide its 8 key/value heads",
                "FSDP needs at least 8 ranks",
            ),
            1,
            "Each TP rank takes whole key/value heads, so TP divides 8.",
        ),
    ),
    "05": (
        Q(
            "On four nodes with HSDP, how much does each rank hold compared with one node?",
            ("a quarter", "the same", "four times as much"),
            1,
            "Each node is a replica of the one-node TP 4 x FSDP 16 layout; only the "
            "once-a-step gradient average crosses nodes.",
        ),
        Q(
            "A job checkpointing every 250 steps dies at step 900 and is requeued with "
            "`--resume auto`. How many steps are computed twice?",
            ("0", "150", "900"),
            1,
            "It continues after its newest complete checkpoint, step 750: steps 751-900 run again.",
        ),
        Q(
            "What numbers the nodes of a several-node run?",
            ("Slurm's node list order", "torchrun's rendezvous", "the IP addresses"),
            1,
            "The agents meet at `--rdzv-endpoint` and agree on each node's rank there.",
        ),
    ),
    "06": (
        Q(
            "How many ATen operators does eager mode dispatch for `rms_silu`?",
            ("5", "7", "1"),
            1,
            "pow, mean, add, rsqrt, mul, mul, silu: seven, with six intermediate tensors. "
            "Dynamo's `op_count` says 5 because it leaves out method calls (`x.pow`, "
            "`.mean`).",
        ),
        Q(
            "What breaks a graph?",
            (
                "any Python function call",
                "a tensor's value read back into Python, such as `.item()` in an `if`",
                "a dtype change",
            ),
            1,
            "Dynamo cannot record a Python branch on a value; it runs it in Python and "
            "starts a new graph (an error under `fullgraph=True`).",
        ),
        Q(
            "Why is a second compiled run's first step cheaper, even after a kernel restart?",
            (
                "dynamo keeps its graphs in the kernel",
                "inductor keeps its generated code in a cache on disk",
                "the second run compiles less of the model",
            ),
            1,
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
