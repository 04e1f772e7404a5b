"""The per-method sections of ``train`` (``train.<method>.<key>``), built from the method
registry's ``params`` classes, and the flat keys of the release before them, which load with
a warning naming the new keys."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from pipeline.baselines.params import CcaParams, CplsaParams, OpcaParams, PlsaParams, S2NetParams
from pipeline.config import Config, TrainConfig, build_section, load_config, param_info
from pipeline.config.reference import reference_markdown
from pipeline.errors import ConfigError
from pipeline.methods import MethodSpec, registered
from pipeline.methods.registry import BUILTIN, legacy_keys, method_sections
from pipeline.neural.params import CtlaserParams, TlaserParams, XcnnParams
from pipeline.params import param


def test_each_method_with_parameters_has_its_section():
    assert method_sections() == {
        s.name: s.params for s in BUILTIN if s.params is not None
    }  # fmt: skip
    assert method_sections() == {
        "cca": CcaParams,
        "opca": OpcaParams,
        "jplsa": PlsaParams,
        "cplsa": CplsaParams,
        "s2net": S2NetParams,
        "xcnn": XcnnParams,
        "tlaser": TlaserParams,
        "ctlaser": CtlaserParams,
    }
    t = load_config([]).train
    assert t.params_of("cca") == CcaParams() and t.params_of("cr5") is None
    assert t.params_of("s2net") == S2NetParams() and t.params_of("s2net").scale == 10.0
    assert t.params_of("ctlaser").dim == t.params_of("tlaser").dim == 128
    assert dataclasses.replace(t, method="jplsa").params_of() == PlsaParams()
    # the method's own keys are no flat keys of train
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert not names & {"gamma", "plsa_topic_prior", "s2net_gamma", "neural_epochs", "xcnn_dim"}


def test_nested_keys_load_from_overrides_and_profiles(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("train:\n  jplsa:\n    topic_prior: 1.3\n  s2net:\n    scale: 4.0\n")
    cfg = load_config([profile], ["train.cca.gamma=0.5", "train.xcnn.epochs=3"])
    t = cfg.train
    assert t.params_of("jplsa").topic_prior == 1.3 and t.params_of("cplsa").topic_prior == 1.1
    assert t.params_of("s2net").scale == 4.0
    assert t.params_of("cca").gamma == 0.5 and t.params_of("opca") == OpcaParams()
    assert t.params_of("xcnn").epochs == 3 and t.params_of("tlaser").epochs == 10
    with pytest.raises(ConfigError, match=r"train\.cplsa\.pr_tol' .* out of range"):
        load_config([], ["train.cplsa.pr_tol=-1"])
    with pytest.raises(ConfigError, match=r"unknown configuration key 'train\.jplsa\.pr_tol'"):
        load_config([], ["train.jplsa.pr_tol=0.1"])
    with pytest.raises(ConfigError, match="did you mean 'train.jplsa'"):
        load_config([], ["train.jplssa.tol=0.1"])
    assert param_info("train.cplsa.pr_epsilon").default == 0.01


def test_the_dict_round_trips_and_hashes_the_sections():
    """Config.to_dict (model.json, the config hash) has the sections under their names, and
    build_section reads it back to the same configuration."""
    cfg = load_config([], ["train.opca.gamma=0.25", "train.tlaser.heads=2"])
    data = cfg.to_dict()
    assert data["train"]["opca"] == {"gamma": 0.25} and "method_params" not in data["train"]
    assert build_section(Config, data, prefix="", sources={}) == cfg
    assert cfg.fingerprint("train") != load_config([]).fingerprint("train")
    again = load_config([], ["train.opca.gamma=0.25", "train.tlaser.heads=2"])
    assert cfg.fingerprint("train") == again.fingerprint("train")


def test_with_params_replaces_one_value_checked():
    t = load_config([]).train
    u = t.with_params("s2net", gamma=0.1)
    assert u.params_of("s2net").gamma == 0.1 and t.params_of("s2net").gamma == S2NetParams().gamma
    assert u.params_of("opca") == t.params_of("opca")
    with pytest.raises(ConfigError, match="train.cca.gamma"):
        t.with_params("cca", gamma=-1.0)
    with pytest.raises(ConfigError, match="no parameters of its own"):
        t.with_params("cr5", lam=2.0)


@pytest.mark.parametrize(
    ("old", "value", "new"),
    [
        ("plsa_topic_prior", 1.3, {"jplsa.topic_prior", "cplsa.topic_prior"}),
        ("plsa_pr_epsilon", 0.02, {"cplsa.pr_epsilon"}),
        ("gamma", 0.5, {"cca.gamma", "opca.gamma", "s2net.gamma"}),
        ("s2net_gamma", 4.0, {"s2net.scale"}),
        ("neural_epochs", 3, {"xcnn.epochs", "tlaser.epochs", "ctlaser.epochs"}),
        (
            "neural_validation_distractors",
            7,
            {
                "xcnn.validation_distractors",
                "tlaser.validation_distractors",
                "ctlaser.validation_distractors",
                "s2net.validation_distractors",
            },
        ),
        (
            "pair_partitions",
            4,
            {"jplsa.pair_partitions", "cplsa.pair_partitions", "s2net.pair_partitions"},
        ),
        ("xcnn_dim", 16, {"xcnn.dim"}),
        ("tlaser_dim", 16, {"tlaser.dim", "ctlaser.dim"}),
        ("ctlaser_beta", 0.25, {"ctlaser.beta"}),
    ],
)
def test_an_old_flat_key_sets_the_new_ones_with_a_warning(old, value, new):
    assert set(legacy_keys()[old]) == new
    with pytest.warns(
        FutureWarning, match=rf"'train\.{old}' \(from --set .*\) is deprecated"
    ) as rec:
        cfg = load_config([], [f"train.{old}={value}"])
    message = str(rec[0].message)
    for key in new:
        assert f"train.{key}" in message
        method, name = key.split(".")
        assert getattr(cfg.train.params_of(method), name) == value
    # the same from a recorded dict (model.json's configuration), and from a profile mapping
    with pytest.warns(FutureWarning, match=rf"train\.{old}"):
        rebuilt = build_section(Config, {"train": {old: value}}, prefix="", sources={})
    assert rebuilt == cfg


def test_every_old_key_is_mapped():
    """Each flat key of the release before the sections maps to the same-named (or renamed)
    field of every method that shares it."""
    old = {
        "gamma", "pair_partitions",
        *(f"plsa_{k}" for k in ("topic_prior", "word_prior", "init_mix", "maxiter", "tol",
                                "stop_rule", "patience", "pr_epsilon", "pr_maxiter", "pr_tol",
                                "fold_in_steps")),
        *(f"s2net_{k}" for k in ("learning_rates", "epochs", "batch_concepts", "gamma",
                                 "negatives")),
        *(f"neural_{k}" for k in ("epochs", "batch_size", "lr", "processes", "threads",
                                  "validation_distractors")),
        "xcnn_dim", "xcnn_scale",
        *(f"tlaser_{k}" for k in ("dim", "heads", "layers", "ff", "vocab_size", "max_tokens")),
        "ctlaser_beta", "ctlaser_margin", "ctlaser_center",
    }  # fmt: skip
    assert set(legacy_keys()) == old


def test_a_new_key_wins_over_the_old_one():
    with pytest.warns(FutureWarning):
        t = load_config([], ["train.cca.gamma=0.7", "train.gamma=0.5"]).train
    assert t.params_of("cca").gamma == 0.7 and t.params_of("opca").gamma == 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config([], ["train.cca.gamma=0.7"])  # the new keys warn of nothing


def test_the_classic_checks_read_the_sections():
    with pytest.raises(ConfigError, match=r"train\.s2net\.learning_rates and train\.s2net\.epochs"):
        load_config([], ["train.method=s2net", "train.s2net.learning_rates=[]"])
    with pytest.raises(ConfigError, match=r"train\.cplsa\.stop_rule=validation scores"):
        load_config([], ["train.method=cplsa", "train.cplsa.stop_rule=validation"])
    load_config([], ["train.method=jplsa", "train.cplsa.stop_rule=validation"])  # not trained


@dataclasses.dataclass(frozen=True)
class ToyParams:
    """A method registered at run time with a key of its own."""

    width: int = param(3, lo=1, doc="The toy's width.", extra={"legacy": "toy_width"})


TOY = MethodSpec(name="toy_sections", family="corpus-level", fit=lambda *a: None, params=ToyParams)


def test_a_method_registered_at_run_time_gets_its_section():
    assert "toy_sections" not in method_sections()
    before = load_config([]).train
    with registered(TOY):
        assert before.params_of("toy_sections") == ToyParams()  # the declared defaults
        t = load_config([], ["train.toy_sections.width=5"]).train
        assert t.params_of("toy_sections") == ToyParams(5)
        assert load_config([]).train.params_of("toy_sections") == ToyParams()
        with pytest.warns(FutureWarning, match="train.toy_sections.width"):
            assert load_config([], ["train.toy_width=6"]).train.params_of("toy_sections").width == 6
        assert "`train.toy_sections.width`" in reference_markdown(["train"])
    assert "toy_sections" not in reference_markdown(["train"])
    with pytest.raises(ConfigError, match="unknown configuration key 'train.toy_sections'"):
        load_config([], ["train.toy_sections.width=5"])


def test_a_method_named_like_a_train_key_is_refused():
    # a section train.seed would hide the solver's key train.seed
    clashing = dataclasses.replace(TOY, name="seed")
    refused = r"section\(s\) train\.seed.*another name"
    with registered(clashing), pytest.raises(ConfigError, match=refused):
        load_config([])
    load_config([])  # unregistered: loads again
