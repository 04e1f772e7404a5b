"""Installable like a library: the ``cr5`` console script and the profiles shipped in the wheel.

Fast: ``cr5 --help`` lists every stage, the chains and the tools; a bare profile name (``--conf
local``) is the packaged profile, from any working directory; a stage command records the
``cr5 run <stage>`` rerun advice. Slow: the wheel built from this checkout, installed into a
fresh virtual environment outside it, runs the demo chain through its ``cr5`` script with the
packaged profiles given by name, from an empty directory that stays empty.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from pipeline import cli, failures
from pipeline.config import (
    Config,
    default_profiles,
    load_config,
    packaged_profiles,
    resolve_profile,
)
from pipeline.errors import ConfigError
from pipeline.stages import STAGES
from tests.conftest import REPO, SAMPLE

CONF = REPO / "conf"
TOOLS = ("embed", "import-cr5", "import-vec", "verify", "config-reference", "search")


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main([*argv, "--help"], prog="cr5")
    assert stop.value.code == 0
    return capsys.readouterr().out


def test_help_lists_the_stages_the_chains_and_the_tools(capsys):
    out = _help(capsys)
    assert out.startswith("usage: cr5 ")
    commands = {line.split()[0] for line in out.splitlines() if line.startswith("    ")}
    # every stage has a command but embed, whose name is the tool's: `cr5 run embed`
    assert {s for s in STAGES if s != "embed"} | {"demo", "run", *TOOLS} <= commands
    assert set(cli.STAGE_HELP) == set(STAGES)
    assert "run embed" in out and ", ".join(sorted(packaged_profiles())) in out
    # a stage command takes the job scripts' options; run lists the stages it accepts
    assert "--conf PROFILE" in _help(capsys, "train") and "--set" in _help(capsys, "demo")
    assert "translate_words" in _help(capsys, "run")


def test_a_bare_profile_name_is_the_packaged_profile(tmp_path, monkeypatch):
    shipped = {p.stem: p.resolve() for p in CONF.glob("*.yaml")}
    assert {"local", "sample", "short-docs", "cluster"} <= set(shipped)
    assert packaged_profiles() == shipped  # in the checkout, pipeline/profiles is conf/
    monkeypatch.chdir(tmp_path)  # away from the checkout: conf/... does not exist here
    for name, path in shipped.items():
        assert resolve_profile(name) == resolve_profile(f"{name}.yaml") == path
        assert resolve_profile(f"conf/{name}.yaml") == path
    assert default_profiles() == [str(shipped["local"])]
    stack = ["local", "short-docs", "sample"]
    cfg = load_config(stack, ["train.r=20"])
    assert isinstance(cfg, Config)
    assert cfg == load_config([CONF / f"{n}.yaml" for n in stack], ["train.r=20"])
    assert cfg.split.n_test == 200 and cfg.features.min_df == 2  # sample's, short-docs'
    # a file of that name in the working directory wins; other paths are read as they are
    (tmp_path / "local").write_text("train:\n  r: 7\n")
    assert resolve_profile("local") == Path("local")
    assert load_config(["local"]).train.r == 7
    assert resolve_profile("other/local.yaml") == Path("other/local.yaml")
    with pytest.raises(ConfigError, match=r"nope\.yaml: No such file.*packaged one: cluster, "):
        load_config(["nope.yaml"])


def test_a_stage_command_fails_before_spark_and_advises_cr5_run(monkeypatch, capsys):
    import pipeline.spark

    def no_spark(*args, **kwargs):
        raise AssertionError("a SparkSession was requested for an invalid configuration")

    monkeypatch.setattr(pipeline.spark, "get_spark", no_spark)
    monkeypatch.setattr(failures, "_invocation", {})  # this run's record, dropped after it
    code = cli.main(["word-vectors", "--conf", "local", "--set", "train.r=0"], prog="cr5")
    assert code == 2
    assert "'train.r' (from --set train.r=0)" in capsys.readouterr().err
    assert failures.rebuild_command("tfidf") == "cr5 run tfidf --conf local --set train.r=0"
    failures.set_invocation("jobs/train.py", ["conf/local.yaml"], [])  # a job script's run
    assert failures.rebuild_command("tfidf") == "python jobs/tfidf.py --conf conf/local.yaml"


# --------------------------------------------------------------------------- slow


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the checkout's sources (the build writes nothing in the
    checkout); the copy keeps pipeline/profiles a symbolic link to conf/, as git has it."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "conf", src / "conf", ignore=skip)
    shutil.copytree(REPO / "pipeline", src / "pipeline", symlinks=True, ignore=skip)
    assert (src / "pipeline" / "profiles").is_symlink()
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-q", "-w", str(out)],
        check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (wheel,) = out.glob("cr5_on_spark-*.whl")
    return wheel


def _small_sample(tmp_path: Path, concepts: int = 600) -> Path:
    """The bundled sample cut to its first ``concepts`` concepts with an English and a German
    document (one pair, 2 x ``concepts`` documents): the chain's cost is not what is tested."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(SAMPLE)
    langs = pa.array(["en", "de"])
    table = table.filter(pc.is_in(table["lang"], langs))
    en, de = (
        set(table.filter(pc.equal(table["lang"], lang))["concept_id"].to_pylist())
        for lang in ("en", "de")
    )
    keep = pa.array(sorted(en & de)[:concepts])
    small = table.filter(pc.is_in(table["concept_id"], keep))
    assert small.num_rows == 2 * concepts
    path = tmp_path / "sample_en_de.parquet"
    pq.write_table(small, path)
    return path


