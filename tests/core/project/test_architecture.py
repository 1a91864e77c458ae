"""The package's shape: layers import downward only, one trainer builder, one registry."""

import ast
from pathlib import Path

from qwen3_trn_helpers.model.variants import VARIANTS

PACKAGE = Path(__file__).resolve().parents[3] / "qwen3_trn_helpers"
#: lower layers first; a module may import its own layer and the ones before it. The
#: course core is every layer below ``ops``; ``ops`` (the cluster tools) sits on the core,
#: and only the faces above it (the lessons, the CLI, the package face) may reach it.
LAYERS = [
    {
        "errors",
        "faces",
        "without_triton",
        "trn2",
        "torchtitan_internals",
        "stack",
        "tables",  # the notebooks' and the CLI's tables
        "checksums",
        "cpu_peak",  # this CPU's measured matmul peak (the planner's CPU machine, doctor)
        "device",
        "assets",
        "hub",
        "files",  # every file the package reads, read one way (issue 50)
    },
    {"data"},  # the text a run trains on: corpora, prepared folders, the global order
    {"model"},
    {"training"},  # what torchtitan builds: spec, trainer, patches, metrics, memory
    {"runs"},  # how a run executes: here, through torchrun, children, its folder
    {"ops"},  # the cluster tools: planner, smoke, jobs, fabric, dry run, data prepare
    {"lessons"},  # what the notebooks show
    {"cli", "commands", "config_registry", "__init__", "__main__"},
]
#: the layers of the course core: what the notebooks and nbval run
CORE = {part for layer in LAYERS[: LAYERS.index({"ops"})] for part in layer}


def modules() -> dict[str, ast.Module]:
    return {name: tree for name, (tree, _) in _parsed().items()}


def _parsed() -> dict[str, tuple[ast.Module, bool]]:
    """Every package module: its tree, and whether it is a package's ``__init__``."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = (
            ast.parse(path.read_text()),
            path.stem == "__init__",
        )
    return found


def imports_of(name: str, tree: ast.Module, known: set[str], is_package: bool = False) -> set[str]:
    """Package modules ``name`` imports, at the top or inside functions."""
    package = name if is_package else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        out |= {c for c in candidates if c in known and c != name}
    return out


def graph() -> dict[str, set[str]]:
    parsed = _parsed()
    return {
        name: imports_of(name, tree, set(parsed), is_package)
        for name, (tree, is_package) in parsed.items()
    }


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def test_every_module_has_a_layer():
    for module in graph():
        layer_of(module)  # StopIteration names a module no layer lists


def test_the_core_never_imports_the_ops_wing():
    """The two wings: nothing the notebooks' core runs on reaches the cluster tools, so
    the course stays readable (and runs) without them. Only the faces above both may."""
    offenders = {
        module: sorted(t for t in targets if t.split(".")[1:2] == ["ops"])
        for module, targets in graph().items()
        if module.split(".")[1:2] and module.split(".")[1] in CORE
    }
    assert not {m: t for m, t in offenders.items() if t}, offenders


def test_the_ops_rule_sees_an_import_of_the_wing():
    """The rule above catches both spellings of an import of ops/ from the core."""
    known = {"qwen3_trn_helpers.ops.dry_run", "qwen3_trn_helpers.ops", "qwen3_trn_helpers.runs.run"}
    for source in ("from ..ops.dry_run import dry_run", "from ..ops import dry_run"):
        found = imports_of("qwen3_trn_helpers.runs.run", ast.parse(source), known)
        assert "qwen3_trn_helpers.ops.dry_run" in found, source


def test_at_most_three_modules_over_450_lines():
    """Modules a reader can hold: a module past 450 lines is split by what it holds."""
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 450
    }
    assert len(long) <= 3, long


def test_no_import_circles():
    g = graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in g[node]:
            assert state.get(nxt) != 1, f"import circle: {' -> '.join(path + [nxt])}"
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in g:
        if node not in state:
            visit(node, [node])


def test_layers_import_downward_only():
    for module, targets in graph().items():
        if module == "qwen3_trn_helpers":  # the lazy `run` export at the top
            continue
        for target in targets:
            assert layer_of(target) <= layer_of(module), f"{module} imports up: {target}"


def calls_to(tree: ast.Module, name: str) -> list[ast.Call]:
    """Calls of ``name`` (a plain name or an attribute), anywhere in ``tree``."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == name
    ]


