"""The memory plan: sizes, the local heap rule, the train stage's settings, and the exit-2
paragraph before any Spark work when a fit cannot fit."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import pipeline.memory as memory
from pipeline.backends.spark_resident import (
    FILL_BYTES_PER_NNZ,
    kept_languages,
    resident_bytes,
)
from pipeline.config import load_config
from pipeline.linalg.params import resolve_block_size
from pipeline.memory import (
    GiB,
    Machine,
    MemoryPlanError,
    MiB,
    SparkMemory,
    TrainSizes,
    format_size,
    local_heap,
    local_slots,
    parse_size,
    plan_train,
    spark_memory,
)

#: The 1M-document Wikipedia-shaped corpus of bench/ (tfidf manifest figures).
WIKI_1M = TrainSizes(
    nnz={"en": 83_412_115, "it": 62_987_024, "vi": 28_869_508, "da": 21_542_827},
    docs={"en": 423_545, "it": 315_341, "vi": 143_050, "da": 106_348},
    terms={"en": 200_000, "it": 200_000, "vi": 200_000, "da": 200_000},
    concepts=435_661,
)


def _cfg(*sets: str):
    return load_config([], ["train.backend=spark", "train.r=100", *sets])


def _local(gib: float, heap: int | None = None, slots: int = 2) -> SparkMemory:
    """A local session as ``spark.driver_memory: auto`` sizes it for a WIKI_1M fit."""
    machine = Machine(memory=int(gib * GiB), cores=slots)
    if heap is None:
        heap = local_heap(machine, memory.train_python_need(WIKI_1M, _cfg().train, slots))
    return SparkMemory.local_mode(machine, heap, slots)


def test_sizes_parse_and_format_as_spark_does():
    assert parse_size("4g") == 4 * GiB and parse_size("512m") == 512 * MiB
    assert parse_size("1.5GB") == int(1.5 * GiB) and parse_size("2048", default_unit="m") == 2 * GiB
    assert format_size(10 * GiB + 5) == "10g" and format_size(700 * MiB) == "700m"
    with pytest.raises(ValueError, match="not a memory size"):
        parse_size("lots")


def test_local_slots_follow_the_master():
    assert local_slots("local", 8) == 1
    assert local_slots("local[2]", 8) == 2
    assert local_slots("local[*]", 8) == 8
    assert local_slots("local[3,2]", 8) == 3


def test_local_heap_rule():
    """Half of the usable memory without a known need; what the need leaves, within
    [2g, half]; whole GiB."""
    m24 = Machine(memory=24 * GiB, cores=2)
    assert m24.usable == int(0.85 * 24 * GiB)
    assert local_heap(m24) == 10 * GiB  # half of 20.4 GB, rounded down
    assert local_heap(m24, python_need=4 * GiB) == 10 * GiB  # the cap binds
    leaves = (m24.usable - 14 * GiB - memory.JVM_NONHEAP) / memory.JVM_HEAP_FACTOR
    assert local_heap(m24, python_need=14 * GiB) == int(leaves) // GiB * GiB
    assert local_heap(m24, python_need=30 * GiB) == 2 * GiB  # never below the floor
    assert local_heap(Machine(memory=512 * GiB, cores=64)) == 31 * GiB  # compressed oops
    # other programs' memory: what is available now bounds the usable share
    busy = Machine(memory=24 * GiB, cores=2, available=9 * GiB)
    assert busy.usable == 9 * GiB and local_heap(busy) == 4 * GiB


def test_a_roomy_machine_fuses_and_keeps_every_language():
    cfg = _cfg()
    plan = plan_train(WIKI_1M, cfg.train, _local(24))
    assert plan.fused == ["en", "it", "vi", "da"] and plan.resident == plan.fused
    opts = plan.backend_options(WIKI_1M, cfg.train)
    assert opts["solve_in_task_max_nnz"] == WIKI_1M.nnz["en"]
    # the backend's own choice from the budget is the plan's
    each = {g: (WIKI_1M.nnz[g], WIKI_1M.docs[g]) for g in plan.fused}
    assert kept_languages(each, opts["resident_memory_mb"] * MiB, 4) == set(plan.resident)
    # driver and two workers fit what the JVM leaves
    assert sum(plan.driver.values()) <= plan.driver_available
    assert sum(plan.worker.values()) <= plan.worker_available


@pytest.fixture
def no_room_to_spill(monkeypatch):
    """The local scratch directory has no room for the eigensolver's files: the plan keeps
    them in memory and falls back to narrowing the basis or unfusing languages."""
    import pipeline.memory.plan as plan

    monkeypatch.setattr(plan, "_spill_room", lambda sizes, t: False)


@pytest.fixture
def room_to_spill(monkeypatch):
    """The local scratch directory has room for the eigensolver's files (whatever this
    machine's disk)."""
    import pipeline.memory.plan as plan

    monkeypatch.setattr(plan, "_spill_room", lambda sizes, t: True)


