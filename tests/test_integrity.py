"""Integrity of published data: sizes and checksums recorded by writers, checked by readers.

The unit tests check :mod:`pipeline.io.integrity` on small directories. The module's chain
(ingest -> split -> vocabulary -> tfidf -> train -> embed -> evaluate, in-process on 160
concepts of the bundled sample in two languages) then gives one dataset of every kind and
a model: each gets a truncated and a bit-flipped file, and the stage that reads it must
stop with exit 2 and one paragraph naming the dataset, the file, the stage that writes it
and the command that rebuilds it, leaving every published file byte for byte as it was.
Datasets no stage reads (``concepts``, ``embeddings``, ``evaluation``) are checked by
``python -m pipeline verify``, which every case also runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline import failures
from pipeline.errors import DamagedDatasetError
from pipeline.io import integrity
from tests.conftest import REPO, SAMPLE

PROFILES = [str(REPO / "conf" / "local.yaml"), str(REPO / "conf" / "short-docs.yaml")]


# --------------------------------------------------------------------------- unit


def _dataset(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "ds"
    (root / "lang=en").mkdir(parents=True)
    (root / "lang=en" / "part-0.parquet").write_bytes(b"PAR1" + bytes(range(200)) + b"PAR1")
    (root / "lang=en" / ".part-0.parquet.crc").write_bytes(b"crc")
    (root / "_SUCCESS").write_bytes(b"")
    files = {"lang=en/part-0.parquet": 208, "lang=en/.part-0.parquet.crc": 3, "_SUCCESS": 0}
    manifest = {
        "dataset": "tfidf",
        "producer": "tfidf",
        "files": files,
        "checksums": integrity.file_checksums(str(root), files),
    }
    integrity.seal(manifest)
    (root / "_manifest.json").write_text(json.dumps(manifest))
    return root, manifest


def test_checksums_are_sha256_of_the_files(tmp_path):
    root, manifest = _dataset(tmp_path)
    for rel, value in manifest["checksums"].items():
        assert value == "sha256:" + hashlib.sha256((root / rel).read_bytes()).hexdigest()
    assert integrity.verify_manifest_seal(manifest)
    assert integrity.verify_dataset(str(root), manifest, dataset="tfidf", producer="tfidf")


@pytest.mark.parametrize(
    ("damage", "file", "what"),
    [
        ("truncate", "lang=en/part-0.parquet", "has 100 bytes where its manifest recorded 208"),
        ("flip", "lang=en/part-0.parquet", "fails its sha256 check"),
        ("remove", "lang=en/part-0.parquet", "is missing"),
        ("extra", "lang=en/part-1.parquet", "is not one of the files its manifest lists"),
        ("manifest", "_manifest.json", "fails its checksum"),
    ],
)
def test_each_kind_of_damage_is_named(tmp_path, damage, file, what):
    root, manifest = _dataset(tmp_path)
    target = root / file
    if damage == "truncate":
        os.truncate(target, 100)
    elif damage == "flip":
        data = bytearray(target.read_bytes())
        data[100] ^= 0x01
        target.write_bytes(bytes(data))
    elif damage == "remove":
        target.unlink()
    elif damage == "extra":
        target.write_bytes(b"PAR1")
    else:
        manifest = {**manifest, "files": {**manifest["files"], "_SUCCESS": 1}}
    failures.set_invocation("jobs/train.py", ["conf/local.yaml"], ["paths.root=/x"])
    with pytest.raises(DamagedDatasetError) as info:
        integrity.verify_dataset(str(root), manifest, dataset="tfidf", producer="tfidf")
    text = str(info.value)
    assert f"dataset 'tfidf' at {root} is damaged: its file {file} {what}" in text, text
    assert "python jobs/tfidf.py --conf conf/local.yaml --set paths.root=/x" in text
    assert "\n" not in text


def test_hidden_leftovers_are_not_damage_and_checksums_follow_the_limit(tmp_path):
    root, manifest = _dataset(tmp_path)
    (root / ".lang=en.swp").write_bytes(b"x")  # hidden: neither Spark nor pyarrow reads it
    (root / "lang=en" / ".part-0.parquet.crc").unlink()  # as `hdfs dfs -put` leaves them
    (root / "_SUCCESS").unlink()
    data = bytearray((root / "lang=en" / "part-0.parquet").read_bytes())
    data[50] ^= 0xFF
    (root / "lang=en" / "part-0.parquet").write_bytes(bytes(data))
    try:
        integrity.configure(checksum_max_bytes=100)  # the dataset has 211 bytes: sizes only
        assert not integrity.verify_dataset(str(root), manifest, dataset="t", producer="t")
        with pytest.raises(DamagedDatasetError, match="sha256"):  # on request: checksums
            integrity.verify_dataset(str(root), manifest, dataset="t", producer="t", checksums=True)
        integrity.configure(checksum_max_bytes=1000)
        with pytest.raises(DamagedDatasetError, match="sha256"):
            integrity.verify_dataset(str(root), manifest, dataset="t", producer="t")
    finally:
        integrity.configure(checksum_max_bytes=1 << 30)


def test_word_vectors_carry_and_check_their_checksums(tmp_path):
    import numpy as np

    from pipeline.wordmap.store import WordVectors, read_word_vectors, write_word_vectors

    wv = WordVectors(["a", "b"], np.array([3, 1]), np.arange(8, dtype=np.float32).reshape(2, 4))
    write_word_vectors(tmp_path, "en", wv, {"method": "test"})
    assert read_word_vectors(tmp_path, "en").words == ["a", "b"]
    vectors = tmp_path / "en" / "vectors.npy"
    data = bytearray(vectors.read_bytes())
    data[-1] ^= 0x01  # one bit of the last float
    vectors.write_bytes(bytes(data))
    with pytest.raises(DamagedDatasetError) as info:
        read_word_vectors(tmp_path, "en")
    assert "dataset 'word_vectors/en'" in str(info.value)
    assert "its file vectors.npy fails its sha256 check" in str(info.value)
    assert "python jobs/word_vectors.py" in str(info.value)


# --------------------------------------------------------------------------- the chain


def _run(capsys, stages: str, root: Path, *extra: str) -> tuple[int, str]:
    from pipeline.runner import main

    args = ["--stages", stages]
    for p in PROFILES:
        args += ["--conf", p]
    args += [
        "--set", f"paths.root={root}",
        "--set", "spark.shuffle_partitions=2",
        "--set", "features.heldout_concepts=splits",
        "--set", "split.n_test=20",
        "--set", "split.n_validation=20",
        "--set", "train.r=8",
        "--set", "train.checkpoint_dir=",
        "--set", "evaluate.lambda_grid=[1.0]",
        "--set", "evaluate.methods=[]",
    ]  # fmt: skip
    for item in extra:
        args += ["--set", item]
    code = main(None, args)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def chain(spark, tmp_path_factory):
    """Every dataset kind and a model, written by the real stages (in-process)."""
    base = tmp_path_factory.mktemp("integrity")
    table = pq.read_table(SAMPLE)
    table = table.filter(pc.is_in(table.column("lang"), pa.array(["en", "de"])))
    concepts = sorted(set(table.column("concept_id").to_pylist()))[::10][:160]
    table = table.filter(pc.is_in(table.column("concept_id"), pa.array(concepts)))
    corpus = base / "corpus.parquet"
    pq.write_table(table, corpus)
    root = base / "out"
    from pipeline.runner import main

    args = ["--stages", "ingest,split,vocabulary,tfidf,train,embed,evaluate"]
    for p in PROFILES:
        args += ["--conf", p]
    args += [
        "--set", f"paths.root={root}", "--set", f"ingest.input={corpus}",
        "--set", "spark.shuffle_partitions=2", "--set", "features.heldout_concepts=splits",
        "--set", "split.n_test=20", "--set", "split.n_validation=20", "--set", "train.r=8",
        "--set", "train.checkpoint_dir=", "--set", "evaluate.lambda_grid=[1.0]",
        "--set", "evaluate.methods=[]",
    ]  # fmt: skip
    assert main(None, args) == 0
    return root


def _snapshot(root: Path) -> dict[str, str]:
    """SHA-256 of every published file under ``root`` (run logs aside)."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not rel.startswith(("logs/", "reports/")):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_every_manifest_lists_its_files_with_sizes_and_checksums(chain):
    for name in ("documents", "splits", "vocabulary", "tfidf", "concepts", "embeddings"):
        manifest = json.loads((chain / name / "_manifest.json").read_text())
        assert integrity.verify_manifest_seal(manifest), name
        on_disk = {
            p.relative_to(chain / name).as_posix(): p
            for p in (chain / name).rglob("*")
            if p.is_file() and p.name != "_manifest.json"
        }
        assert set(manifest["files"]) == set(manifest["checksums"]) == set(on_disk), name
        for rel, path in on_disk.items():
            assert manifest["files"][rel] == path.stat().st_size
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            assert manifest["checksums"][rel] == f"sha256:{digest}", (name, rel)
    model = json.loads((chain / "model" / "model.json").read_text())
    for rel, info in model["files"].items():
        data = (chain / "model" / rel).read_bytes()
        assert info == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _largest(directory: Path, suffix: str) -> Path:
    files = [p for p in directory.rglob(f"*{suffix}") if not p.name.startswith(".")]
    return max(files, key=lambda p: p.stat().st_size)