def test_one_place_builds_a_trainer():
    """Only training/trainer.py turns a trainer config into a Trainer, and everyone else
    holds one through its trainer_session (build, quiet, close, free: written once)."""
    builders = set()
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                receiver = node.func.value
                if node.func.attr == "build" and isinstance(receiver, ast.Call):
                    callee = getattr(receiver.func, "id", getattr(receiver.func, "attr", ""))
                    if callee == "trainer_config":
                        builders.add(name)
    assert builders == {"qwen3_trn_helpers.training.trainer"}
    lifetimes = {n for n, t in modules().items() if calls_to(t, "build_trainer")}
    assert lifetimes == {"qwen3_trn_helpers.training.trainer"}  # inside trainer_session
    sessions = {n for n, t in modules().items() if calls_to(t, "trainer_session")}
    assert sessions == {
        "qwen3_trn_helpers.runs.here",  # run(), the CLI, every launched rank
        "qwen3_trn_helpers.ops.dry_run",
        "qwen3_trn_helpers.lessons.logits_parity",
        "qwen3_trn_helpers.lessons.init_loss",
    }


#: modules that start a process, and why; every Python child of ours goes through
#: runs/child.py (one way to stop it, one error line)
PROCESS_STARTERS = {
    "qwen3_trn_helpers.runs.child": "the runner",
    "qwen3_trn_helpers.device": "neuron-ls / neuron-top, Neuron's own tools",
    "qwen3_trn_helpers.runs.rendezvous": "scontrol, Slurm's own tool",
    "qwen3_trn_helpers.assets": "pip download of a pinned wheel (below the runs layer)",
    "qwen3_trn_helpers.ops.wheelhouse": "pip, run by setup.sh before the package is installed",
    "qwen3_trn_helpers.runs.torchrun": "pgrep: has torchrun started its ranks (the nodes met)",
}


def test_one_place_starts_child_processes():
    starters = set()
    for name, tree in modules().items():
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                spawns = (func.value.id, func.attr) in {
                    ("subprocess", "run"), ("subprocess", "Popen"), ("subprocess", "call"),
                    ("subprocess", "check_output"), ("os", "fork"), ("os", "system"),
                }  # fmt: skip
                if spawns:
                    starters.add(name)
    assert starters <= set(PROCESS_STARTERS), starters - set(PROCESS_STARTERS)
    assert "qwen3_trn_helpers.runs.child" in starters


def test_plans_are_made_by_plan_run_and_never_edited():
    """A Plan comes from plan_run (all its checks run); no one edits one afterwards."""
    for name, tree in modules().items():
        if not name.endswith("training.plan"):
            assert not calls_to(tree, "Plan"), f"{name} builds a Plan itself"
        for call in calls_to(tree, "replace"):
            first = call.args[0] if call.args else None
            edited = first is not None and "plan" in ast.unparse(first).lower()
            edited |= isinstance(first, ast.Name) and first.id in ("trn2", "here")
            assert not edited, f"{name} edits a plan: {ast.unparse(call)}"


def test_private_torchtitan_names_in_one_module():
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchtitan"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private or name.endswith("torchtitan_internals"), (name, private)