def test_less_memory_keeps_fewer_languages_and_then_fuses_fewer(no_room_to_spill):
    cfg = _cfg()
    roomy, tight = (
        plan_train(WIKI_1M, cfg.train, _local(24)),
        plan_train(WIKI_1M, cfg.train, _local(12)),
    )
    assert len(tight.resident) < len(roomy.resident)
    assert sum(tight.worker.values()) <= tight.worker_available
    each = {g: (WIKI_1M.nnz[g], WIKI_1M.docs[g]) for g in tight.fused}
    budget = tight.backend_options(WIKI_1M, cfg.train)["resident_memory_mb"] * MiB
    assert kept_languages(each, budget, 4) == set(tight.resident)
    # a machine whose workers cannot read English fuses only the smaller languages
    small = plan_train(WIKI_1M, cfg.train, _local(9.5))
    assert "en" not in small.fused and small.fused
    assert small.driver["CG vectors"] > 0  # English's CG runs on the driver
    # ... and says so, with what English needs and what would fuse it
    warning = small.unfused_warning(WIKI_1M, cfg.train)
    unfused = ", ".join(g for g in ("en", "it", "vi", "da") if g not in small.fused)
    assert warning.startswith(f"{unfused} will run one Spark job per CG iteration")
    need = sum(memory.train_worker_need(WIKI_1M, cfg.train, [], "en").values())
    assert memory.gb(need) in warning and "spark.master=local[1]" in warning
    assert roomy.unfused_warning(WIKI_1M, cfg.train) is None
    # a fused limit the user set is the user's choice: no warning
    chosen = _cfg("train.solve_in_task_max_nnz=30000000")
    assert (
        plan_train(WIKI_1M, chosen.train, _local(24)).unfused_warning(WIKI_1M, chosen.train) is None
    )


#: The 2M-document corpus of bench/ (bench/results/chain_2M_text.json's train log).
WIKI_2M = TrainSizes(
    nnz={"en": 167_634_583, "it": 126_581_905, "vi": 58_056_759, "da": 43_485_064},
    docs={"en": 851_545, "it": 633_467, "vi": 288_068, "da": 215_186},
    terms={"en": 200_000, "it": 200_000, "vi": 200_000, "da": 200_000},
    concepts=875_751,
)


def _local_for(sizes: TrainSizes, cfg, gib: float = 23.5, slots: int = 2) -> SparkMemory:
    """A local session as ``spark.driver_memory: auto`` sizes it for a fit of ``sizes``."""
    machine = Machine(memory=int(gib * GiB), cores=slots)
    need = memory.train_python_need(sizes, cfg.train, slots)
    heap = local_heap(machine, need, memory.train_jvm_need(sizes, cfg.train))
    return SparkMemory.local_mode(machine, heap, slots)


def _with_basis(cfg, m: int):
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_basis=m))


def test_a_float32_basis_fuses_every_language_at_r300_on_2m():
    """r = 300 at 2M on this 24 GB machine: the default 400-column basis in float32 (the
    passes' dtype, 1.4 GB) leaves the workers room to read English: no narrowing (the 2M
    run of the float64 basis narrowed it to 375 columns)."""
    cfg = _cfg("train.r=300")
    mem = _local_for(WIKI_2M, cfg)
    plan = plan_train(WIKI_2M, cfg.train, mem)
    assert plan.unfused(WIKI_2M) == [] and plan.max_basis is None
    assert plan.driver["basis"] == 4 * WIKI_2M.concepts * 400
    f64 = _with_basis(_cfg("train.r=300", "train.dtype=float64"), 400)
    assert plan_train(WIKI_2M, f64.train, mem).driver["basis"] == 2 * plan.driver["basis"]
    # the iterations' moment is the bound: at the end the basis, the solve and the Cᵀ
    # results are freed before the Ritz images (p x r float32, smaller here) are made
    t = cfg.train
    b = resolve_block_size(
        300, t.oversampling, t.block_size, WIKI_2M.concepts, warm=t.start_steps > 0
    )
    products = max(
        8 * 5 * WIKI_2M.p * b, 8 * WIKI_2M.p * b + 8 * (WIKI_2M.concepts + WIKI_2M.n) * b
    )
    assert plan.driver["solve or Cᵀ results"] == products
    assert plan.driver["Ritz images beyond the freed arrays"] == 0


