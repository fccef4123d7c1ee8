"""The import graph inside tapernorm: no cycles, and no module importing one that sits above it.

Every import counts, also those inside functions (a lazy import is still a dependency)."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tapernorm"

# The package's layers, lowest first: a module imports only from its own package or from a lower
# layer (the method sits at the root: norms, schedules, anchor, model, decode, fold, fakeln and the
# variants' registry; `ls src/tapernorm/*.py` lists nothing else)
LAYERS = (
    ("runtime",),  # atomic writes, JSON, digests, guarded outputs, progress, device, provenance
    ("method",),  # the paper's method and the model: the package root
    ("config",),  # run configs: YAML, the schemas' validation, the typed RunConfig
    ("interop",),  # Hugging Face in and out
    ("data",),  # corpora, tokenizers, token shards
    ("probe",),  # the tails battery of a model (noise, outliers, residual search)
    ("training",),  # the loop, its run directory, and what is done with a finished run
    ("workflow", "bench"),  # planning the DAG (no torch); the benchmarks
    ("analysis", "machine"),  # tables, figures, claims; the machine's checks
    ("artifact",),  # the artifact's own maintenance: docs blocks, references, manifests
    ("cli",),  # the `tapernorm` command
)
LAYER = {pkg: i for i, pkgs in enumerate(LAYERS) for pkg in pkgs}
COMMANDS = ("data", "train", "models", "machine", "scaling", "stability", "analysis", "bench",
            "record")  # fmt: skip
# module -> modules it must never import (directly), inside a layer: the model knows nothing of
# FakeLN; the decode engine sits below the model (the model imports it for GPT.generate); the
# norms below both; the run's set-up below the loop, the metrics record below both
FORBIDDEN = {
    "tapernorm.model": ("tapernorm.fakeln", "tapernorm.fold"),
    "tapernorm.norms": ("tapernorm.model", "tapernorm.decode", "tapernorm.fold"),
    "tapernorm.decode": ("tapernorm.model", "tapernorm.norms", "tapernorm.fold"),
    "tapernorm.training.run": ("tapernorm.training.loop",),
    "tapernorm.training.metrics_log": ("tapernorm.training.loop", "tapernorm.training.run",
                                       "tapernorm.training.state"),
    # figures: style and saving, then shared curves, then the figures themselves
    "tapernorm.analysis.figures.style": ("tapernorm.analysis.figures.curves",
                                        "tapernorm.analysis.figures.training",
                                        "tapernorm.analysis.figures.gradients"),
    "tapernorm.analysis.figures.curves": ("tapernorm.analysis.figures.training",
                                         "tapernorm.analysis.figures.gradients"),
    "tapernorm.analysis.figures.gradients": ("tapernorm.analysis.figures.training",),
    # the workflow's planning imports no torch: of training only the run identity's file names
    "tapernorm.workflow": ("tapernorm.model", "tapernorm.norms", "tapernorm.decode",
                           "tapernorm.fold", "tapernorm.fakeln", "tapernorm.training.loop",
                           "tapernorm.training.run", "tapernorm.training.checkpoint"),
    # the command line: cli (the entry) gathers the command groups, none of which imports it or
    # another; what they share is below them (cli.args, cli.errors)
    **{f"tapernorm.cli.{m}": tuple(f"tapernorm.cli.{o}" for o in COMMANDS if o != m)
       for m in COMMANDS},
    "tapernorm.cli.args": tuple(f"tapernorm.cli.{m}" for m in COMMANDS),
    "tapernorm.cli.errors": tuple(f"tapernorm.cli.{m}" for m in COMMANDS),
}  # fmt: skip


def package_of(module: str) -> str:
    """The subpackage a module sits in, or "method" for the package root's modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (SRC / parts[-1]).is_dir() else "method"


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


def test_every_subpackage_has_a_layer():
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYER) - {"method"}


def test_no_module_imports_a_higher_layer(graph):
    """A module imports from its own subpackage or from a lower layer, never up or sideways."""
    bad = sorted(
        (m, n)
        for m in graph
        if m != "tapernorm"  # the package's __init__ gathers the public API (imported lazily)
        for n in graph[m]
        if n != "tapernorm"
        and package_of(n) != package_of(m)
        and LAYER[package_of(n)] >= LAYER[package_of(m)]
    )
    assert not bad, f"imports that go up or sideways a layer: {bad}"


def test_the_package_root_holds_the_method_only():
    root = sorted(p.stem for p in SRC.glob("*.py"))
    assert root == ["__init__", "anchor", "decode", "fakeln", "fold", "model", "norms",
                    "schedules", "variants"]  # fmt: skip


def test_norms_opens_with_tapernorm():
    """The first layer a reader of norms.py meets is the paper's (the others follow it)."""
    tree = ast.parse((SRC / "norms.py").read_text())
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes[0] == "TaperNorm"


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