def variant_name_decisions(tree: ast.Module, names: set[str]) -> list[str]:
    """Places in ``tree`` that decide something by a variant's name, as source text.

    A comparison with a name on either side (``==``, ``!=``, ``in``, ``not in``, also
    inside a literal tuple, list or set), a dict keyed by one (a dispatch table), a
    ``match`` case on one, and a conditional expression that picks one.
    """

    def named(node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(named(e) for e in node.elts)
        return False

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            hit = any(named(c) for c in [node.left, *node.comparators])
        elif isinstance(node, ast.Dict):
            hit = any(named(k) for k in node.keys)
        elif isinstance(node, ast.match_case):
            hit = any(
                isinstance(p, ast.MatchValue) and named(p.value) for p in ast.walk(node.pattern)
            )
        elif isinstance(node, ast.IfExp):
            hit = named(node.body) or named(node.orelse)
        else:
            hit = False
        if hit:
            found.append(ast.unparse(node.pattern if isinstance(node, ast.match_case) else node))
    return found


def test_variant_names_are_compared_in_the_registry_only():
    """Only model/variants.py decides anything by a variant's name."""
    names = set(VARIANTS)
    offenders = {
        name: found
        for name, tree in modules().items()
        if not name.endswith("model.variants")
        if (found := variant_name_decisions(tree, names))
    }
    assert not offenders, offenders


def test_the_variant_name_rule_sees_each_kind_of_decision():
    """The rule above catches every form it names, and leaves a plain argument alone."""
    names = set(VARIANTS)
    caught = [
        "v == 'native'",
        "'nki_moe' != v",
        "v in ('native', 'nki_moe')",
        "v not in {'transformers_v5'}",
        "table = {'native': 1}",
        "match v:\n    case 'native':\n        pass",
        "v = 'nki_moe' if moe else 'native'",
    ]
    for source in caught:
        assert variant_name_decisions(ast.parse(source), names), source
    assert not variant_name_decisions(ast.parse("run('native', steps=1)"), names)


def test_notebooks_import_the_package_and_its_lessons_only():
    """d2l's habit: one face for the reader. Cells import ``qwen3_trn_helpers`` (the API)
    and ``qwen3_trn_helpers.lessons``; every name they ask for resolves there."""
    import importlib
    import json

    imported: dict[str, set[str]] = {}
    for notebook in sorted((PACKAGE.parent / "notebooks").glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for node in ast.walk(ast.parse("".join(cell["source"]))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qwen3"):
                    imported.setdefault(node.module, set()).update(a.name for a in node.names)
                if isinstance(node, ast.Import):
                    assert not any(a.name.startswith("qwen3") for a in node.names), notebook
    assert set(imported) == {"qwen3_trn_helpers", "qwen3_trn_helpers.lessons"}, set(imported)
    for module, names in imported.items():
        exported = importlib.import_module(module)
        for name in names:
            assert name in exported.EXPORTS and getattr(exported, name) is not None, name


def test_every_export_resolves():
    import importlib

    for module in ("qwen3_trn_helpers", "qwen3_trn_helpers.lessons"):
        face = importlib.import_module(module)
        for name in face.EXPORTS:
            assert getattr(face, name) is not None, f"{module}.{name}"


def test_no_export_is_shadowed_by_a_submodule_of_its_name():
    """``from pkg import x`` must give the same object whatever was imported before: a
    submodule ``pkg/x.py`` would replace a lazily exported ``x`` once it is imported."""
    import importlib

    for module in ("qwen3_trn_helpers", "qwen3_trn_helpers.lessons"):
        face = importlib.import_module(module)
        folder = PACKAGE if module == "qwen3_trn_helpers" else PACKAGE / "lessons"
        submodules = {p.stem for p in folder.glob("*.py")} | {
            p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("_")
        }
        clashes = {
            name
            for name, where in face.EXPORTS.items()
            if name in submodules and not where.endswith(name)
        }
        assert not clashes, f"{module}: {clashes} are also submodule names"


#: torchrun's rank variables: read by training/ranks.py's rank_place alone
RANK_VARIABLES = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
}  # fmt: skip


def test_the_rank_environment_is_read_in_one_place():
    """Every module asks training/ranks.py's typed reader where it stands in its job;
    none reads torchrun's variables by name."""
    for name, tree in modules().items():
        if name == "qwen3_trn_helpers.training.ranks":
            continue
        named = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in RANK_VARIABLES
        }
        assert not named, f"{name} reads {sorted(named)} itself: use ranks.rank_place()"


def test_the_rank_rule_sees_a_variable_read_by_name():
    tree = ast.parse('import os\nlocal = int(os.environ.get("LOCAL_RANK", "0"))')
    named = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
    assert named & RANK_VARIABLES == {"LOCAL_RANK"}


def test_no_attribute_is_set_on_a_caught_exception():
    """What an exception carries is declared by its class (errors.Interrupted's
    ``held``), never pinned onto a caught one for someone to ``getattr`` back."""
    for name, tree in modules().items():
        for handler in ast.walk(tree):
            if not isinstance(handler, ast.ExceptHandler) or handler.name is None:
                continue
            for node in ast.walk(handler):
                targets = node.targets if isinstance(node, ast.Assign) else []
                targets += [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
                for target in targets:
                    pinned = isinstance(target, ast.Attribute) and isinstance(
                        target.value, ast.Name
                    )
                    assert not (pinned and target.value.id == handler.name), (
                        f"{name} sets {ast.unparse(target)} on a caught exception"
                    )


def test_the_core_keeps_no_state_in_closures():
    """State a loop updates lives in an object (runs/torchrun.py LaunchFollower), not in
    ``nonlocal`` names of nested functions."""
    for name, tree in modules().items():
        if layer_of(name) < LAYERS.index({"ops"}):
            assert not [n for n in ast.walk(tree) if isinstance(n, ast.Nonlocal)], name


def test_plan_run_is_a_list_of_named_steps():
    """plan_run reads as its steps (training/plan_steps.py and the layers below); the
    checks live in them, each with its own name, not inline in plan_run."""
    tree = modules()["qwen3_trn_helpers.training.plan"]
    plan_run = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "plan_run"
    )
    raises = [n for n in ast.walk(plan_run) if isinstance(n, ast.Raise)]
    assert len(raises) <= 2, "plan_run raises only what a step returned (a slice, the memory)"
    body = plan_run.body[1:]  # (after the docstring)
    assert body[-1].end_lineno - body[0].lineno < 75, "plan_run is its steps, not their checks"
