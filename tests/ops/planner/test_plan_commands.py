"""Every command ``qwen3-trn plan`` prints runs as printed.

Each plan's commands are taken from its output and run through the real command line,
as far as this CPU machine can take them without training: ``data prepare`` and
``slurm`` for real (one tokenizes a local corpus, the other only writes a script, after
planning the job as its nodes will: plan_job's checks); ``train`` up to its launch (the
parser, the plan ``train`` makes and its memory rule, on the device the command names).
A hub corpus cannot be prepared offline: its ``data prepare`` line is parsed, and the
folder it names is made from the embedded corpus for the ``slurm`` line that reads it.
"""

from __future__ import annotations

import shlex

import pytest

from qwen3_trn_helpers.cli import build_parser, main, spec_from_args


@pytest.fixture(autouse=True)
def _here(tmp_path, monkeypatch):
    """Plans here read no calibration, and their runs/ folders go to a temporary folder."""
    monkeypatch.setenv("QWEN3_TRN_CALIBRATION", str(tmp_path / "calibration.json"))
    monkeypatch.chdir(tmp_path)


def printed_commands(capsys, argv: list[str]) -> list[list[str]]:
    """The ``qwen3-trn ...`` lines a plan prints, as argv lists (without the program)."""
    assert main(["plan", *argv]) == 0
    out = capsys.readouterr().out
    return [shlex.split(line)[1:] for line in out.splitlines() if line.startswith("qwen3-trn ")]


def train_up_to_launch(argv: list[str]) -> None:
    """What ``train`` does before it launches: parse, plan, the memory rule."""
    from qwen3_trn_helpers.training.plan import memory_fit_problem, plan_run

    args = build_parser().parse_args(argv)
    spec = spec_from_args(args)
    plan = plan_run(spec, device_type=spec.device)
    assert memory_fit_problem(plan) is None, argv


def run_printed(capsys, commands: list[list[str]], *, hub_corpus: bool) -> None:
    for argv in commands:
        verb = argv[0]
        if verb == "train":
            train_up_to_launch(argv)
        elif verb == "data" and hub_corpus:
            args = build_parser().parse_args(argv)  # parsed; made here from local text
            assert args.corpus == "c4" and args.max_tokens > 0
            assert main(["data", "prepare", "--corpus", "embedded", "--out", args.out,
                         "--max-tokens", "20000"]) == 0  # fmt: skip
        else:
            assert main(argv) == 0, argv
        capsys.readouterr()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "verbs", "hub_corpus"),
    [
        (["--model", "Qwen3-4B"], [["train"]], False),
        (["--model", "Qwen3-4B", "--nnodes", "4", "--corpus", "embedded"],
         [["slurm"]], False),
        (["--model", "Qwen3-4B", "--nnodes", "4"], [["data", "prepare"], ["slurm"]], True),
        (["--model", "Qwen3-30B-A3B", "--nodes", "2"], [["data", "prepare"], ["slurm"]], True),
        (["--model", "tiny", "--device", "cpu", "--nproc", "2"], [["train"]], False),
    ],
)  # fmt: skip
def test_every_printed_command_runs_as_printed(capsys, argv, verbs, hub_corpus):
    commands = printed_commands(capsys, argv)
    assert [c[: len(v)] for c, v in zip(commands, verbs, strict=True)] == verbs
    if hub_corpus:  # the job reads the folder the prepare step writes
        prepare, job = commands
        out = prepare[prepare.index("--out") + 1]
        assert job[job.index("--corpus") + 1] == out
    run_printed(capsys, commands, hub_corpus=hub_corpus)
