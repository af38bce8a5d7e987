"""The package is layered as DESIGN.md and the index page show: shared helpers → mechanisms → model → evaluation
and data → training → studies → tooling. A module imports only from its own layer or those below it, and never a
private (`_`-prefixed) name of another module; every module of the package is in exactly one layer."""
import ast

import pytest

from conftest import ROOT

LAYERS = [
    ("shared helpers", {"utils"}),
    ("mechanisms", {"xsa", "muon", "routing"}),
    ("model", {"model"}),
    ("evaluation and data", {"tokenizer", "data", "eval", "core_eval", "diagnostics", "chat_data", "chat_eval"}),
    ("training", {"config", "recipe", "checkpoint", "trainer"}),
    ("studies", {"experiments", "runner", "records", "report", "figures", "stats", "published", "claims", "claim_sources", "studies", "study_runs"}),
    ("tooling", {"bench", "bench_gpu", "bench_history", "bench_bf16", "gpu_pairs", "docs", "params", "cli"}),
]
LAYER_OF = {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}
MODULES = sorted(p.stem for p in (ROOT / "xsa_nb").glob("*.py") if p.stem not in ("__init__", "_modidx"))


def package_imports(module: str) -> list[tuple[str, list[str]]]:
    """Every package import in `module`, anywhere in it (`from xsa_nb.X`/`.X import`, `from xsa_nb`/`. import X`,
    `import xsa_nb.X`): (X, imported names)."""
    tree = ast.parse((ROOT / "xsa_nb" / f"{module}.py").read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name.removeprefix("xsa_nb."), []) for a in node.names if a.name.startswith("xsa_nb.")]
        elif isinstance(node, ast.ImportFrom) and (node.level == 1 or (node.module or "").startswith("xsa_nb")):
            if (node.level == 1 and not node.module) or node.module == "xsa_nb":  # `from . import data, docs`
                found += [(a.name, []) for a in node.names if not a.name.startswith("__")]
            else:
                found.append((node.module.removeprefix("xsa_nb."), [a.name for a in node.names]))
    return found


def test_every_module_has_a_layer():
    assert sorted(LAYER_OF) == MODULES, set(MODULES) ^ set(LAYER_OF)


@pytest.mark.parametrize("module", MODULES)
def test_imports_point_down_and_name_nothing_private(module):
    for target, names in package_imports(module):
        assert LAYER_OF[target] <= LAYER_OF[module], \
            f"{module} ({LAYERS[LAYER_OF[module]][0]}) imports {target} ({LAYERS[LAYER_OF[target]][0]}), a layer above it"
        assert not [n for n in names if n.startswith("_")], f"{module} imports private names {names} from {target}"


def test_the_readme_layer_table_is_this_one():
    """The README's table of layers (from 00_index) names the same layers, in the same order, with the same modules."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("| layer | notebooks (modules) |"):].split("\n\n")[0].splitlines()[2:]
    rows = [(cells[1].strip(), cells[2]) for cells in (line.split("|") for line in table)]
    layers = [(name, {m.split("`")[0] for m in cell.split("(`")[1:]}) for name, cell in rows if not name.startswith("runs")]
    assert layers == LAYERS, layers
