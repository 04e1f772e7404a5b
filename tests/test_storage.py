"""The storage layer (pipeline/io/storage.py): what the driver writes itself lands where the
datasets do, on any store the session's Hadoop configuration resolves.

The remote store here is ``viewfs://``: a Hadoop mount table onto a temporary directory, set
on the test session's Hadoop configuration. Python's own file API cannot open such a URI (a
``Path`` of it is a relative directory), so every test that passes through it proves the
write went through Hadoop. Object stores (no atomic directory rename) are exercised with the
commit-marker layout on a store whose ``atomic_rename`` is off.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.errors import DamagedModelError, ModelError
from pipeline.io import storage
from pipeline.io.checkpoints import CheckpointDirectory
from pipeline.io.publish import LocalFS
from pipeline.model import Cr5Model, LanguageMap, load_model_files, save_model

TERMS = {"en": ["cat", "dog", "house", "tree"], "de": ["katze", "hund", "haus"]}


def model_maps(seed: int, r: int = 3) -> dict[str, LanguageMap]:
    rng = np.random.default_rng(seed)
    return {
        lang: LanguageMap(
            terms=pa.array(terms),
            idf=rng.uniform(0.5, 2, len(terms)).astype(np.float32),
            df=np.arange(len(terms), 0, -1),
            phi=rng.normal(size=(len(terms), r)).astype(np.float32),
        )
        for lang, terms in TERMS.items()
    }


@pytest.fixture
def viewfs(spark, tmp_path, monkeypatch):
    """``(uri, backing directory)``: ``viewfs://<table>/data`` mounted onto a fresh
    directory through the session's Hadoop configuration; the local cache and scratch
    directories moved under ``tmp_path``."""
    table = f"t{uuid.uuid4().hex[:8]}"
    backing = tmp_path / "store"
    backing.mkdir()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set(f"fs.viewfs.mounttable.{table}.link./data", backing.as_uri())
    monkeypatch.setenv("CR5_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CR5_SCRATCH_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # nothing may land in the working directory
    yield f"viewfs://{table}/data", backing
    leaked = [p.name for p in tmp_path.iterdir() if p.name.startswith("viewfs")]
    assert not leaked, f"written under the working directory: {leaked}"


def files_of(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.endswith(".crc")
    }


# --------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    ("path", "local"),
    [
        ("/x/y", True),
        ("./out", True),
        ("file:///x", True),
        ("file:/x", True),
        ("hdfs:///data", False),
        ("s3a://b/k", False),
        ("viewfs://c/d", False),
    ],
)
def test_is_local(path, local):
    assert storage.is_local(path) is local


def test_local_path_and_join():
    assert storage.local_path("file:///x/y") == "/x/y"
    assert storage.local_path("file:/x/y") == "/x/y"
    assert storage.join("s3a://b/root/", "model", "model.json") == "s3a://b/root/model/model.json"


# --------------------------------------------------------------------------- viewfs


def test_model_round_trip_through_hadoop(spark, viewfs):
    uri, backing = viewfs
    maps = model_maps(0)
    save_model(f"{uri}/out/model", maps, {"r": 3, "lam": 1.0})
    on_store = backing / "out" / "model"
    assert (on_store / "model.json").is_file()
    assert sorted(p.name for p in (backing / "out").iterdir()) == ["model"]  # no leftovers

    meta, loaded = load_model_files(f"{uri}/out/model")
    assert meta["languages"] == ["en", "de"]
    for lang, lm in maps.items():
        np.testing.assert_array_equal(loaded[lang].phi, lm.phi)
    # read from a local copy under the cache, equal to the store's files
    model = Cr5Model.load(f"{uri}/out/model")
    assert Path(model.path).is_relative_to(storage.cache_root())
    assert files_of(Path(model.path)) == files_of(on_store) | {
        ".complete": (Path(model.path) / ".complete").read_bytes()
    }


def test_a_retrained_model_replaces_the_cached_one(spark, viewfs):
    uri, _ = viewfs
    save_model(f"{uri}/m", model_maps(0), {"r": 3, "lam": 1.0})
    first = Cr5Model.load(f"{uri}/m")
    save_model(f"{uri}/m", model_maps(1), {"r": 3, "lam": 2.0})
    second = Cr5Model.load(f"{uri}/m")
    assert first.path != second.path
    assert second.meta["lam"] == 2.0
    np.testing.assert_array_equal(second._map("en").phi, model_maps(1)["en"].phi)


def test_damaged_store_file_is_refused_with_its_name(spark, viewfs):
    uri, backing = viewfs
    save_model(f"{uri}/m", model_maps(0), {"r": 3, "lam": 1.0})
    phi = backing / "m" / "languages" / "en" / "phi.npy"
    data = bytearray(phi.read_bytes())
    data[-1] ^= 0xFF  # same size, other content
    phi.write_bytes(bytes(data))
    for crc in phi.parent.glob(".*.crc"):  # Hadoop's local checksum would catch it first
        crc.unlink()
    with pytest.raises(DamagedModelError, match="phi.npy"):
        Cr5Model.load(f"{uri}/m")
    assert not list(storage.cache_root().glob("[!.]*"))  # no entry kept for a bad copy


def test_missing_remote_model_names_the_fix(spark, viewfs):
    uri, _ = viewfs
    with pytest.raises(ModelError, match="does not exist"):
        Cr5Model.load(f"{uri}/nothing")


def test_write_file_replaces_whole_files(spark, viewfs):
    uri, backing = viewfs
    where = storage.write_file(f"{uri}/reports/a.json", '{"v": 1}')
    assert where.startswith("viewfs://")
    storage.write_file(f"{uri}/reports/a.json", b'{"v": 2}')
    assert json.loads((backing / "reports" / "a.json").read_text()) == {"v": 2}
    assert [p.name for p in (backing / "reports").iterdir() if not p.name.endswith(".crc")] == [
        "a.json"
    ]


def test_hadoop_store_knows_viewfs_onto_a_local_disk_renames_atomically(spark, viewfs):
    uri, _ = viewfs
    store = storage.storage_for(f"{uri}/x", spark)
    assert type(store).__name__ == "HadoopFS" and store.atomic_rename


def test_checkpoints_on_a_remote_store_resume(spark, viewfs):
    uri, backing = viewfs
    files = storage.remote_storage(f"{uri}/ck", spark)
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    store = CheckpointDirectory(f"{uri}/ck", {"n": 3}, files=files)
    store.save("state", {"a": a}, {"it": 1})
    store.save("state", {"a": a * 2}, {"it": 2})
    again = CheckpointDirectory(f"{uri}/ck", {"n": 3}, files=storage.remote_storage(f"{uri}/ck"))
    arrays, meta = again.load("state")
    np.testing.assert_array_equal(arrays["a"], a * 2)
    assert meta == {"it": 2}
    names = sorted(p.name for p in (backing / "ck").iterdir() if not p.name.endswith(".crc"))
    assert names == ["manifest.json", "state-000001", "state.json"]  # the older state pruned


def test_a_writer_killed_between_its_renames_leaves_the_model_readable(spark, viewfs):
    """The previous version moved aside, the new one not yet in place, the writer gone: a
    reader puts the previous version back (its owner record is gone)."""
    uri, backing = viewfs
    save_model(f"{uri}/m", model_maps(0), {"r": 3, "lam": 1.0})
    before = files_of(backing / "m")
    os.rename(backing / "m", backing / ".m.old-deadbeef0000")
    model = Cr5Model.load(f"{uri}/m")
    assert model.meta["lam"] == 1.0
    assert files_of(backing / "m") == before


# --------------------------------------------------------------------------- object stores


class ObjectStoreLike(LocalFS):
    """A local disk that says its directory rename is not atomic (an object store's case)."""

    atomic_rename = False


def test_commit_marker_layout_when_rename_is_not_atomic(tmp_path):
    store, final = ObjectStoreLike(), str(tmp_path / "index")
    versions = []
    for i in range(3):
        src = tmp_path / f"src{i}"
        src.mkdir()
        (src / "_manifest.json").write_text(json.dumps({"v": i}))
        versions.append(storage.publish_directory(store, src, final, token=f"tok{i}"))
        assert storage.resolve_directory(store, final) == versions[-1]
    kept = sorted(p.name for p in Path(final).iterdir())
    # the marker, the newest version and the one before (a reader may still use it)
    assert kept == sorted([storage.COMMIT_MARKER, Path(versions[2]).name, Path(versions[1]).name])
    got = storage.local_directory(final, "_manifest.json")
    assert json.loads((got / "_manifest.json").read_text()) == {"v": 2}


def test_upload_killed_midway_leaves_the_committed_version(tmp_path):
    """A writer that dies while uploading a version never wrote the marker: readers keep
    resolving the previous version, whole."""

    class Dies(ObjectStoreLike):
        def put(self, local, p):
            names = sorted(os.listdir(local))
            os.makedirs(p)
            (Path(p) / names[0]).write_bytes((Path(local) / names[0]).read_bytes())
            raise KeyboardInterrupt  # killed after the first file

    final = str(tmp_path / "m")
    first = tmp_path / "a"
    first.mkdir()
    for name in ("model.json", "x.npy"):
        (first / name).write_text(f"old {name}")
    committed = storage.publish_directory(ObjectStoreLike(), first, final, token="t1")
    second = tmp_path / "b"
    second.mkdir()
    for name in ("model.json", "x.npy"):
        (second / name).write_text(f"new {name}")
    with pytest.raises(KeyboardInterrupt):
        storage.publish_directory(Dies(), second, final, token="t2")
    assert storage.resolve_directory(ObjectStoreLike(), final) == committed
    assert (Path(committed) / "x.npy").read_text() == "old x.npy"


def test_a_failed_write_leaves_the_previous_local_model_and_no_leftovers(tmp_path):
    save_model(tmp_path / "m", model_maps(0), {"r": 3, "lam": 1.0})
    before = files_of(tmp_path / "m")
    with pytest.raises(RuntimeError), storage.staged_directory(tmp_path / "m") as tmp:
        (tmp / "model.json").write_text("half")
        raise RuntimeError("killed")
    assert files_of(tmp_path / "m") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_parquet_datasets_on_a_store_without_atomic_rename_warn_once(
    spark, viewfs, monkeypatch, caplog
):
    """A Parquet dataset's commit is a directory rename, a copy on object stores: the
    writer says so once, naming paths.format=delta, and still writes the dataset."""
    from pipeline.io import datasets
    from pipeline.io.hadoop import HadoopFS
    from pipeline.io.schemas import SPLITS

    uri, backing = viewfs
    monkeypatch.setattr(HadoopFS, "atomic_rename", property(lambda self: False))
    monkeypatch.setattr(datasets, "_WARNED_STORES", set())
    df = spark.createDataFrame(
        [("c1", "de-en", "test", 0, 7), ("c2", "de-en", "validation", 1, 7)],
        "concept_id string, pair string, role string, priority long, seed long",
    )
    with caplog.at_level("WARNING", logger="pipeline.io.datasets"):
        for name in ("a", "b"):
            manifest = datasets.write_dataset(spark, df, SPLITS, f"{uri}/{name}")
            assert manifest["rows"] == 2
    warned = [r for r in caplog.records if "paths.format=delta" in r.getMessage()]
    assert len(warned) == 1 and "viewfs://" in warned[0].getMessage()
    assert (backing / "b" / "_manifest.json").is_file()


# --------------------------------------------------------------------------- the contract


@pytest.fixture(params=["local", "hadoop", "arrow"])
def store(request, tmp_path):
    """``(Storage, base path in its syntax, backing local directory)`` for each backend:
    the local disk, the session's Hadoop FileSystem (viewfs://), pyarrow.fs (file://)."""
    base = tmp_path / "s"
    base.mkdir()
    if request.param == "local":
        return LocalFS(), str(base), base
    if request.param == "arrow":
        return storage.ArrowFS(base.as_uri()), base.as_uri(), base
    spark = request.getfixturevalue("spark")
    table = f"c{uuid.uuid4().hex[:8]}"
    spark.sparkContext._jsc.hadoopConfiguration().set(
        f"fs.viewfs.mounttable.{table}.link./data", base.as_uri()
    )
    uri = f"viewfs://{table}/data"
    return storage.storage_for(uri, spark), uri, base


def test_storage_contract(store, tmp_path):
    fs, base, backing = store
    d = storage.join(base, "d")
    fs.mkdirs(d)
    assert fs.exists(d) and not fs.exists(storage.join(base, "nothing"))
    f = storage.join(d, "a.txt")
    fs.replace_bytes(f, b"one")
    fs.replace_bytes(f, b"two")  # replaced whole
    assert fs.read_bytes(f) == b"two" and fs.read_text(f) == "two"
    assert fs.create_new(storage.join(d, "b"), "x") and not fs.create_new(storage.join(d, "b"), "y")
    assert fs.read_text(storage.join(d, "b")) == "x"
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "c.bin").write_bytes(b"\0" * 100)
    (src / "top.json").write_text("{}")
    fs.put(str(src), storage.join(base, "up"))
    assert fs.list_files(storage.join(base, "up")) == {"sub/c.bin": 100, "top.json": 2}
    with pytest.raises(FileExistsError):
        fs.put(str(src), storage.join(base, "up"))
    fs.get(storage.join(base, "up", "sub", "c.bin"), str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == b"\0" * 100
    fs.rename(storage.join(base, "up"), storage.join(base, "moved"))
    assert sorted(n for n in fs.list_names(base) if not n.endswith(".crc")) == ["d", "moved"]
    with pytest.raises(FileExistsError):
        fs.rename(storage.join(base, "moved"), d)
    assert fs.mtime(f) is not None and fs.mtime(storage.join(base, "nothing")) is None
    fs.delete(storage.join(base, "moved"))
    assert not fs.exists(storage.join(base, "moved"))
    assert (backing / "d" / "a.txt").read_bytes() == b"two"


def test_publish_and_read_a_directory_on_every_store(store, tmp_path, monkeypatch):
    """The writer's commit and the reader's copy agree on every backend (a rename commit or,
    where rename is not atomic, the marker layout)."""
    fs, base, _ = store
    monkeypatch.setenv("CR5_CACHE_DIR", str(tmp_path / "cache"))
    final = storage.join(base, "model")
    for version in (1, 2):
        src = tmp_path / f"v{version}"
        src.mkdir()
        payload = {"files": {"x.npy": {"bytes": 3}}, "v": version}
        (src / "model.json").write_text(json.dumps(payload))
        (src / "x.npy").write_bytes(b"abc")
        storage.publish_directory(fs, src, final, token=f"tok{version}")
    if isinstance(fs, LocalFS):
        got = storage.local_directory(final, "model.json")
    else:
        monkeypatch.setattr(storage, "storage_for", lambda path, spark=None: fs)
        got = storage.local_directory(final, "model.json")
    assert json.loads((got / "model.json").read_text())["v"] == 2
    assert (got / "x.npy").read_bytes() == b"abc"


def test_a_uri_only_hadoop_resolves_needs_a_session():
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="inside a Spark job"):
        storage.ArrowFS("viewfs://cluster/data/model")