def test_a_narrower_basis_fuses_what_the_default_basis_leaves_unfused(no_room_to_spill):
    """r = 300 at 2M on a 20.3 GB machine: the default basis (max(r, b) + 4b = 400 columns)
    leaves the workers too little to read English, which would then cost a Spark job per CG
    iteration; the plan narrows the basis to the widest cap that fuses it, and that plan is
    the one the cap itself gives."""
    cfg = _cfg("train.r=300")
    mem = _local_for(WIKI_2M, cfg, gib=20.3)
    assert memory.default_basis(WIKI_2M, cfg.train) == 400
    default = plan_train(WIKI_2M, _with_basis(cfg, 400).train, mem)
    assert default.unfused(WIKI_2M) == ["en"] and default.max_basis is None
    plan = plan_train(WIKI_2M, cfg.train, mem)
    assert plan.unfused(WIKI_2M) == [] and plan.max_basis is not None
    assert plan.solver_options() == {"max_basis": plan.max_basis}
    assert "basis narrowed to" in plan.describe()
    # the widest such cap: one block wider leaves English unfused again
    assert 350 <= plan.max_basis < 400
    if plan.max_basis < 400:
        wider = plan_train(WIKI_2M, _with_basis(cfg, plan.max_basis + 25).train, mem)
        assert wider.unfused(WIKI_2M) == ["en"]
    same = plan_train(WIKI_2M, _with_basis(cfg, plan.max_basis).train, mem)
    assert (same.fused, same.resident, same.driver) == (plan.fused, plan.resident, plan.driver)
    assert plan.unfused_warning(WIKI_2M, cfg.train) is None
    # a cap the user set is kept, and the warning says the plan could have narrowed it
    warning = default.unfused_warning(WIKI_2M, _with_basis(cfg, 400).train)
    assert "leave train.max_basis unset" in warning
    # where the default basis fuses every language, nothing changes
    r100 = _cfg()
    assert plan_train(WIKI_2M, r100.train, _local_for(WIKI_2M, r100)).solver_options() == {}


def test_the_plan_spills_the_basis_before_it_narrows_it(room_to_spill):
    """Where the default basis leaves English unfused (2M, r = 300, a 20.3 GB machine), the
    plan puts the basis and the images in files of the local scratch directory instead of
    narrowing the basis: same iterates, and the driver's smaller need lets the workers read
    every language."""
    cfg = _cfg("train.r=300")
    mem = _local_for(WIKI_2M, cfg, gib=20.3)
    assert plan_train(WIKI_2M, _with_basis(cfg, 400).train, mem).spill_dir == "auto"
    plan = plan_train(WIKI_2M, cfg.train, mem)
    assert plan.unfused(WIKI_2M) == [] and plan.max_basis is None
    assert plan.spill_dir == "auto" and plan.solver_options() == {"spill_dir": "auto"}
    assert plan.driver["images"] == 0
    # a directory the user chose is kept, and the plan does not add its own
    own = _cfg("train.r=300", "train.spill_dir=/scratch")
    assert plan_train(WIKI_2M, own.train, mem).solver_options() == {}


