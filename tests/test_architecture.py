"""The package's layering, checked on the code: config at the bottom, maths free of engines and
I/O, the model API free of Spark, no private names imported across modules."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "pipeline"
#: The method registry's numpy-free part (pipeline/methods/): declarations below config.
_METHOD_DECLARATIONS = ("pipeline.methods.registry", "pipeline.methods.spec")


def _imports(path: Path) -> set[str]:
    """Absolute module names imported by ``path`` (module level and inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def _modules(sub: str) -> list[Path]:
    return sorted((PKG / sub).rglob("*.py")) if sub else sorted(PKG.glob("*.py"))


def _fresh_import(module: str) -> set[str]:
    code = (
        f"import sys, {module}\n"
        "print('\\n'.join(m for m in sys.modules if m.startswith(('pipeline', 'pyspark'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_model_api_loads_no_spark_backend_or_evaluation():
    # the configuration (through the tokenizer's defaults) brings the numpy-free declaration
    # of the retrieval parameters, and with it the retrieval package's lazy namespace only
    # (and of the backends' options: their package's namespace and params module only)
    loaded = _fresh_import("pipeline.model") - {
        "pipeline.retrieval",
        "pipeline.retrieval.params",
        "pipeline.backends",
        "pipeline.backends.params",
    }
    assert not {m for m in loaded if m.startswith("pyspark")}
    forbidden = (
        "pipeline.backends",
        "pipeline.evaluation",
        "pipeline.retrieval",
        "pipeline.stages",
    )
    assert not {m for m in loaded if m.startswith(forbidden)}, sorted(loaded)


def test_search_queries_load_no_spark():
    """The query side (API, CLI, HTTP service) starts without Spark; only the index stage's
    library, pipeline/search/build.py, imports it."""
    loaded = _fresh_import("pipeline.search.server")
    assert not {m for m in loaded if m.startswith(("pyspark", "pipeline.stages"))}, sorted(loaded)
    for path in _modules("search"):
        if path.name != "build.py":
            bad = {m for m in _imports(path) if m.startswith(("pyspark", "pipeline.stages"))}
            assert not bad, f"{path.name} imports {sorted(bad)}"


def test_config_is_a_leaf():
    # the bottom layer, the numpy-free parameter modules of the maths that config embeds, and
    # the method registry whose names train.method accepts
    allowed = {
        "pipeline.errors",
        "pipeline.params",
        "pipeline.wikipedia.config",
        "pipeline.linalg.params",
        "pipeline.backends.params",
        "pipeline.retrieval.params",
        "pipeline.baselines.params",
        "pipeline.neural.params",
        *_METHOD_DECLARATIONS,
    }
    leaves = [PKG / "params.py", PKG / "wikipedia" / "config.py"]
    leaves += [
        PKG / pkg / "params.py"
        for pkg in ("linalg", "backends", "retrieval", "baselines", "neural")
    ]
    leaves += [PKG / "methods" / f"{m.rsplit('.', 1)[1]}.py" for m in _METHOD_DECLARATIONS]
    for path in _modules("config") + leaves:
        inner = {
            m
            for m in _imports(path)
            if m.startswith("pipeline") and not m.startswith("pipeline.config")
        }
        assert {m.rsplit(".", 1)[0] if m not in allowed else m for m in inner} <= allowed | {
            "pipeline"
        }, (path, inner)
    # And it loads without numpy, pyarrow or Spark (the Airflow DAG imports it): the maths
    # packages' names load lazily (pipeline.lazy), so only their params modules come along.
    loaded = _fresh_import("pipeline.config")
    packages = {"pipeline", "pipeline.lazy", "pipeline.wikipedia"} | {
        f"pipeline.{pkg}"
        for pkg in ("linalg", "backends", "retrieval", "baselines", "neural", "methods")
    }
    assert loaded - {m for m in loaded if m.startswith("pipeline.config")} <= allowed | packages


@pytest.mark.parametrize("path", _modules("linalg"), ids=lambda p: p.name)
def test_linalg_is_maths_only(path):
    bad = {
        m
        for m in _imports(path)
        if m.startswith(
            ("pyspark", "pyarrow", "pipeline.io", "pipeline.backends", "pipeline.stages")
        )
        or m.startswith(("pipeline.evaluation", "pipeline.retrieval", "pipeline.model"))
        or m.startswith("pipeline.config")  # the maths owns its parameters
        # and its errors: a bad argument is a SolverArgumentError naming the argument, which
        # the training service turns into the ConfigError naming the key
        or m == "pipeline.errors.ConfigError"
    }
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "path",
    [p for p in _modules("retrieval") if p.name != "spark.py"]
    + _modules("baselines")
    + _modules("neural"),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_retrieval_and_baselines_need_no_spark(path):
    app = ("pyspark", "pipeline.stages", "pipeline.io", "pipeline.config")
    bad = {m for m in _imports(path) if m.startswith(app)}
    assert not bad, f"{path} imports {sorted(bad)}"


def test_no_private_names_imported_across_modules():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipeline"):
                offenders += [
                    f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and a.name != "__version__"
                ]
    assert not offenders, offenders


def test_every_stage_is_a_module_with_run():
    from pipeline.stages import DEMO_CHAIN, STAGES, get_stage

    assert set(DEMO_CHAIN) <= set(STAGES)
    on_disk = {p.stem for p in (PKG / "stages").glob("*.py")} - {"__init__"}
    assert on_disk == set(STAGES)
    for name in STAGES:
        assert callable(get_stage(name))


def test_evaluation_builds_on_the_training_service_not_on_the_stages():
    bad = {
        f"{path.name}: {m}"
        for path in _modules("evaluation")
        for m in _imports(path)
        if m.startswith("pipeline.stages")
    }
    assert not bad, sorted(bad)


def test_spark_ml_stages_build_on_the_library_and_nothing_builds_on_them():
    bad = {
        f"{path.name}: {m}"
        for path in _modules("sparkml")
        for m in _imports(path)
        if m.startswith(("pipeline.stages", "pipeline.evaluation"))
    }
    assert not bad, sorted(bad)
    users = {
        str(path.relative_to(ROOT))
        for path in PKG.rglob("*.py")
        if "sparkml" not in path.parts
        and any(m.startswith("pipeline.sparkml") for m in _imports(path))
    }
    assert not users, sorted(users)


#: Parameter declarations: modules every layer may import (numpy-free, no behaviour). Each is
#: its own node of the package graph, so that a package importing its sibling's parameters is
#: not counted as importing the sibling. The method registry and its spec type are
#: declarations too: the configuration checks train.method against them; and so are the
#: methods' driver-memory formulas (stdlib arithmetic on sizes), which the memory plan reads
#: through the specs.
_DECLARATIONS = (
    "pipeline.params",
    "pipeline.errors",
    "pipeline.lazy",
    "pipeline.ranking",
    *_METHOD_DECLARATIONS,
    "pipeline.methods.driver_memory",
)


def _node(module: str) -> str:
    """The node of the package graph a module belongs to: its top-level package under
    ``pipeline``, except declaration modules (``pipeline.config``, ``*.params``,
    ``pipeline.wikipedia.config`` and :data:`_DECLARATIONS`), which stand alone."""
    if module.startswith("pipeline.config"):
        return "pipeline.config"
    if module in _DECLARATIONS or module.endswith((".params", "wikipedia.config")):
        return module
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, set[str]]:
    def name(path: Path) -> str:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name(p) for p in PKG.rglob("*.py")}

    def resolve(imported: str) -> str | None:
        while imported not in modules and "." in imported:
            imported = imported.rsplit(".", 1)[0]
        return imported if imported in modules else None

    graph: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        source = _node(name(path))
        for imported in _imports(path):
            target = resolve(imported) if imported.startswith("pipeline") else None
            if target and _node(target) != source:
                graph.setdefault(source, set()).add(_node(target))
    # The registry names its fits as "module:function" for the lookup to import
    # (pipeline/training/fit.py): each is an import of the training service.
    for module in _registry_fit_modules():
        target = resolve(module)
        if target and _node(target) != "pipeline.training":
            graph.setdefault("pipeline.training", set()).add(_node(target))
    return graph


