"""Fault injection: concurrent writers, kill -9 mid-write, read-only outputs, bad inputs.

Covered elsewhere and not repeated here: kill -9 of a real ``jobs/ingest.py`` mid-write
(tests/test_io_atomic_writes.py) and kill -9 during training followed by a resume that
gives the same model as an uninterrupted run (tests/test_stages_train.py,
test_training_killed_midway_resumes_to_the_same_answer).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.errors import ConcurrentWriteError
from pipeline.io.publish import MANIFEST, LocalFS, Owner, recover, write_lock
from tests.conftest import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}


def writer(path: Path, rows: int, *, wait: float, sleep: float = 0.02, files: int = 4):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.concurrent_writer",
            str(path),
            str(rows),
            "--wait",
            str(wait),
            "--sleep",
            str(sleep),
            "--files",
            str(files),
        ],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def published(path: Path) -> tuple[dict, int, set[str]]:
    """The manifest, the rows on disk and the writer tokens of the published dataset."""
    manifest = json.loads((path / MANIFEST).read_text())
    n, tokens = 0, set()
    for part in sorted(path.glob("part-*")):
        for line in part.read_text().splitlines():
            n += 1
            tokens.add(json.loads(line)["writer"])
    on_disk = {p.name: p.stat().st_size for p in path.glob("part-*")}
    assert on_disk == manifest["files"]
    return manifest, n, tokens


def leftovers(parent: Path) -> list[str]:
    return sorted(n for n in os.listdir(parent) if n.startswith("."))


def test_concurrent_writers_never_publish_a_mixed_dataset(tmp_path):
    """20 rounds of two writer processes racing on one dataset (the issue's 900 vs 675
    rows). Even rounds: no waiting, the loser exits 2 naming the holder. Odd rounds: the
    second waits and then publishes. Every published dataset equals its manifest and
    holds one writer's rows only."""
    path = tmp_path / "documents"
    for round_ in range(20):
        wait = 0.0 if round_ % 2 == 0 else 30.0
        procs = [writer(path, 900, wait=wait), writer(path, 675, wait=wait)]
        results = [(p.wait(timeout=60), *p.communicate()) for p in procs]
        codes = sorted(code for code, _, _ in results)
        if wait == 0.0:
            # The second may also start after the first finished: then both succeed.
            assert codes in ([0, 2], [0, 0]), results
            for code, _, err in results:
                if code == 2:
                    assert "being written by another run" in err and "pid" in err, err
                    assert "Traceback" not in err
        else:
            assert codes == [0, 0], results
        manifest, n_rows, tokens = published(path)
        assert n_rows == manifest["rows"] in (900, 675), (round_, manifest, n_rows)
        assert tokens == {manifest["write_token"]}, (round_, tokens)
        winners = {out.strip() for code, out, _ in results if code == 0}
        assert manifest["write_token"] in winners
        assert leftovers(tmp_path) == [], (round_, leftovers(tmp_path))


def test_writer_killed_mid_write_does_not_block_or_litter_the_next(tmp_path):
    path = tmp_path / "documents"
    assert writer(path, 10, wait=0).wait(timeout=30) == 0
    before = published(path)
    slow = writer(path, 500, wait=0, sleep=2.0, files=50)
    deadline = time.time() + 30
    while not any(n.startswith(".documents.tmp-") for n in os.listdir(tmp_path)):
        assert time.time() < deadline and slow.poll() is None, slow.communicate()
        time.sleep(0.02)
    os.killpg(slow.pid, signal.SIGKILL)
    slow.wait()
    assert ".documents.lock" in leftovers(tmp_path)  # its lock and temporary are left
    assert published(path) == before  # the previous version is intact
    nxt = writer(path, 7, wait=0)  # its pid is dead: the lock is broken at once
    code, (_, err) = nxt.wait(timeout=30), nxt.communicate()
    assert code == 0, err
    assert "breaking the write lock" in err
    assert published(path)[1] == 7
    assert leftovers(tmp_path) == []


