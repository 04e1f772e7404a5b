"""linalg speaks its own errors: a solver names its argument (SolverArgumentError), and the
stage boundary that called it with a configuration (the training service's fit_method) names
the configuration key, so a user's message still says train.<key>."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pipeline.backends.local import LocalCorpusBackend
from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.linalg.cr5 import Cr5Solver
from pipeline.linalg.errors import SolverArgumentError
from pipeline.training.fit import fit_method
from tests.problems import PROBLEMS


def _data():
    problem = PROBLEMS["three_uneven"]
    backend = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    return SimpleNamespace(
        backend=backend, solver_options={}, chain_starts=False, path_start=None, validation=None
    )


def test_the_solver_names_its_argument():
    data = _data()
    with pytest.raises(SolverArgumentError, match="'max_basis' must be None or >=") as info:
        Cr5Solver(r=4, block_size=3, max_basis=5).fit(data.backend)
    assert info.value.argument == "max_basis" and isinstance(info.value, ValueError)
    assert "train." not in str(info.value)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("train.max_basis=5", r"max\(r, b\) \+ 2\*b = 10 .*\(configuration key train\.max_basis\)"),
        ("train.r=1000", r"'r' must be <= .*\(configuration key train\.r\)"),
    ],
)
def test_the_training_service_names_the_configuration_key(override, needle):
    t = load_config([], ["train.r=4", "train.block_size=3", override]).train
    with pytest.raises(ConfigError, match=needle) as info:
        fit_method(t, _data(), None)
    assert isinstance(info.value.__cause__, SolverArgumentError)


def test_one_rank_check_worded_per_layer():
    """linalg's check_rank is the one check of r against a corpus: the solver's message names
    the argument, the preflight's (also the training service's) the configuration key."""
    import pickle

    from pipeline.linalg.errors import RankError, check_rank
    from pipeline.preflight import check_rank as preflight_check_rank

    check_rank(9, 10, 50)
    with pytest.raises(RankError, match=r"'r' must be <= min\(n_concepts - 1, n_terms\) = 9") as e:
        check_rank(10, 10, 50)
    assert (e.value.argument, e.value.limit) == ("r", 9)
    again = pickle.loads(pickle.dumps(e.value))
    assert (type(again), str(again), again.limit) == (RankError, str(e.value), 9)
    with pytest.raises(ConfigError, match=r"train.r = 10 is larger .* min\(K - 1, p\) = 9"):
        preflight_check_rank(10, 10, 50, where="the data")
    with pytest.raises(ConfigError, match=r"so at most 3 dimensions exist"):
        preflight_check_rank(4, 10, 50, where="the data", bound=lambda k, p: 3)
