"""The import graph inside tapernorm: no cycles, and no module importing one that sits above it.

Every import counts, also those inside functions (a lazy import is still a dependency)."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tapernorm"

CLI_COMMANDS = ("cli_data", "cli_train", "cli_models", "cli_machine")  # the commands, by kind
# module -> modules it must never import (directly): the model knows nothing of how it is
# benchmarked, trained or driven from the command line; the decode engine sits below it (the model
# imports it for GPT.generate, it imports no model code)
FORBIDDEN = {
    "tapernorm.model": ("tapernorm.bench", "tapernorm.train", "tapernorm.cli", "tapernorm.fakeln"),
    "tapernorm.norms": ("tapernorm.model", "tapernorm.decode", "tapernorm.train", "tapernorm.cli"),
    "tapernorm.decode": ("tapernorm.model", "tapernorm.norms", "tapernorm.fold", "tapernorm.bench",
                         "tapernorm.train", "tapernorm.cli"),
    "tapernorm.analysis": ("tapernorm.train", "tapernorm.cli", "tapernorm.checkpoint"),
    # the run's set-up sits below the loop; the metrics record below both and the analysis
    "tapernorm.training_run": ("tapernorm.train", "tapernorm.cli"),
    "tapernorm.metrics_log": ("tapernorm.train", "tapernorm.training_run",
                              "tapernorm.training_state", "tapernorm.analysis"),
    # figures: style and saving, then shared curves, then the figures themselves
    "tapernorm.analysis.figure_style": ("tapernorm.analysis.figure_curves",
                                        "tapernorm.analysis.figures",
                                        "tapernorm.analysis.figures_gradients"),
    "tapernorm.analysis.figure_curves": ("tapernorm.analysis.figures",
                                         "tapernorm.analysis.figures_gradients"),
    "tapernorm.analysis.figures_gradients": ("tapernorm.analysis.figures",),
    # the workflow's planning: no torch (the model, data, training, benchmarks), no commands
    "tapernorm.workflow": ("tapernorm.model", "tapernorm.norms", "tapernorm.decode", "tapernorm.train",
                           "tapernorm.data", "tapernorm.bench", "tapernorm.cli",
                           "tapernorm.job_resources", "tapernorm.analysis", "tapernorm.checkpoint"),
    # the command line: cli (the entry) gathers the commands' modules, none of which imports it
    # or each other; what they share is below them (cli_args, cli_errors)
    **{f"tapernorm.{m}": ("tapernorm.cli", *(f"tapernorm.{o}" for o in CLI_COMMANDS if o != m))
       for m in CLI_COMMANDS},
    "tapernorm.cli_args": ("tapernorm.cli", *(f"tapernorm.{m}" for m in CLI_COMMANDS)),
    "tapernorm.cli_errors": ("tapernorm.cli", *(f"tapernorm.{m}" for m in CLI_COMMANDS)),
}  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The tapernorm modules `path` imports (absolute names), anywhere in the file."""
    name, out = module_name(path), set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("tapernorm")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            elif (node.module or "").startswith("tapernorm"):
                target = node.module
            else:
                continue
            out.add(target)
            out |= {f"{target}.{a.name}" for a in node.names}  # `from . import bench`
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    return {m: {i for i in imports_of(p) if i in modules and i != m} for m, p in modules.items()}


def test_no_import_cycle(graph):
    state: dict[str, int] = {}  # 1: on the stack, 2: done

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph[m]):
            if n == "tapernorm" or m == "tapernorm" or n.startswith(m + "."):
                continue  # the package's __init__ gathers the public API; a package its parts
            assert state.get(n) != 1, "import cycle: " + " -> ".join([*stack, m, n])
            if n not in state:
                visit(n, [*stack, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


@pytest.mark.parametrize("low", sorted(FORBIDDEN))
def test_no_module_imports_one_above_it(graph, low):
    mine = [m for m in graph if m == low or m.startswith(low + ".")]
    bad = {
        (m, n)
        for m in mine
        for n in graph[m]
        if any(n == f or n.startswith(f + ".") for f in FORBIDDEN[low])
    }
    assert not bad, f"{low} imports what sits above it: {sorted(bad)}"