def _foreign_writer(parent: Path, name: str, *, age: float) -> tuple[Path, Path]:
    """A lock and temporary directory of a writer on another host, ``age`` seconds old."""
    owner = Owner("feedbeef0001", "another-host", 4242, None, "2026-01-01T00:00:00+00:00")
    lock = parent / f".{name}.lock"
    lock.write_text(owner.to_json())
    (parent / f".{name}.owner-{owner.token}").write_text(owner.to_json())
    tmp = parent / f".{name}.tmp-{owner.token}"
    tmp.mkdir()
    (tmp / "part-00000.jsonl").write_text("{}\n")
    then = time.time() - age
    for p in (lock, parent / f".{name}.owner-{owner.token}", tmp):
        os.utime(p, (then, then))
    return lock, tmp


def test_a_live_writer_on_another_host_is_respected_until_stale(tmp_path):
    path = tmp_path / "documents"
    fs = LocalFS()
    lock, tmp = _foreign_writer(tmp_path, "documents", age=5)
    recover(fs, str(path), stale_seconds=60)
    assert tmp.exists()  # not ours to remove: its heartbeat is fresh
    with (
        pytest.raises(ConcurrentWriteError, match="pid 4242 on host another-host"),
        write_lock(fs, str(path), wait_seconds=0.3, stale_seconds=60),
    ):
        pass
    assert lock.exists() and tmp.exists()
    old = time.time() - 120
    for p in tmp_path.iterdir():
        os.utime(p, (old, old))
    with write_lock(fs, str(path), wait_seconds=0, stale_seconds=60) as held:
        assert held.held and not tmp.exists()  # stale: lock broken, temporary removed
    assert leftovers(tmp_path) == []


def test_a_reader_does_not_restore_over_a_live_commit(tmp_path):
    """A version moved aside by a live writer mid-commit is not 'restored' by readers."""
    fs = LocalFS()
    path = tmp_path / "documents"
    me = Owner.current()
    (tmp_path / f".documents.owner-{me.token}").write_text(me.to_json())
    (tmp_path / f".documents.old-{me.token}").mkdir()
    recover(fs, str(path), stale_seconds=60)
    assert not path.exists() and (tmp_path / f".documents.old-{me.token}").exists()
    # The same state left by a dead writer (no owner record) is restored.
    (tmp_path / f".documents.owner-{me.token}").unlink()
    recover(fs, str(path), stale_seconds=60)
    assert path.exists() and leftovers(tmp_path) == []


def test_owner_record_knows_a_reused_pid(tmp_path):
    me = Owner.current()
    assert me.host == socket.gethostname() and me.alive_here() is True
    if me.pid_start is not None:  # Linux: a different start time means another process
        assert Owner(me.token, me.host, me.pid, "1", me.started_utc).alive_here() is False


def ingest_job(root: Path, corpus: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            str(REPO / "jobs" / "ingest.py"),
            "--conf",
            str(REPO / "conf" / "local.yaml"),
            "--set",
            f"paths.root={root}",
            "--set",
            f"ingest.input={corpus}",
            "--set",
            "spark.shuffle_partitions=2",
            "--set",
            "spark.driver_memory=1g",
            *[a for kv in extra for a in ("--set", kv)],
        ],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_two_real_ingest_jobs_on_one_root(spark, tmp_path, fmt):
    """The issue's reproduction: two `jobs/ingest.py` runs on the same paths.root at once
    (different corpora, 900 and 675 documents). Both finish (the second waits for the
    first's write lock) and the dataset is exactly one of the two corpora, as its manifest
    says."""
    from pipeline.io.datasets import read_dataset, read_manifest
    from pipeline.io.schemas import DOCUMENTS

    corpora = {}
    for n in (900, 675):
        corpus = tmp_path / f"corpus{n}.jsonl"
        with corpus.open("w") as f:
            for i in range(n):
                lang = ("en", "de", "fr")[i % 3]
                f.write(json.dumps({"concept_id": f"c{i}", "lang": lang, "text": f"t {i}"}) + "\n")
        corpora[n] = corpus
    root = tmp_path / "out"
    procs = [ingest_job(root, c, f"paths.format={fmt}") for c in corpora.values()]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    assert [code for code, _, _ in results] == [0, 0], [err[-3000:] for _, _, err in results]
    path = str(root / "documents")
    manifest = read_manifest(spark, DOCUMENTS, path)
    per_lang = {
        r["lang"]: r["count"]
        for r in read_dataset(spark, DOCUMENTS, path).groupBy("lang").count().collect()
    }
    assert sum(per_lang.values()) == manifest["report"]["documents"] in (900, 675)
    assert per_lang == manifest["report"]["documents_per_language"]
    if fmt == "parquet":
        assert manifest["rows"] == manifest["report"]["documents"]
    assert leftovers(root) == []