def _registry_fit_modules() -> set[str]:
    """The modules the method registry's ``"module:function"`` fit references name."""
    tree = ast.parse((PKG / "methods" / "registry.py").read_text(encoding="utf-8"))
    return {
        node.value.split(":")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"pipeline(\.\w+)+:\w+", node.value)
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (its nodes in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_packages_import_one_way():
    """No cycle in the graph of ``pipeline``'s packages (imports inside functions count)."""
    cycle = _find_cycle(_package_graph())
    assert cycle is None, " -> ".join(cycle)


def _module_graph() -> dict[str, set[str]]:
    """Module -> the modules of ``pipeline`` it imports: every import statement counts, at
    module level, inside functions and under ``if TYPE_CHECKING:`` (a circle there breaks
    type checkers and is one edit away from a circular import at run time); a package's
    ``__init__`` is the node of the package's own name, reached only by importing it."""

    def name(path: Path) -> str:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name(p): p for p in PKG.rglob("*.py")}

    def resolve(imported: str) -> str | None:
        while imported not in modules and "." in imported:
            imported = imported.rsplit(".", 1)[0]
        return imported if imported in modules else None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        for imported in _imports(path):
            target = resolve(imported) if imported.startswith("pipeline") else None
            if target and target != module:
                graph.setdefault(module, set()).add(target)
    # the registry's "module:function" fits are imported by the lookup
    for fit_module in _registry_fit_modules():
        if target := resolve(fit_module):
            graph.setdefault("pipeline.training.fit", set()).add(target)
    return graph


