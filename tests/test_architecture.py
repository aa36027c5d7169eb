"""The layering of docs/architecture.md, checked on the source: calls go one way, down, and there are
no import cycles — lazy imports (inside functions) included."""

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnlab"

# layer of each top-level part of the package; a module may import only parts of a lower or equal rank,
# and the implementations (rank 2) not each other. cost (closed forms, stdlib only) sits just below
# them: the GPU launcher asks it for a split count, the simulator for the formulas it prints beside its counts
RANK = {
    "_checks": 0, "_runtime": 0, "variants": 0, "softmax": 0, "reference": 0, "_console": 0, "cost": 1,
    "blockwise": 2, "gpu": 2, "sim": 2,
    "api": 3, "kvcache": 4, "distributed": 4, "model": 5, "integrations": 5, "bench": 6, "_cliargs": 6, "demos": 7, "info": 8, "cli": 8,
    "__init__": 9, "__main__": 9,
}
IMPLEMENTATIONS = {"blockwise", "gpu", "sim"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every attnlab module this file imports, at any depth of the file (functions included)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "attnlab"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "attnlab":
                continue
            base = SRC.parent / mod.replace(".", "/")
            for a in node.names:  # `from . import cost` imports a module; `from .x import f` imports x
                if (base / a.name).is_dir() or (base / f"{a.name}.py").is_file():
                    found.add(f"{mod}.{a.name}")
                else:
                    found.add(mod)
    return found


@functools.cache
def _graph() -> dict[str, set[str]]:
    files = sorted(SRC.rglob("*.py"))
    modules = {_module_name(p) for p in files}
    graph = {}
    for p in files:
        deps = set()
        for m in _imports(p):
            while m not in modules and "." in m:  # `from attnlab.cost.io import x` -> attnlab.cost.io
                m = m.rsplit(".", 1)[0]
            if m in modules and m != _module_name(p):
                deps.add(m)
        graph[_module_name(p)] = deps
    return graph


def _part(module: str) -> str:
    """The part of the package a module belongs to; a command module (``*.cli``) is the CLI's."""
    parts = module.split(".")
    if parts[-1] == "cli":
        return "cli"
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_part_has_a_layer():
    parts = {_part(m) for m in _graph()}
    assert parts <= set(RANK), f"give these parts a layer in RANK: {sorted(parts - set(RANK))}"


def test_no_import_cycles():
    graph = _graph()
    # the package __init__ files re-export their own modules; an edge into a package's own
    # __init__ from inside it would make every re-export a cycle, so those edges are the only ones left out
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if m.startswith(d + "."):  # a module importing its own package's __init__
                continue
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(_graph()))
def test_imports_go_down(module):
    src = _part(module)
    for dep in _graph()[module]:
        dst = _part(dep)
        if src == dst:
            continue
        if dst == "__init__":  # the package's facade: the public names, for layers above the implementations
            assert RANK[src] > max(RANK[i] for i in IMPLEMENTATIONS), f"{module} imports the attnlab facade"
            continue
        if src in IMPLEMENTATIONS and dst in IMPLEMENTATIONS and src != dst:
            raise AssertionError(f"{module} imports the implementation {dep}")
        assert RANK[dst] <= RANK[src], f"{module} (layer {RANK[src]}) imports {dep} (layer {RANK[dst]}): upward"


def test_cost_needs_no_torch():
    for p in (SRC / "cost").rglob("*.py"):
        tree = ast.parse(p.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
        assert not any(n.split(".")[0] in ("torch", "triton") for n in names), p.name