# --------------------------------------------------------------------------- bad inputs


def run_job(capsys, *args: str, stages=("train",)) -> tuple[int, str]:
    """pipeline.runner.main in-process; (exit code, stderr)."""
    from pipeline.runner import main

    code = main(list(stages), ["--conf", str(REPO / "conf" / "local.yaml"), *args])
    return code, capsys.readouterr().err


def assert_clean_error(err: str, *needles: str) -> None:
    assert "Traceback" not in err and err.startswith("error: "), err
    for needle in needles:
        assert needle in err, (needle, err)


@pytest.mark.parametrize(
    "master",
    ["local", "local[2]", "local[*]", "local[4,3]", "local[*,2]", "spark://h1:7077,h2:7077",
     "spark://127.0.0.1:7077", "yarn", "k8s://https://10.0.0.1:443", "k8s://host",
     "mesos://zk://a:2181/mesos", "local-cluster[2,1,1024]"],
)  # fmt: skip
def test_spark_master_forms_spark_accepts(master):
    from pipeline.preflight import check_spark_master

    check_spark_master(master)


@pytest.mark.parametrize("master", ["3", "local[0]", "local[x]", "spark://host", "yarn-client", ""])
def test_bad_spark_master_fails_before_spark(capsys, tmp_path, master):
    t0 = time.perf_counter()
    code, err = run_job(
        capsys, "--set", f"spark.master={master}", "--set", f"paths.root={tmp_path}"
    )
    assert code == 2 and time.perf_counter() - t0 < 5  # no Spark session was started
    assert_clean_error(err, "spark.master", "is not a Spark master URL", "local[2]")


