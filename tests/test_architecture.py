"""The shape of the code: no import circle, the protocol a leaf, implementations built only by the
factory. Read from the source (ast), so a lazy import inside a function, or one for type checking
only, counts like any other: each still ties the two modules together."""

import ast
from pathlib import Path

import pytest

import hetrl
from hetrl.primitives import LIBRARY, implementations
from hetrl.protocol import PRIMITIVES

SRC = Path(hetrl.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def imports_of(name: str) -> set[str]:
    """The hetrl modules ``name`` imports (the module, or the package of a name imported from
    it), plus the packages whose ``__init__`` such an import runs, excluding ``name``'s own."""
    tree = ast.parse(MODULES[name].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]
        for target in targets:
            if not target.startswith("hetrl.") or target not in MODULES:
                continue
            found.add(target)
            parts = target.split(".")
            for k in range(2, len(parts)):  # the packages it runs on the way (not hetrl's own lazy __init__)
                package = ".".join(parts[:k])
                if not name.startswith(package + ".") and package != name:
                    found.add(package)
    found.discard(name)
    return found


def test_the_import_graph_has_no_circle():
    graph = {name: imports_of(name) for name in MODULES}
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_the_protocol_imports_nothing_above_it():
    for name in MODULES:
        if name.startswith("hetrl.protocol"):
            above = {m for m in imports_of(name) if not m.startswith("hetrl.protocol")}
            assert not above, f"{name} imports {sorted(above)}"


def test_every_implementation_lives_in_the_primitives_package_under_its_registry_name():
    for primitive in PRIMITIVES:
        for backend, impl in implementations(primitive).items():
            family = primitive
            module = impl.cls.__module__
            assert module.startswith("hetrl.primitives."), impl.key
            stem = module.rsplit(".", 1)[1]
            assert stem in LIBRARY, impl.key
            # env_step_gymnasium <- EnvStep/gymnasium, tabular_learn_numba_threads <- TabularLearn/numba-threads
            snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in impl.cls.__mro__[0].__name__).lstrip("_")
            assert stem == snake, (impl.key, stem, snake)
            if primitive in ("Act", "EnvStep", "Learn", "ReplayAdd", "TabularLearn"):
                wanted = {"ReplayAdd": "replay"}.get(primitive, "_".join(
                    "".join(f"_{c.lower()}" if c.isupper() else c for c in family).lstrip("_").split("_")))
                assert stem == f"{wanted}_{backend.replace('-', '_')}", (impl.key, stem)


FACTORY_ONLY = ("hetrl.runtime", "hetrl.profile", "hetrl.planner", "hetrl.training", "hetrl.sweep",
                "hetrl.tabular", "hetrl.api", "hetrl.cli", "hetrl.evaluation")


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(FACTORY_ONLY)))
def test_executors_and_the_profiler_build_implementations_through_the_factory_only(name):
    classes = {impl.cls.__name__ for p in PRIMITIVES for impl in implementations(p).values()}
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            assert called not in classes, f"{name}:{node.lineno} constructs {called} directly; use hetrl.primitives.build"
            assert called != "cls" or not isinstance(func, ast.Attribute), f"{name}:{node.lineno} calls .cls(...)"


def test_numba_kernels_are_compiled_from_the_sources_under_test():
    """The tests' numba cache is named by a hash of every hetrl source file (tests/conftest.py): a
    kernel's cache follows only its own file, so a change to a function it inlines from another
    file (fused_mlp into learn_numba) would otherwise run the old compiled code."""
    import hashlib
    import os

    import numba

    from hetrl.primitives import learn_numba

    digest = hashlib.sha256()
    for path in sorted(SRC.rglob("*.py")):
        digest.update(str(path.relative_to(SRC)).encode() + b"\0" + path.read_bytes() + b"\0")
    cache = Path(numba.config.CACHE_DIR)
    assert cache == Path(os.environ["NUMBA_CACHE_DIR"]) and cache.name == digest.hexdigest()[:16]
    assert Path(learn_numba.dqn_update._cache._cache_path).is_relative_to(cache)