# (dataset or model, the file to damage, the stage that reads it (None: only `verify`),
#  what that stage publishes, the stage that writes the damaged data)
CASES = [
    ("documents", ".parquet", "vocabulary", ["vocabulary"], "ingest"),
    ("splits", ".parquet", "vocabulary", ["vocabulary"], "split"),
    ("vocabulary", ".parquet", "tfidf", ["tfidf", "concepts"], "vocabulary"),
    ("tfidf", ".parquet", "train", ["model"], "tfidf"),
    ("concepts", ".parquet", None, [], "tfidf"),
    ("model", "phi.npy", "embed", ["embeddings"], "train"),
    ("embeddings", ".parquet", None, [], "embed"),
    ("evaluation", ".parquet", None, [], "evaluate"),
]


@pytest.mark.parametrize("damage", ["truncated", "bit-flipped"])
@pytest.mark.parametrize(
    ("name", "suffix", "reader", "outputs", "producer"), CASES, ids=[c[0] for c in CASES]
)
def test_a_damaged_dataset_stops_its_reader_and_nothing_is_replaced(
    capsys, chain, name, suffix, reader, outputs, producer, damage
):
    target = _largest(chain / name, suffix)
    rel = target.relative_to(chain / name).as_posix()
    original = target.read_bytes()
    before = _snapshot(chain)
    if damage == "truncated":
        target.write_bytes(original[: len(original) // 2])
    else:
        flipped = bytearray(original)
        flipped[len(flipped) * 2 // 3] ^= 0x04
        target.write_bytes(bytes(flipped))
    try:
        if reader is not None:
            code, err = _run(capsys, reader, chain)
            assert code == 2, err
            message = err[err.index("error: ") :]
            kind = "model" if name == "model" else f"dataset {name!r}"
            assert f"{kind} at {chain / name} is damaged: its file {rel}" in message, message
            assert f"stage that writes it, {producer}: python jobs/{producer}.py" in message
            assert f"--set paths.root={chain}" in message
            assert "Traceback" not in err and message.count("\n") == 1, err
        # python -m pipeline verify: the run root, every dataset and model under it
        from pipeline.cli import main as cli

        assert cli(["verify", str(chain)]) == 2
        out, err = capsys.readouterr()
        assert f"at {chain / name} is damaged: its file {rel}" in err, err
        assert err.count("error: ") == 1 and "Traceback" not in err, err
        assert out.count("ok: ") >= 7 and name not in {
            line.split("'")[1] for line in out.splitlines() if line.startswith("ok: dataset")
        }
        after = _snapshot(chain)
    finally:
        target.write_bytes(original)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed == {f"{name}/{rel}"}, changed  # the damaged file, nothing else
    for out_name in outputs:
        assert not list(chain.glob(f".{out_name}.*")), "leftovers of an aborted write"


def test_the_rebuild_command_repairs_a_damaged_dataset(capsys, chain, tmp_path):
    root = tmp_path / "out"
    shutil.copytree(chain, root)
    target = _largest(root / "vocabulary", ".parquet")
    os.truncate(target, 10)
    code, err = _run(capsys, "tfidf", root)
    assert code == 2 and "python jobs/vocabulary.py" in err
    assert _run(capsys, "vocabulary,tfidf", root)[0] == 0  # what the message says to run
    from pipeline.cli import main as cli

    assert cli(["verify", str(root)]) == 0


def test_above_the_checksum_limit_spark_s_own_checksums_catch_a_flipped_bit(capsys, chain):
    """With checksums off (paths.checksum_max_bytes=0) the reader checks sizes only, and a
    flipped bit reaches Spark's reader, whose Hadoop checksums (the .crc files beside the
    data) refuse it: the failure is still the damaged-dataset paragraph."""
    target = _largest(chain / "documents", ".parquet")
    rel = target.relative_to(chain / "documents").as_posix()
    original = target.read_bytes()
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0x04
    target.write_bytes(bytes(flipped))
    try:
        code, err = _run(capsys, "vocabulary", chain, "paths.checksum_max_bytes=0")
    finally:
        target.write_bytes(original)
        integrity.configure(checksum_max_bytes=1 << 30)
    assert code == 2, err
    message = err[err.index("error: ") :]
    assert f"dataset 'documents' at {chain / 'documents'} is damaged: its file {rel}" in message
    assert "python jobs/ingest.py" in message and message.count("\n") == 1
