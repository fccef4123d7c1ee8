"""No function or method in src/tapernorm is longer than MAX_LINES, the project's limit: a longer
one is split into named helpers, one concept each."""

import ast
from pathlib import Path

MAX_LINES = 80
SRC = Path(__file__).resolve().parents[1] / "src" / "tapernorm"


def long_functions(source: str, limit: int = MAX_LINES) -> dict[str, int]:
    """{qualified name: lines} of each function or method in `source` longer than `limit` lines,
    counted from its `def` line to its last line (decorators not counted), nested ones too."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found[name] = lines
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_the_count_runs_from_def_to_the_last_line_of_every_function_and_method():
    body = "".join(f"    x{i} = {i}\n" for i in range(79))
    method = "".join(f"        y{i} = {i}\n" for i in range(80))
    source = (
        f"@decorator\ndef fits():\n{body}\n\n"  # 80 lines with its def
        f"class Model:\n    def too_long(self):\n{method}\n"  # 81
        f"def outer():\n    def inner():\n{method}"  # inner 81, outer 82
    )
    assert long_functions(source) == {"Model.too_long": 81, "outer": 82, "outer.inner": 81}
    assert long_functions(source, limit=81) == {"outer": 82}


def test_no_function_in_the_package_is_longer_than_the_limit():
    too_long = {
        f"{path.relative_to(SRC)}:{name}": lines
        for path in sorted(SRC.rglob("*.py"))
        for name, lines in long_functions(path.read_text(encoding="utf-8")).items()
    }
    assert not too_long, f"longer than {MAX_LINES} lines (split them into helpers): {too_long}"
