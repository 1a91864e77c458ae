"""The package's shape: layers import downward only, one trainer builder, one registry."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "qwen3_trn_helpers"
#: lower layers first; a module may import its own layer and the ones before it
LAYERS = [
    {"errors", "without_triton", "trn2", "torchtitan_internals", "device", "assets", "corpus"},
    {"model"},
    {"training"},
    {"lessons"},
    {"cli", "config_registry", "smoke", "wheelhouse", "__init__", "__main__"},
]


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = ast.parse(path.read_text())
    return found


def imports_of(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """Package modules ``name`` imports, at the top or inside functions."""
    package = name if name in ("qwen3_trn_helpers",) else name.rsplit(".", 1)[0]
    if name.endswith(("training", "model", "lessons")) and name.count(".") == 1:
        package = name
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
    mods = modules()
    return {name: imports_of(name, tree, set(mods)) for name, tree in mods.items()}


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


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


def test_one_place_builds_a_trainer():
    """Only training/trainer.py turns a trainer config into a Trainer."""
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
    users = {n for n, t in graph().items() if "qwen3_trn_helpers.training.trainer" in t}
    assert users == {
        "qwen3_trn_helpers.training.train",  # run(), the CLI, every launched rank
        "qwen3_trn_helpers.training.dryrun",
        "qwen3_trn_helpers.lessons.parity",
        "qwen3_trn_helpers.lessons.init_loss",
        "qwen3_trn_helpers.config_registry",  # returns the config; torchtitan builds it
    }


def test_private_torchtitan_names_in_one_module():
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torchtitan"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private or name.endswith("torchtitan_internals"), (name, private)


def test_variant_names_are_compared_in_the_registry_only():
    names = {"native", "transformers_v5", "nki_moe"}
    for name, tree in modules().items():
        if name.endswith("model.variants"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                consts = [c for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                assert not any(c.value in names for c in consts), (name, ast.unparse(node))