def test_modules_import_one_way():
    """No circle of imports between modules either, within a package as across packages,
    counting those under ``if TYPE_CHECKING:`` and inside functions."""
    cycle = _find_cycle(_module_graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_module_cycle_check_sees_a_type_checking_cycle(tmp_path, monkeypatch):
    """An import under ``if TYPE_CHECKING:`` is an edge of the module graph (guards the check
    itself): the solvers' backend contract importing the block CG's result type only for
    annotations, while the block CG imports the contract, is a circle."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pipeline.linalg.block_cg import BlockCGResult\n"
    )
    assert "pipeline.linalg.block_cg.BlockCGResult" in _imports(_write(tmp_path, source))
    graph = _module_graph()
    assert "pipeline.linalg.block_cg" in graph["pipeline.linalg.backend"]  # TYPE_CHECKING only
    graph.setdefault("pipeline.linalg.block_cg", set()).add("pipeline.linalg.backend")
    monkeypatch.setattr(sys.modules[__name__], "_module_graph", lambda: graph)
    with pytest.raises(AssertionError, match="pipeline.linalg.backend"):
        test_modules_import_one_way()


def _write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "module.py"
    path.write_text(source, encoding="utf-8")
    return path


def test_the_cycle_check_sees_a_cycle(monkeypatch):
    """The graph check fails on a back edge (guards the check itself)."""
    graph = _package_graph()
    graph.setdefault("pipeline.linalg", set()).add("pipeline.stages")
    monkeypatch.setattr(sys.modules[__name__], "_package_graph", lambda: graph)
    with pytest.raises(AssertionError, match="pipeline.linalg"):
        test_packages_import_one_way()


def test_the_error_boundary_sits_at_the_bottom():
    """pipeline/failures.py serves every layer (io annotates writes, the runner and the CLI
    report through it): it imports nothing of the pipeline but its exceptions, and neither
    Spark nor Py4J, whose errors it recognises by name."""
    inner = {
        m for m in _imports(PKG / "failures.py") if m.startswith(("pipeline", "pyspark", "py4j"))
    }
    assert inner and all(m.startswith("pipeline.errors") for m in inner), sorted(inner)


def test_the_registry_names_fits_of_the_methods_package():
    """Every built-in method's fit is a ``"module:function"`` of a module of
    ``pipeline/methods/`` (above the configuration, below the training service) that
    defines it, and the package graph counts it as the lookup's import (a fit importing the
    training service would close a cycle)."""
    from pipeline.methods.registry import BUILTIN

    modules = _registry_fit_modules()
    assert {spec.fit.split(":")[0] for spec in BUILTIN} == modules
    for spec in BUILTIN:
        module, _, function = spec.fit.partition(":")
        path = ROOT / (module.replace(".", "/") + ".py")
        assert module.startswith("pipeline.methods.") and module not in _DECLARATIONS, spec
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert function in defined, f"{spec.name}: {module} defines no {function}"
    assert "pipeline.methods" in _package_graph()["pipeline.training"]


def test_the_driver_memory_formulas_are_a_declaration():
    """pipeline/methods/driver_memory.py, a node of its own in the package graph, imports
    nothing of the pipeline but the method spec, and loads no Spark: every layer may read it,
    as the memory plan and bench/cost_model.py do."""
    inner = {m for m in _imports(PKG / "methods" / "driver_memory.py") if m.startswith("pipeline")}
    assert all(m.startswith("pipeline.methods.spec") for m in inner), sorted(inner)
    loaded = _fresh_import("pipeline.methods.driver_memory")
    assert loaded <= {
        "pipeline",
        "pipeline.lazy",
        "pipeline.methods",
        "pipeline.methods.spec",
        "pipeline.methods.driver_memory",
    }, sorted(loaded)