def test_a_narrower_basis_lets_a_cluster_driver_fit(no_room_to_spill):
    """On a cluster the basis is the driver's alone: a driver between the narrow and the
    default basis's need gets the narrow one instead of exit 2."""
    cfg = _cfg("train.r=300")
    need = {
        m: sum(memory.train_driver_need(WIKI_2M, _with_basis(cfg, m).train).values())
        for m in (350, 400)
    }
    driver = (need[350] + need[400]) // 2
    cluster = SparkMemory(False, 4, 8 * GiB, worker_python=8 * GiB, driver_python=driver)
    with pytest.raises(MemoryPlanError, match="driver's Python"):
        plan_train(WIKI_2M, _with_basis(cfg, 400).train, cluster)
    plan = plan_train(WIKI_2M, cfg.train, cluster)
    assert plan.max_basis is not None and sum(plan.driver.values()) <= driver
    # below the smallest basis's need the error is the default basis's paragraph
    small = SparkMemory(False, 4, 8 * GiB, worker_python=8 * GiB, driver_python=need[350] // 2)
    with pytest.raises(MemoryPlanError, match="driver's Python"):
        plan_train(WIKI_2M, cfg.train, small)


def test_a_spilled_basis_leaves_the_driver_the_rows_in_use(tmp_path, room_to_spill):
    """train.spill_dir: the basis and the images are files; the plan counts the block being
    applied and a product's row chunks instead of K x m and p x m, and a cluster driver too
    small for them is told to spill, then fits with it."""
    from pipeline.linalg.dense import resident_rows

    cfg = _cfg("train.r=300")
    spilled = _cfg("train.r=300", f"train.spill_dir={tmp_path}")
    full = memory.train_driver_need(WIKI_2M, cfg.train)
    need = memory.train_driver_need(WIKI_2M, spilled.train)
    m, b = 400, 25
    rows = resident_rows(max(WIKI_2M.concepts, WIKI_2M.p))
    chunks = max(min(WIKI_2M.concepts, rows), min(WIKI_2M.p, rows)) * 4 * m
    assert need["basis"] == 4 * WIKI_2M.concepts * b + chunks
    assert need["images"] == 0 and full["images"] == 4 * WIKI_2M.p * m
    assert need["solve or Cᵀ results"] == full["solve or Cᵀ results"]
    assert sum(need.values()) < sum(full.values()) - 2 * GiB
    # the end moment: the p x r Ritz images beside the images' chunks being read (the
    # block's copy and the products' arrays are freed; bench/README.md, "The basis and the
    # images in files")
    assert need["Ritz images beyond the freed arrays"] == max(
        0, 4 * WIKI_2M.p * 300 - 4 * WIKI_2M.concepts * b - need["solve or Cᵀ results"]
    )
    between = (sum(need.values()) + sum(full.values())) // 2
    cluster = SparkMemory(False, 4, 8 * GiB, worker_python=8 * GiB, driver_python=between)
    plan = plan_train(WIKI_2M, _with_basis(spilled, 400).train, cluster)
    assert sum(plan.driver.values()) <= between and plan.spill_dir is None  # the user's dir
    # unset, the plan spills to the local scratch directory before it narrows the basis
    auto = plan_train(WIKI_2M, cfg.train, cluster)
    assert auto.spill_dir == "auto" and auto.max_basis is None
    assert auto.solver_options() == {"spill_dir": "auto"} and auto.driver == plan.driver
    assert "in files under auto" in auto.describe()


def test_without_room_to_spill_a_short_driver_is_told_the_setting(no_room_to_spill, tmp_path):
    cfg = _cfg("train.r=300")
    need = sum(memory.train_driver_need(WIKI_2M, _with_basis(cfg, 400).train).values())
    cluster = SparkMemory(False, 4, 8 * GiB, worker_python=8 * GiB, driver_python=need // 2)
    with pytest.raises(MemoryPlanError, match="train.spill_dir=<a local directory"):
        plan_train(WIKI_2M, _with_basis(cfg, 400).train, cluster)


def test_too_little_memory_stops_with_the_settings_that_fit(no_room_to_spill):
    with pytest.raises(MemoryPlanError) as err:
        plan_train(WIKI_1M, _cfg().train, _local(6))
    text = str(err.value)
    assert "988,284 documents" in text and "driver's Python" in text
    assert "Fix:" in text and "\n" not in text


def test_explicit_settings_are_kept_and_checked():
    cfg = _cfg("train.solve_in_task_max_nnz=30000000", "train.resident_memory_mb=0")
    plan = plan_train(WIKI_1M, cfg.train, _local(24))
    assert plan.fused == ["vi", "da"] and plan.resident == []
    assert plan.backend_options(WIKI_1M, cfg.train) == {}
    # a worker too small for the fused language it was told to read
    cluster = SparkMemory(False, 4, 8 * GiB, worker_python=256 * MiB, driver_python=20 * GiB)
    with pytest.raises(MemoryPlanError, match="spark.executor.pyspark.memory"):
        plan_train(WIKI_1M, cfg.train, cluster)


def test_cluster_workers_get_their_share_of_the_executor_settings():
    machine = Machine(memory=64 * GiB, cores=8)
    conf = {
        "spark.master": "yarn",
        "spark.driver.memory": "8g",
        "spark.executor.cores": "4",
        "spark.executor.memory": "16g",
        "spark.executor.memoryOverhead": "6g",
    }
    mem = spark_memory(conf, 99, machine)
    assert not mem.local and mem.slots == 4 and mem.driver_heap == 8 * GiB
    assert mem.worker_python == (6 * GiB - memory.OVERHEAD_MIN) // 4
    mem = spark_memory({**conf, "spark.executor.pyspark.memory": "6g"}, 99, machine)
    assert mem.worker_python == 1.5 * GiB
    plan = plan_train(WIKI_1M, _cfg().train, mem)
    # 1.5 GB a worker: only the languages a worker can read whole beside its CG vectors
    reads = {g: FILL_BYTES_PER_NNZ * n + 662 * MiB for g, n in WIKI_1M.nnz.items()}
    assert plan.fused == [g for g in ("en", "it", "vi", "da") if reads[g] <= 1.5 * GiB]
    assert plan.fused == ["vi", "da"]
    assert sum(plan.worker.values()) <= mem.worker_python


def test_resident_bytes_count_values_columns_and_rows():
    assert resident_bytes(1000, 10) == 8 * 1000 + 24 * 10
    assert resident_bytes(1000, 10, itemsize=8) == 12 * 1000 + 24 * 10


def _write_tfidf_manifest(root, sizes: TrainSizes) -> None:
    tfidf = root / "tfidf"
    tfidf.mkdir(parents=True)
    per = {
        g: {"nnz": sizes.nnz[g], "documents": sizes.docs[g], "vocabulary": sizes.terms[g]}
        for g in sizes.nnz
    }
    report = {"per_language": per, "concepts": sizes.concepts}
    (tfidf / "_manifest.json").write_text(json.dumps({"report": report}))


def test_train_that_cannot_fit_exits_2_before_spark_starts(tmp_path, monkeypatch, capsys):
    """The README's train command on a machine too small for the corpus: exit 2 with one
    paragraph, and no SparkSession is ever built."""
    import pipeline.runner as runner

    _write_tfidf_manifest(tmp_path, WIKI_1M)
    monkeypatch.setattr(Machine, "detect", classmethod(lambda cls: Machine(4 * GiB, 2)))

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started")

    monkeypatch.setattr(runner, "run_stages", no_spark)
    code = runner.main(
        ["train"],
        ["--set", f"paths.root={tmp_path}", "--set", "train.backend=spark", "--set", "train.r=100"],
    )
    err = capsys.readouterr().err
    assert code == 2, err
    message = err.strip().splitlines()
    assert len(message) == 1 and message[0].startswith("error: train (cr5, spark backend)")
    assert "Fix:" in message[0]


def test_the_auto_heap_of_a_train_run_leaves_its_python_need(tmp_path, monkeypatch):
    _write_tfidf_manifest(tmp_path, WIKI_1M)
    monkeypatch.setattr(Machine, "detect", classmethod(lambda cls: Machine(24 * GiB, 2)))
    cfg = load_config([], [f"paths.root={tmp_path}", "train.backend=spark", "train.r=100"])
    heap = parse_size(memory.driver_memory(cfg, ["train"]))
    need = memory.train_python_need(WIKI_1M, cfg.train, 2)
    assert 2 * GiB <= heap <= 10 * GiB
    assert memory.jvm_resident(heap) + need <= Machine(24 * GiB, 2).usable
    # and a run whose tfidf comes from an earlier stage of the same run gets the rule's share
    assert memory.driver_memory(cfg, ["tfidf", "train"]) == "10g"
    cfg = load_config([], [f"paths.root={tmp_path}", "spark.driver_memory=6g"])
    assert memory.driver_memory(cfg, ["train"]) == "6g"


def test_a_cluster_master_plans_the_driver_here_and_the_workers_from_the_executor_settings(
    tmp_path, monkeypatch
):
    """`python jobs/train.py --set spark.master=spark://...` with the tfidf data present: the
    auto heap counts only the driver's needs (the executors are the cluster's) and the plan
    sizes the Python workers from the executor settings (it raised "not a local master")."""
    _write_tfidf_manifest(tmp_path, WIKI_1M)
    monkeypatch.setattr(Machine, "detect", classmethod(lambda cls: Machine(24 * GiB, 2)))
    conf = {"spark.executor.cores": "1", "spark.executor.memoryOverhead": "4g"}
    sets = [f"paths.root={tmp_path}", "train.backend=spark", "train.r=100"]
    cfg = load_config([], [*sets, "spark.master=spark://h:7077", f"spark.conf={json.dumps(conf)}"])
    heap = memory.session_heap(cfg, ["train"], Machine.detect())
    driver_only = memory.train_python_need(WIKI_1M, cfg.train, 0)
    assert heap == local_heap(Machine.detect(), driver_only)
    plan = memory.preflight_train(cfg, ["train"])
    assert plan.worker_available == 4 * GiB - memory.OVERHEAD_MIN
    assert plan.fused == ["en", "it", "vi", "da"]


# --- the embed stage ---------------------------------------------------------------------------


def _write_model_json(root, langs, p: int, r: int) -> dict:
    """A model.json with the files a model of ``langs`` x p terms x rank r has (sizes only)."""
    files = {"shared/meta.npy": {"bytes": 1_000}}
    for lang in langs:
        files[f"languages/{lang}/phi.npy"] = {"bytes": 4 * p * r + 128}
        files[f"languages/{lang}/mean.npy"] = {"bytes": 4 * p + 128}
        files[f"languages/{lang}/vocabulary.parquet"] = {"bytes": 12 * p}
    meta = {"schema_version": 1, "languages": list(langs), "r": r, "files": files}
    model = root / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "model.json").write_text(json.dumps(meta))
    return meta


def test_embed_worker_need_counts_the_languages_it_embeds(tmp_path):
    meta = _write_model_json(tmp_path, ["da", "en", "it", "vi"], 200_000, 100)
    need = memory.embed_worker_need(meta, ["en", "it"], 4096)
    per_lang = 4 * 200_000 * 100 + 128 + 4 * 200_000 + 128 + 12 * 200_000
    assert need["model"] == 2 * per_lang + 1_000  # the shared arrays too
    assert need["batch"] == 4096 * memory.EMBED_BYTES_PER_ROW
    assert need["base"] == memory.WORKER_PYTHON_BASE


def test_embed_plan_fits_or_names_the_settings(tmp_path):
    # 28 languages x 200k terms at r = 300: 6.8 GB of Φ a worker, two workers on 24 GB
    langs = [f"l{i:02d}" for i in range(28)]
    meta = _write_model_json(tmp_path, langs, 200_000, 300)
    cfg = load_config([], [f"paths.root={tmp_path}"])
    machine = Machine(24 * GiB, 2)
    roomy = SparkMemory.local_mode(machine, 2 * GiB, 2)
    plan = memory.plan_embed(meta, langs[:4], cfg, roomy)
    assert sum(plan.worker.values()) <= plan.worker_available
    with pytest.raises(MemoryPlanError) as err:
        memory.plan_embed(meta, langs, cfg, SparkMemory.local_mode(machine, 10 * GiB, 2))
    text = str(err.value)
    assert "embed.languages" in text and "embed.batch_rows" in text and "local[1]" in text
    # on a cluster: spark.executor.pyspark.memory per core
    conf = {
        "spark.master": "spark://h:7077",
        "spark.executor.cores": "2",
        "spark.executor.pyspark.memory": "4g",
    }
    with pytest.raises(MemoryPlanError, match="spark.executor.pyspark.memory"):
        memory.plan_embed(meta, langs, cfg, spark_memory(conf, 2, machine))


def test_embed_that_cannot_fit_exits_2_before_spark_starts(tmp_path, monkeypatch, capsys):
    import pipeline.runner as runner

    _write_model_json(tmp_path, [f"l{i:02d}" for i in range(28)], 200_000, 300)
    monkeypatch.setattr(Machine, "detect", classmethod(lambda cls: Machine(16 * GiB, 2)))

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started")

    monkeypatch.setattr(runner, "run_stages", no_spark)
    code = runner.main(["embed"], ["--set", f"paths.root={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: embed with the 28-language model")
    # the auto heap leaves the workers what a 4-language model needs
    _write_model_json(tmp_path, ["da", "en", "it", "vi"], 200_000, 100)
    cfg = load_config([], [f"paths.root={tmp_path}"])
    assert memory.preflight_embed(cfg, ["embed"]) is not None
    assert memory.preflight_embed(cfg, ["train", "embed"]) is None  # the run makes the model


#: The 100k corpus of bench/results/classic_costs_100k.json, whose driver peaks calibrated
#: the classic methods' driver_memory (pipeline/methods/registry.py).
WIKI_100K = TrainSizes(
    nnz={"da": 1_637_095, "en": 7_725_803, "it": 5_756_993, "vi": 2_366_791},
    docs={"da": 8_557, "en": 38_745, "it": 29_013, "vi": 12_240},
    terms={"da": 74_658, "en": 199_391, "it": 156_811, "vi": 91_583},
    concepts=39_719,
)


@pytest.mark.parametrize("method,peak_mib", [("cca", 10_784), ("opca", 9_143), ("s2net", 9_532)])
def test_classic_driver_need_reproduces_its_calibration(method, peak_mib):
    """The classic methods' estimate at the size it was measured at: within 1 % of the
    measured driver peak (the constants are rounded to one decimal)."""
    t = load_config([], ["train.backend=local", "train.r=100"]).train
    t = dataclasses.replace(t, method=method)
    need = sum(memory.classic_driver_need(WIKI_100K, t).values())
    assert need == pytest.approx(peak_mib * MiB, rel=0.01)


def test_a_classic_method_that_cannot_fit_stops_with_its_paragraph():
    # CCA at 1M: 26 p x r float64 arrays over 800k terms at r = 100 is ~15.5 GiB
    fits = plan_train(WIKI_1M, _cfg("train.method=cca").train, _local(32, heap=4 * GiB))
    assert fits.driver["cca state"] > 15 * GiB
    with pytest.raises(MemoryPlanError) as err:
        plan_train(WIKI_1M, _cfg("train.method=cca").train, _local(24, heap=4 * GiB))
    text = str(err.value)
    assert text.startswith("train (cca, spark backend)") and "cca state" in text
    assert "train.r" not in text and "Fix:" in text  # r = 100: no smaller-r advice
    # on the local backend the advice to move X to the executors only when X is what is
    # missing; here the arrays are
    with pytest.raises(MemoryPlanError) as err:
        plan_train(
            WIKI_1M, _cfg("train.method=cca", "train.backend=local").train, _local(16, 4 * GiB)
        )
    assert "train.backend=spark" not in str(err.value)
    # Cr5 and the neural methods are not planned this way
    assert "cca state" not in plan_train(WIKI_1M, _cfg().train, _local(24)).driver


def test_evaluate_with_a_classic_method_that_cannot_fit_exits_2_before_spark(
    tmp_path, monkeypatch, capsys
):
    import pipeline.runner as runner

    _write_tfidf_manifest(tmp_path, WIKI_1M)
    monkeypatch.setattr(Machine, "detect", classmethod(lambda cls: Machine(16 * GiB, 2)))

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark started")

    monkeypatch.setattr(runner, "run_stages", no_spark)
    args = ["--set", f"paths.root={tmp_path}", "--set", "train.r=100"]
    code = runner.main(["evaluate"], [*args, "--set", "evaluate.methods=[cl_lsi, opca]"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: evaluate.methods: train (opca,")
    assert lines[0].endswith("Or drop opca from evaluate.methods.")
    # on a 24 GB machine the auto heap leaves CCA its ~15.5 GB (a fixed half would not)
    monkeypatch.setattr(Machine, "detect", classmethod(lambda cls: Machine(24 * GiB, 2)))
    cca = load_config([], [*args[1::2], "evaluate.methods=[cca]"])
    heap = memory.session_heap(cca, ["evaluate"], Machine.detect())
    assert heap < memory.local_heap(Machine.detect())
    assert memory.preflight_evaluate(cca, ["evaluate"])["cca"].driver["cca state"] > 15 * GiB
    # CL-LSI alone fits; without the tfidf data there is nothing to plan yet
    cfg = load_config([], [f"paths.root={tmp_path}", "evaluate.methods=[cl_lsi]"])
    assert set(memory.preflight_evaluate(cfg, ["evaluate"])) == {"cl_lsi"}
    assert memory.preflight_evaluate(cfg, ["tfidf", "evaluate"]) is None


def test_the_auto_heap_never_drops_below_the_spark_backend_s_jvm_need():
    """The 2M chain's train planned a 2 GiB heap (15.5 GB available, 13.5 GB of Python need)
    and died of Java heap space loading X; the heap now has a floor of 1.5x X's cached blocks
    plus 1 GiB, and the Python side's plan works with what is left."""
    t = _cfg().train
    need = memory.train_jvm_need(WIKI_1M, t)
    assert need == int(1.5 * (8 * WIKI_1M.z + 8 * WIKI_1M.n)) + GiB
    assert memory.train_jvm_need(WIKI_1M, _cfg("train.backend=local").train) is None
    tight = Machine(memory=int(11 / 0.85 * GiB), cores=2)  # 11 GiB usable
    python = memory.train_python_need(WIKI_1M, t, 2)
    assert local_heap(tight, python) == memory.HEAP_MIN  # the old rule: the floor of 2 GiB
    heap = local_heap(tight, python, need)
    assert heap >= need and heap % GiB == 0
    plan = plan_train(WIKI_1M, _cfg().train, SparkMemory.local_mode(tight, heap, 2))
    assert plan.worker_available > 0  # the workers got what the JVM left


def test_the_plans_basis_reaches_the_cr5_fit():
    """TrainingData.solver_options (the plan's narrowed cap) is what the Cr5 fit uses, in
    place of the configuration's None."""
    from pipeline.backends.local import LocalCorpusBackend
    from pipeline.training.fit import fit_method
    from pipeline.training.rows import TrainingData
    from tests.problems import PROBLEMS

    problem = PROBLEMS["three_uneven"]
    be = LocalCorpusBackend(problem.corpus(), problem.n_concepts, dtype="float64")
    tight = ["train.eig_rtol=1e-9", "train.cg_rtol=1e-12", "train.w_rtol=1e-13"]
    t = load_config([], ["train.r=4", "train.block_size=3", "train.dtype=float64", *tight]).train
    assert t.max_basis is None
    fits = {}
    for options in ({}, {"max_basis": 10}):
        data = TrainingData(be, {}, {}, 0.0, solver_options=options)
        fits[bool(options)] = fit_method(t, data, None)
    assert fits[False].history["max_basis"] == 4 + 4 * 3  # the default cap
    assert fits[True].history["max_basis"] == 10
    assert fits[True].history["eigensolver"]["n_restarts"] > 0
    np.testing.assert_allclose(fits[True].eigenvalues, fits[False].eigenvalues, rtol=1e-7)


def _checkpoint_dir(cfg, planned=None):
    """The training service's checkpoint directory for ``cfg``'s sections."""
    from pipeline.training.service import checkpoint_dir

    return checkpoint_dir(cfg.train, cfg.paths, cfg.text, cfg.features, planned)


def test_a_planned_basis_checkpoints_in_its_own_directory(tmp_path):
    """The plan's cap counts as configuration for the checkpoint directory: the same plan
    resumes from the same directory, another (another machine's memory) gets its own instead
    of a CheckpointMismatchError against the default basis's checkpoints."""
    cfg = load_config([], [f"paths.root={tmp_path}", "train.r=300"])
    default = _checkpoint_dir(cfg)
    assert _checkpoint_dir(cfg, {}) == default
    planned = _checkpoint_dir(cfg, {"max_basis": 350})
    assert planned != default and planned == _checkpoint_dir(cfg, {"max_basis": 350})
    assert planned == _checkpoint_dir(_with_basis(cfg, 350))
    assert _checkpoint_dir(cfg, {"max_basis": 375}) not in (default, planned)


def test_the_checkpoint_directory_names_the_problem_not_the_stopping_rule(tmp_path):
    """A rerun may change when the eigensolver stops or how it saves and still resume; a
    setting that changes the iterates (λ, r, the basis) is another problem."""
    cfg = load_config([], [f"paths.root={tmp_path}", "train.r=300"])
    same = ["eig_maxiter=40", "eig_rtol=0.2", "stop_rule=validation", "checkpoint_every=5"]
    for change in same:
        assert _checkpoint_dir(
            load_config([], [f"paths.root={tmp_path}", "train.r=300", f"train.{change}"])
        ) == _checkpoint_dir(cfg)
    for change in ["lam=3", "r=200", "max_basis=350", "seed=1"]:
        other = load_config([], [f"paths.root={tmp_path}", "train.r=300", f"train.{change}"])
        assert _checkpoint_dir(other) != _checkpoint_dir(cfg), change