def _run(args: list, cwd: Path, env: dict[str, str], timeout: float = 60) -> str:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{args[:3]} failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.slow
def test_the_wheel_runs_the_demo_chain_outside_the_checkout(tmp_path):
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "cr5 = pipeline.cli:cr5" in z.read(entry_points).decode()
    assert "pipeline/py.typed" in names
    assert {f"pipeline/profiles/{p.name}" for p in CONF.glob("*.yaml")} <= names

    # A fresh environment outside the checkout; the dependencies come from this one's
    # site-packages through a plain .pth line, which does not run that directory's .pth
    # files, so the checkout's editable install stays out.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYSPARK_PYTHON",
                     "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")
    }  # fmt: skip
    work = tmp_path / "work"  # the working directory of every command: it must stay empty
    work.mkdir()
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                     work, env).strip())  # fmt: skip
    deps = dict.fromkeys(sysconfig.get_path(k) for k in ("purelib", "platlib"))
    (site / "cr5_deps.pth").write_text("".join(f"{d}\n" for d in deps))
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
          "--disable-pip-version-check", "-q", wheel], work, env, timeout=120)  # fmt: skip

    where = _run(
        [python, "-c", "import pipeline, pipeline.config as c; "
         "print(pipeline.__file__); print(c.default_profiles()[0])"],
        work, env,
    ).split()  # fmt: skip
    for path in where:
        assert Path(path).is_relative_to(site), (path, site)
    assert not any(Path(p).is_relative_to(REPO) for p in where)

    out = tmp_path / "out"
    _run(
        [venv / "bin" / "cr5", "demo", "--conf", "local", "--conf", "short-docs",
         "--conf", "sample", "--set", f"ingest.input={_small_sample(tmp_path)}",
         "--set", f"paths.root={out}", "--set", "split.n_test=100",
         "--set", "split.n_validation=100", "--set", "train.r=20",
         "--set", "evaluate.lambda_grid=[1.0]", "--set", "evaluate.methods=[]",
         "--set", "evaluate.plot=false", "--set", "spark.shuffle_partitions=2"],
        work, env, timeout=600,
    )  # fmt: skip
    assert (out / "model" / "model.json").is_file()
    report = (out / "reports" / "evaluation.md").read_text()
    assert "P@1" in report
    assert (out / "reports" / "evaluation.json").is_file()
    assert list(work.iterdir()) == []
