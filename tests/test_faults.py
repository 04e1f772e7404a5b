"""Fault injection: concurrent writers, kill -9 mid-write, read-only outputs, bad inputs.

Covered elsewhere and not repeated here: kill -9 of a real ``jobs/ingest.py`` mid-write
(tests/test_atomic_writes.py) and kill -9 during training followed by a resume that
gives the same model as an uninterrupted run (tests/test_training.py,
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
    code, (out, err) = nxt.wait(timeout=30), nxt.communicate()
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
    with pytest.raises(ConcurrentWriteError, match="pid 4242 on host another-host"):
        with write_lock(fs, str(path), wait_seconds=0.3, stale_seconds=60):
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
