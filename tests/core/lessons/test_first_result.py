"""The first result a new user sees: setup's figure and three lines (issue 49).

Built here from run results with made-up losses, so every number the figure and the
lines show is checked against its source: nothing in them is a constant but AWS's two.
"""

from __future__ import annotations

import errno
import math
from pathlib import Path

import pytest

from qwen3_trn_helpers.errors import RunFolderError
from qwen3_trn_helpers.lessons import reproduction as rp
from qwen3_trn_helpers.lessons.reproduction import AWS_STEP1, Reproduction, step1_gap
from qwen3_trn_helpers.runs.folder import RunResult
from qwen3_trn_helpers.training.spec import RunSpec


def _rep(tmp_path: Path, pre: list[float], rnd: list[float], **kw) -> Reproduction:
    out = tmp_path / "rep"
    device = kw.pop("device_type", "cpu")
    preset = kw.pop("preset", "tiny")

    def result(init: str, losses: list[float]) -> RunResult:
        spec = RunSpec(variant="native", preset=preset, init=init, out=str(out / init))
        metrics = [{"step": i + 1, "loss": x} for i, x in enumerate(losses)]
        return RunResult(out=out / init, spec=spec, metrics=metrics)

    runs = {"pretrained": result("pretrained", pre), "random": result("random", rnd)}
    return Reproduction("native", device, runs, out, **kw)


def test_aws_gap_is_computed_from_its_two_losses():
    assert step1_gap(AWS_STEP1) == pytest.approx(12.43 - 6.54)


def test_the_figure_says_what_it_is_where_it_ran_and_the_gap(tmp_path):
    rep = _rep(tmp_path, [8.0, 7.5, 7.25], [11.5, 11.25, 11.0])
    fig = rep.figure()
    ax = fig.axes[0]
    assert ax.get_title() == ("Qwen3 native (tiny, CPU): published weights vs random init, 3 steps")
    assert "nats" in ax.get_ylabel()
    caption = fig._supxlabel.get_text()  # the line under the plot
    assert caption == (
        "gap at step 1: 3.50 nats here (11.50 - 8.00); 5.89 in AWS's run "
        "(12.43 - 6.54; Qwen3-4B, trn2)"
    )
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines)[:2] == ["published weights (local tiny checkpoint)", "random init"]
    assert list(lines["random init"].get_ydata()) == [11.5, 11.25, 11.0]
    for init, name in (("pretrained", "published weights"), ("random", "random init")):
        star = lines[f"AWS step 1, {name} ({AWS_STEP1[init]})"]
        assert (list(star.get_xdata()), list(star.get_ydata())) == ([1], [AWS_STEP1[init]])
    ln_v = next(line for label, line in lines.items() if label.startswith("ln(vocab)"))
    assert ln_v.get_ydata()[0] == pytest.approx(math.log(151936))


def test_on_trn2_the_title_names_the_ranks_and_the_hub_weights(tmp_path):
    rep = _rep(tmp_path, [6.5], [12.4], device_type="neuron", preset="4b", nproc=64)
    assert rep.title() == (
        "Qwen3 native (4b, trn2, 64 ranks): published weights vs random init, 1 step"
    )
    assert rep.curve_names()["pretrained"] == "published weights (Qwen/Qwen3-4B-Instruct-2507)"


def test_three_lines_hold_both_losses_the_gap_and_where_the_files_are(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # paths are shown relative to the working folder
    rep = _rep(tmp_path, [8.374, 7.0], [11.94, 11.5])
    rep.figure_path = rep.out / "reproduce.png"
    lines = rep.brief_lines()
    assert lines == [
        "step-1 loss: published weights 8.37, random init 11.94 nats (tiny, CPU); AWS: 6.54 "
        "and 12.43 (Qwen3-4B, trn2)",
        "gap at step 1: 3.57 nats here, 5.89 in AWS's run",
        "figure: rep/reproduce.png  metrics: rep/summary.json and "
        "{pretrained,random}/metrics.jsonl",
    ]


def test_the_readme_quotes_what_setup_prints(tmp_path, monkeypatch):
    """README's CPU quick start ends with setup's last four lines: the three lines
    brief_lines() makes from the step-1 losses the README shows, then setup's next step."""
    import re

    root = Path(__file__).resolve().parents[3]
    readme = (root / "README.md").read_text()
    quick = readme[readme.index("## Quick start on a CPU") : readme.index("## Quick start on trn2")]
    quoted = quick[quick.index("It ends with:") :].split("```")[1].strip().splitlines()
    pre, rnd = map(float, re.search(r"published weights ([\d.]+), random init ([\d.]+)",
                                    quoted[0]).groups())  # fmt: skip
    monkeypatch.chdir(tmp_path)
    rep = _rep(tmp_path, [pre], [rnd])
    rep.out = Path("runs/reproduce")
    rep.figure_path = rep.out / "reproduce.png"
    assert quoted[:3] == rep.brief_lines()
    setup = (root / "scripts" / "setup.sh").read_text()
    echo = re.search(r'^echo "(next: [^"]+)" \\\n\s+"([^"]+)"$', setup, re.M)
    assert quoted[3] == f"{echo[1]} {echo[2]}".replace("$VENV", ".venv")
    assert "--out runs/reproduce " in setup  # where the quoted figure and metrics are


def test_setups_png_is_the_notebooks_figure(tmp_path):
    """What reproduce() saves (setup's reproduce.png) is Reproduction.figure(), the call
    notebook 03 shows: the same pixels."""
    from matplotlib.image import imread

    rep = _rep(tmp_path, [8.0, 7.0], [11.9, 11.6])
    rep.out.mkdir(parents=True)
    rep.figure_path = rep.out / "reproduce.png"
    rp._save_figure(rep)
    shown = tmp_path / "shown.png"
    shown.write_bytes(rep.figure()._repr_png_())
    assert (imread(rep.figure_path) == imread(shown)).all()
    notebook = Path(__file__).resolve().parents[3] / "notebooks" / "03_ten_step_run.ipynb"
    assert "rep.figure()" in notebook.read_text()
    assert not list(rep.out.glob(".*.tmp"))


def test_a_figure_the_disk_cannot_take_is_one_error_and_no_half_file(tmp_path, monkeypatch):
    rep = _rep(tmp_path, [8.0], [11.9])
    rep.out.mkdir(parents=True)
    rep.figure_path = rep.out / "reproduce.png"

    def full(self, path, **kw):
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(rep.figure()), "savefig", full)
    with pytest.raises(RunFolderError) as refused:
        rp._save_figure(rep)
    line = str(refused.value)
    assert "\n" not in line and "No space left on device" in line
    assert "both runs finished and are kept with their metrics; free some space" in line
    assert list(rep.out.iterdir()) == []  # neither the picture nor its temporary


@pytest.mark.parametrize(
    ("device", "nproc", "said"),
    [
        ("cpu", 1, "CPU"),
        ("cuda", 1, "GPU"),
        ("neuron", 64, "trn2, 64 ranks"),
        ("cpu", 2, "CPU, 2 ranks"),
    ],
)
def test_where_it_ran(device, nproc, said):
    assert rp.where_it_ran(device, nproc) == said