def test_unwritable_output_root_fails_before_spark(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, err = run_job(capsys, "--set", f"paths.root={blocker}/out", stages=("ingest",))
    assert code == 2
    assert_clean_error(err, f"{blocker}/out (paths.root) is not writable", "Fix: set paths.root")
    # A dataset path set outside the root is probed too; URIs of other stores are not.
    code, err = run_job(
        capsys,
        "--set",
        f"paths.root={tmp_path}/ok",
        "--set",
        f"paths.model={blocker}/model",
        stages=("ingest",),
    )
    assert code == 2 and "(paths.model) is not writable" in err
    from pipeline.config import load_config
    from pipeline.preflight import output_roots, remote_output_roots

    # Roots on other stores are probed once the session runs (through its Hadoop FS).
    cfg = load_config([], ["paths.root=hdfs:///data/cr5", "paths.model=s3a://b/model"])
    assert output_roots(cfg) == {}
    assert remote_output_roots(cfg) == {"hdfs:///data/cr5": "paths.root", "s3a://b": "paths.model"}


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_read_only_output_root_fails_before_spark(capsys, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, err = run_job(capsys, "--set", f"paths.root={ro}", stages=("ingest",))
    finally:
        ro.chmod(0o755)
    assert code == 2
    assert_clean_error(err, f"{ro} (paths.root) is not writable", "Permission denied")


def _fake_dataset(path: Path, report: dict) -> None:
    path.mkdir(parents=True)
    (path / MANIFEST).write_text(json.dumps({"dataset": path.name, "report": report}))


def test_rank_larger_than_the_corpus_fails_before_spark(capsys, tmp_path):
    """r against the concepts/vocabulary manifests of an earlier run (300 concepts)."""
    _fake_dataset(tmp_path / "concepts", {"concepts": 300})
    _fake_dataset(tmp_path / "vocabulary", {"vocabulary_size": {"en": 900, "de": 800}})
    code, err = run_job(capsys, "--set", f"paths.root={tmp_path}")  # default r = 300
    assert code == 2
    assert_clean_error(err, "train.r = 300", "300 training concepts", "min(K - 1, p) = 299")
    assert "--set train.r=" in err
    # A chain that rebuilds the data first cannot know: no preflight verdict.
    from pipeline.config import load_config
    from pipeline.preflight import check_rank_against_data

    cfg = load_config([], [f"paths.root={tmp_path}"])
    check_rank_against_data(cfg, ["tfidf", "train"])
    check_rank_against_data(load_config([], [f"paths.root={tmp_path}", "train.r=299"]), ["train"])


# --------------------------------------------------------------------------- the CLI


@pytest.fixture
def cli_model(tmp_path):
    from tests.test_model import make_model

    make_model(tmp_path / "model")
    return tmp_path / "model"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    from pipeline.cli import main

    try:
        code = main(["embed", *args])
    except SystemExit as exc:  # argparse
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_bad_inputs_exit_2_with_a_message(capsys, cli_model, tmp_path):
    m = ["--model", str(cli_model), "--lang", "en"]
    code, _, err = cli(capsys, *m, "--input", str(tmp_path / "missing.txt"))
    assert code == 2 and "missing.txt: cannot read it" in err and "Traceback" not in err

    bad = tmp_path / "latin1.txt"
    bad.write_bytes("cat\ndog caf\u00e9\n".encode("latin-1"))
    out = tmp_path / "v.jsonl"
    code, _, err = cli(capsys, *m, "--input", str(bad), "--output", str(out))
    assert code == 2 and "latin1.txt: line 2 is not valid UTF-8" in err and "iconv" in err
    assert not out.exists() and not list(tmp_path.glob(".v.jsonl.tmp-*"))  # nothing partial

    good = tmp_path / "in.txt"
    good.write_text("cat dog\nhouse\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = cli(capsys, *m, "--input", str(good), "--output", f"{blocker}/v.npy")
    assert code == 2 and "cannot write there" in err

    for batch in ("-1", "0", "x"):
        code, _, err = cli(capsys, *m, "--input", str(good), "--batch", batch)
        assert code == 2 and "--batch" in err, (batch, err)

    code, _, err = cli(capsys, "--model", str(cli_model), "--lang", "xx", "--input", str(good))
    assert code == 2 and "'xx' is not in this model" in err


def test_cli_language_codes_and_empty_input(capsys, cli_model, tmp_path):
    """The CLI, the API and the Spark job all read ' EN' as 'en' (canonical_lang)."""
    from pipeline.model import Cr5Model

    good = tmp_path / "in.txt"
    good.write_text("cat dog\nhouse\n")
    code, out, _ = cli(capsys, "--model", str(cli_model), "--lang", "EN", "--input", str(good))
    assert code == 0
    vectors = [json.loads(line)["vector"] for line in out.splitlines()]
    api = Cr5Model.load(cli_model).embed(["cat dog", "house"], " En ")
    assert vectors == [[round(float(x), 7) for x in v] for v in api]

    empty = tmp_path / "empty.txt"
    empty.write_text("")
    code, out, err = cli(capsys, "--model", str(cli_model), "--lang", "en", "--input", str(empty))
    assert code == 0 and out == "" and "has no lines: no vector was written" in err


# --------------------------------------------------------------------------- relocation


def _corpus(path: Path, n_concepts: int, langs=("en", "de")) -> Path:
    import random

    rng = random.Random(0)
    words = {lang: [f"{lang}w{i}" for i in range(60)] for lang in langs}
    with path.open("w") as f:
        for c in range(n_concepts):
            for lang in langs:
                text = " ".join([*rng.sample(words[lang], 15), f"{lang}c{c % 30}"])
                f.write(json.dumps({"concept_id": f"c{c}", "lang": lang, "text": text}) + "\n")
    return path


@pytest.mark.slow
def test_a_moved_run_root_still_works(spark, tmp_path):
    """Manifests name datasets of the run relative to paths.root: move the root after
    vocabulary and run tfidf there (was: 'built with heldout_concepts=./out/splits')."""
    import shutil

    from pipeline.config import load_config
    from pipeline.io.datasets import read_manifest
    from pipeline.io.schemas import TFIDF, VOCABULARY
    from pipeline.stages import get_stage

    corpus = _corpus(tmp_path / "corpus.jsonl", 120)

    def cfg_at(root: Path):
        return load_config(
            [REPO / "conf" / "local.yaml", REPO / "conf" / "short-docs.yaml"],
            [
                f"paths.root={root}",
                f"ingest.input={corpus}",
                "features.heldout_concepts=splits",
                "split.n_test=10",
                "split.n_validation=10",
                "spark.shuffle_partitions=2",
            ],
        )

    first = cfg_at(tmp_path / "a" / "out")
    for stage in ("ingest", "split", "vocabulary"):
        get_stage(stage)(spark, first)
    settings = read_manifest(spark, VOCABULARY, first.paths.dataset("vocabulary"))["report"]
    assert settings["settings"]["heldout_concepts"] == "<paths.root>/splits"
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = cfg_at(tmp_path / "b" / "out")
    report = get_stage("tfidf")(spark, moved)
    assert report["concepts"] == 100  # 120 minus the 20 held out
    assert read_manifest(spark, TFIDF, moved.paths.dataset("tfidf"))["rows"] == 200


# --------------------------------------------------------------------------- no silent outcomes


def test_summary_prints_warnings_and_every_report_path():
    from pipeline.runner import summarize

    text = summarize(
        "evaluate",
        {
            "table": "T",
            "report_md": "r/evaluation.md",
            "report_json": "r/evaluation.json",
            "plot": "r/precision_at_k.png",
            "warnings": ["language 'fr' is dropped"],
        },
    )
    for needle in ("WARNING: language 'fr' is dropped", "evaluation.md", ".json", ".png"):
        assert needle in text


def test_single_language_training_warns_or_fails():
    from pipeline.config import load_config
    from pipeline.errors import InputDataError
    from pipeline.training import training_warnings

    cfg = load_config([], [])
    assert training_warnings(cfg.train, ["en", "de"]) == []
    (msg,) = training_warnings(cfg.train, ["en"])
    assert "not crosslingual" in msg and "train.on_single_language" in msg
    strict = load_config([], ["train.on_single_language=error"])
    with pytest.raises(InputDataError, match="one language only"):
        training_warnings(strict.train, ["en"])


@pytest.mark.slow
def test_small_corpus_split_and_a_dropped_language(spark, tmp_path):
    """The issue's case: conf/sample.yaml (200 + 200 held out per pair) on a 300-concept
    corpus. split shrinks to split.max_heldout_fraction with a warning (or fails naming the
    keys), and vocabulary then works; a language with one document is reported dropped."""
    from pipeline.config import load_config
    from pipeline.errors import InputDataError
    from pipeline.io.datasets import read_manifest
    from pipeline.io.schemas import SPLITS, VOCABULARY
    from pipeline.stages import get_stage

    corpus = _corpus(tmp_path / "corpus.jsonl", 300)
    with corpus.open("a") as f:
        text = "un seul document " + " ".join(f"mot{i}" for i in range(12))
        f.write(json.dumps({"concept_id": "c0", "lang": "fr", "text": text}) + "\n")
    profiles = [REPO / "conf" / n for n in ("local.yaml", "short-docs.yaml", "sample.yaml")]

    def cfg(*extra):
        return load_config(
            profiles,
            [
                f"paths.root={tmp_path}/out",
                f"ingest.input={corpus}",
                "split.pairs=[de-en]",
                "spark.shuffle_partitions=2",
                *extra,
            ],
        )

    get_stage("ingest")(spark, cfg())
    with pytest.raises(InputDataError, match=r"split\.n_test / split\.n_validation.*fraction"):
        get_stage("split")(spark, cfg("split.on_small_intersection=error"))
    with pytest.warns(UserWarning, match="share too few concepts"):
        report = get_stage("split")(spark, cfg())
    pair = report["pairs"]["de-en"]
    assert pair["intersection"] == 300 and pair["test"] + pair["validation"] <= 150
    assert pair["test"] >= 70 and pair["validation"] >= 70  # the 1:1 ratio, about 75 + 75
    manifest = read_manifest(spark, SPLITS, f"{tmp_path}/out/splits")
    assert "split.max_heldout_fraction" in manifest["report"]["warnings"][0]

    vocab = get_stage("vocabulary")(spark, cfg())
    assert sorted(vocab["vocabulary_size"]) == ["de", "en"]
    (warning,) = vocab["warnings"]
    assert "language 'fr' is dropped" in warning and "features.min_df" in warning
    manifest = read_manifest(spark, VOCABULARY, f"{tmp_path}/out/vocabulary")
    assert manifest["report"]["warnings"] == [warning]
    with pytest.raises(InputDataError, match="'fr' is dropped"):
        get_stage("vocabulary")(spark, cfg("features.on_dropped_language=error"))


def test_embed_job_language_codes_and_unknown_languages(spark, cli_model, tmp_path):
    """The Spark job reads 'EN' as the API does, and warns about (or refuses) languages
    the model lacks and documents that embed as zero vectors."""
    from pipeline.config import load_config
    from pipeline.errors import InputDataError
    from pipeline.io.datasets import read_dataset, read_manifest
    from pipeline.io.schemas import EMBEDDINGS
    from pipeline.model import Cr5Model
    from pipeline.stages import get_stage

    rows = [
        {"doc_id": "a", "lang": "EN", "text": "cat dog"},
        {"doc_id": "b", "lang": " en", "text": "nothing known"},
        {"doc_id": "c", "lang": "xx", "text": "unknown language"},
    ]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def cfg(*extra):
        return load_config(
            [REPO / "conf/local.yaml"],
            [
                f"paths.root={tmp_path}/out",
                f"paths.model={cli_model}",
                f"embed.input={src}",
                "spark.shuffle_partitions=2",
                *extra,
            ],
        )

    report = get_stage("embed")(spark, cfg())
    unknown, zeros = report["warnings"]
    assert "xx (1)" in unknown and "1 document(s) have no word" in zeros
    path = cfg().paths.dataset("embeddings")
    assert read_manifest(spark, EMBEDDINGS, path)["report"]["warnings"] == report["warnings"]
    got = {r["doc_id"]: r for r in read_dataset(spark, EMBEDDINGS, path).collect()}
    assert sorted(got) == ["a", "b"] and got["a"]["lang"] == "en"
    api = Cr5Model.load(cli_model).embed(["cat dog"], "EN")[0]
    assert list(got["a"]["vector"]) == api.tolist()
    with pytest.raises(InputDataError, match="embed.on_unknown_language=warn"):
        get_stage("embed")(spark, cfg("embed.on_unknown_language=error"))


def test_manifest_paths_relative_to_the_root(tmp_path, monkeypatch):
    from pipeline.io.locations import from_manifest, same_location, to_manifest

    monkeypatch.chdir(tmp_path)
    assert to_manifest("./out/splits", "./out") == "<paths.root>/splits"
    assert to_manifest(f"{tmp_path}/out/splits", "out") == "<paths.root>/splits"
    assert to_manifest("/elsewhere/held.parquet", "./out") == "/elsewhere/held.parquet"
    assert to_manifest("hdfs://nn/runs/1/splits", "hdfs://nn/runs/1/") == "<paths.root>/splits"
    assert to_manifest(None, "./out") is None
    assert from_manifest("<paths.root>/splits", "/new/root/") == "/new/root/splits"
    assert same_location("<paths.root>/splits", "/new/root/splits", "/new/root")
    assert not same_location("<paths.root>/splits", "/new/root/other", "/new/root")
    # Values written before the rule: relative to the working directory, or absolute.
    assert same_location("./out/splits", f"{tmp_path}/out/splits", "./out")
    assert same_location(None, None, "./out") and not same_location(None, "./x", "./out")


def test_protocol_through_hadoop_filesystem(spark, tmp_path):
    """The route HDFS and other stores take (HadoopFS's create_new, touch, mtime,
    list_files), exercised on the local disk through Hadoop's LocalFileSystem."""
    from pipeline.io.hadoop import HadoopFS
    from pipeline.io.publish import data_files, publish

    path = f"{tmp_path}/documents"
    fs = HadoopFS(spark, path)
    assert fs.create_new(f"{tmp_path}/x", "1") and not fs.create_new(f"{tmp_path}/x", "2")
    assert fs.read_text(f"{tmp_path}/x") == "1" and fs.mtime(f"{tmp_path}/x") > 0
    with pytest.raises(FileNotFoundError):
        fs.read_text(f"{tmp_path}/missing")
    for rows in (3, 5):
        with write_lock(fs, path, wait_seconds=0, stale_seconds=60) as lock:
            with (
                pytest.raises(ConcurrentWriteError, match="being written"),
                write_lock(LocalFS(), path, wait_seconds=0, stale_seconds=60),
            ):
                pass

            def write(tmp: str, rows=rows, lock=lock) -> dict:
                fs.mkdirs(f"{tmp}/lang=en")
                fs.write_text(f"{tmp}/lang=en/part-0", "r\n" * rows)
                manifest = {
                    "rows": rows,
                    "files": data_files(fs, tmp),
                    "write_token": lock.owner.token,
                }
                fs.write_text(f"{tmp}/{MANIFEST}", json.dumps(manifest))
                return manifest

            publish(fs, lock, write)
        assert json.loads(fs.read_text(f"{path}/{MANIFEST}"))["files"] == {
            "lang=en/part-0": 2 * rows
        }
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".documents")) == []


def test_a_failed_stage_sweeps_its_datasets_ownerless_temporaries(tmp_path):
    """After a failed stage's session is stopped, the runner removes what a task that was
    still writing recreated in the stage's temporary (the fault suite once found
    ``.embeddings.tmp-…/lang=en/part-…`` after a killed worker); a live writer's temporary
    and other stages' datasets are left alone."""
    from pipeline.config import load_config
    from pipeline.runner import _sweep_leftovers

    cfg = load_config([], [f"paths.root={tmp_path}"])
    orphan = tmp_path / ".embeddings.tmp-dead" / "lang=en"
    orphan.mkdir(parents=True)
    (orphan / "part-1-00001-0.parquet").write_bytes(b"x")
    me = Owner.current()
    live = tmp_path / f".embeddings.tmp-{me.token}"
    live.mkdir()
    (tmp_path / f".embeddings.owner-{me.token}").write_text(me.to_json())
    other = tmp_path / ".tfidf.tmp-dead"  # the tfidf stage's, not embed's
    other.mkdir()
    _sweep_leftovers(cfg, "embed")
    assert not (tmp_path / ".embeddings.tmp-dead").exists()
    assert live.exists() and other.exists()


def test_ingest_wikipedia_sweeps_the_documents_it_writes(tmp_path):
    """``ingest_wikipedia`` writes ``documents`` as ``ingest`` does: a failed run's ownerless
    temporary of it is swept too, and its outputs (Airflow's asset events) name it."""
    from pipeline.config import load_config
    from pipeline.io.schemas import written_by
    from pipeline.runner import _sweep_leftovers

    assert list(written_by("ingest_wikipedia")) == list(written_by("ingest")) == ["documents"]
    assert sorted(written_by("tfidf")) == ["concepts", "tfidf"]
    cfg = load_config([], [f"paths.root={tmp_path}"])
    orphan = tmp_path / ".documents.tmp-dead" / "lang=en"
    orphan.mkdir(parents=True)
    (orphan / "part-1-00001-0.parquet").write_bytes(b"x")
    _sweep_leftovers(cfg, "ingest_wikipedia")
    assert not (tmp_path / ".documents.tmp-dead").exists()
