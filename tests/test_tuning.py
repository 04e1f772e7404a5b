"""What the train stage tunes (:func:`pipeline.evaluation.tuning.tuning_plan`): the parameter
of ``train.method``'s spec, from the evaluation's grid, only with validation concepts.

The stage itself (the same γ and the same arrays as the evaluation's OPCA row) is
tests/test_evaluation_stage.py's ``test_gamma_of_opca_is_chosen_on_validation``.
"""

from __future__ import annotations

import pytest

from pipeline.baselines.params import CcaParams, OpcaParams, S2NetParams
from pipeline.config import load_config
from pipeline.errors import ConfigError
from pipeline.evaluation.tuning import tuning_plan
from tests.conftest import REPO

SPLITS = "features.heldout_concepts=splits"
GRID = "evaluate.gamma_grid=[0.0001, 0.001]"


def plan_for(*overrides: str):
    return tuning_plan(load_config([REPO / "conf" / "local.yaml"], list(overrides)))


@pytest.mark.parametrize("method", ["cca", "opca", "s2net"])
def test_a_method_tuned_by_gamma_is_tuned_with_a_grid_and_splits(method):
    plan = plan_for(f"train.method={method}", GRID, SPLITS)
    assert (plan.parameter, plan.grid) == ("gamma", (1e-4, 1e-3))


def test_auto_fits_as_configured_without_splits_or_grid():
    no_splits = plan_for("train.method=opca", GRID)
    assert no_splits.parameter is None and "heldout_concepts" in no_splits.reason
    no_grid = plan_for("train.method=opca", "evaluate.gamma_grid=[0.001]", SPLITS)
    assert no_grid.parameter is None and "gamma_grid has 1 value" in no_grid.reason


def test_auto_leaves_lambda_to_the_evaluate_stage_and_always_tunes_it():
    grid = "evaluate.lambda_grid=[0.1, 1.0, 10.0]"
    assert plan_for("train.method=cr5", grid, SPLITS).parameter is None
    plan = plan_for("train.method=cr5", "train.tune=always", grid, SPLITS)
    assert (plan.parameter, plan.grid) == ("lam", (0.1, 1.0, 10.0))


def test_never_and_untuned_methods_fit_as_configured():
    assert plan_for("train.method=opca", "train.tune=never", GRID, SPLITS).parameter is None
    assert plan_for("train.method=cl_lsi", "train.tune=always", GRID, SPLITS).parameter is None


def test_always_says_what_is_missing():
    with pytest.raises(ConfigError, match=r"evaluate\.gamma_grid has 0 value.*heldout_concepts"):
        plan_for("train.method=opca", "train.tune=always")


def test_default_gamma_of_each_method_is_what_its_grid_chose():
    # OPCA's γ = 1e-4 (its grid's choice on the DDTP sample and full corpus), also S2Net's
    # start; CCA's 1e-3 (its choice on the sample).
    assert OpcaParams().gamma == S2NetParams().gamma == 1e-4
    assert CcaParams().gamma == 1e-3
    cfg = load_config([REPO / "conf" / "local.yaml"], [])
    assert cfg.train.params_of("opca").gamma == 1e-4
