"""The method registry (pipeline/methods/): one entry says what a method is.

A toy method defined here (:data:`TOY`, one registry entry) is accepted by the configuration
while it is registered; tests/test_evaluation_stage.py trains, embeds and evaluates it through
the stages like a built-in one. The registry's answers replace every hand-kept list of method
names: no list of two or more of them remains in pipeline/ outside pipeline/methods/.
"""

from __future__ import annotations

import ast

import numpy as np
import pytest

from pipeline.config import load_config, param_info
from pipeline.errors import ConfigError
from pipeline.methods import FittedModel, MethodSpec, get_method, method_names, registered
from pipeline.methods.registry import BUILTIN, all_methods, find_method, register, unregister
from pipeline.methods.spec import DriverMemory
from tests.conftest import REPO

PKG = REPO / "pipeline"


def fit_concept_codes(t, data, checkpoint) -> FittedModel:
    """The toy method: every training concept gets a seeded Gaussian code of r numbers, and a
    language's map sends a term to the sum of the codes of the training documents it occurs
    in, weighted by TF-IDF (Φ_l = X_lᵀ Y_l G). Crosslingual through the shared codes."""
    backend = data.backend
    codes = np.random.default_rng(t.seed).standard_normal((backend.n_concepts, t.r))
    return FittedModel(
        components={lang: backend.xt_gather(lang, codes) for lang in backend.languages},
        means={},
        eigenvalues=np.zeros(0),
        history={"method": "concept_codes", "seed": t.seed},
        n_iter=None,
    )


#: The toy method's one registry entry.
TOY = MethodSpec(
    name="concept_codes",
    family="corpus-level",
    fit=fit_concept_codes,
    rank_bound=lambda n_concepts, n_terms: n_concepts,
)


# --- the registry -----------------------------------------------------------------------------


def test_the_built_in_methods_and_what_each_is():
    assert method_names() == (
        "cr5",
        "untranslated",
        "cl_lsi",
        "cca",
        "opca",
        "jplsa",
        "cplsa",
        "s2net",
        "xcnn",
        "tlaser",
        "ctlaser",
    )
    by_family = {f: {s.name for s in BUILTIN if s.family == f} for f in {s.family for s in BUILTIN}}
    assert by_family == {
        "corpus-level": {"cr5", "untranslated", "cl_lsi", "cca", "opca"},
        "concept-grouped": {"jplsa", "cplsa", "s2net"},
        "neural": {"xcnn", "tlaser", "ctlaser"},
    }
    assert {s.name for s in BUILTIN if s.checkpoints} == {
        "cr5", "jplsa", "cplsa", "s2net", "xcnn", "tlaser", "ctlaser",
    }  # fmt: skip
    assert {s.name for s in BUILTIN if s.has_rank} == {
        "cr5", "cl_lsi", "cca", "opca", "jplsa", "cplsa", "s2net",
    }  # fmt: skip
    assert {s.name: s.tuned_by for s in BUILTIN if s.tuned_by} == {
        "cr5": "lam", "cca": "gamma", "opca": "gamma", "s2net": "gamma",
    }  # fmt: skip
    assert {s.name for s in BUILTIN if s.similarity == "l1"} == {"jplsa", "cplsa"}
    assert {s.name for s in BUILTIN if s.model_kind == "encoder"} == {"tlaser", "ctlaser"}
    assert {s.name for s in BUILTIN if s.needs_local_engine} == {"untranslated", "jplsa", "cplsa"}
    assert get_method("cr5").driver_memory.formula == "solver"
    assert get_method("cca").driver_memory == DriverMemory("state", 26.0)
    assert get_method("cr5").rank_bound(100, 50) == 50
    assert get_method("cr5").rank_bound(10, 50) == 9


def test_register_adds_a_name_and_unregister_removes_it():
    assert find_method(TOY.name) is None
    with registered(TOY):
        assert get_method(TOY.name) is TOY and method_names()[-1] == TOY.name
        with pytest.raises(ValueError, match="already registered"):
            register(TOY)
    assert find_method(TOY.name) is None and TOY not in all_methods()
    with pytest.raises(ValueError, match="built-in"):
        unregister("cca")
    with pytest.raises(ConfigError, match="no method 'concept_codes' is registered"):
        get_method(TOY.name)
    with pytest.raises(ValueError, match="pr_arrays"):
        DriverMemory("state")


def test_the_configuration_reads_the_registry_when_it_checks_a_value():
    """train.method and evaluate.methods accept what is registered at the time the value is
    checked, so the toy method needs no change to the configuration's schema."""
    overrides = [f"train.method={TOY.name}", f"evaluate.methods=[cca, {TOY.name}]"]
    with pytest.raises(ConfigError, match="must be one of 'cr5', 'untranslated'"):
        load_config([], overrides)
    with registered(TOY):
        cfg = load_config([], overrides)
        assert cfg.train.method == TOY.name and cfg.evaluate.methods == ["cca", TOY.name]
        assert f"'{TOY.name}'" in param_info("train.method").allowed()
    assert f"'{TOY.name}'" not in param_info("train.method").allowed()


# --- no list of method names outside the registry -----------------------------------------------


def _name_lists(source: str, names: set[str]) -> list[tuple[int, list[str]]]:
    """(line, names) of every list, tuple or set literal, and every dict's keys, written with
    two or more of ``names`` as string literals (docstrings and comments are no such node)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            elements = node.elts
        elif isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        else:
            continue
        hits = [e.value for e in elements if isinstance(e, ast.Constant) and e.value in names]
        if len(hits) >= 2:
            found.append((node.lineno, hits))
    return found


def test_no_list_of_method_names_outside_the_registry():
    names = {spec.name for spec in BUILTIN}
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {hits}"
        for path in sorted(PKG.rglob("*.py"))
        if "methods" not in path.relative_to(PKG).parts[:1]
        for line, hits in _name_lists(path.read_text(encoding="utf-8"), names)
    ]
    assert not offenders, "ask the method's spec (pipeline/methods/registry.py):\n" + "\n".join(
        offenders
    )


def test_the_name_list_check_sees_a_list():
    """The check flags the shapes the registry replaced (guards the check itself)."""
    names = {spec.name for spec in BUILTIN}
    source = '''
"""A docstring naming cca and opca, ("cca", "opca")."""
CHECKPOINTED = ("cr5", "jplsa", "cplsa", "s2net")  # a comment: ["cca", "opca"]
if t.method in ("cca", "opca"):
    pass
ARRAYS = {"cl_lsi": 2.5, "cca": 26.0}
kinds: Literal["cr5", "untranslated"]
fine = ("cr5", "avg_procrustes", "rcsls")
'''
    assert sorted(line for line, _ in _name_lists(source, names)) == [3, 4, 6, 7]
