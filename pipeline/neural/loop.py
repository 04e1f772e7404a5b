"""The training loop every neural method shares: seeded batches, data parallelism,
a checkpoint per epoch, resume, and the epoch chosen on validation P@1.

A method is a :class:`Task`: it builds its ``torch.nn.Module``, draws what an epoch needs
(the random unrelated documents), computes the mean loss of a set of training items, scores a
model on the validation documents and exports its weights. :func:`run_loop` drives it the
same way in one process or in each of the processes ``torchrun`` starts (pyspark's
TorchDistributor, :mod:`pipeline.neural.distributed`):

- epoch e visits the items in the order of a permutation seeded by (seed, e), in global
  batches of ``batch_size`` (a trailing partial batch is dropped); with W processes, process
  k takes the k-th of W equal slices of each global batch (``batch_size`` is rounded down to
  a multiple of W) and the gradients are averaged over the processes in one all-reduce after
  every backward pass (:func:`average_gradients`). Each task returns its
  slice's share of the *global* batch's loss (scaled by W): a normaliser that depends on the
  whole batch (T-LASER's target-token count, cT-LASER's mean vector norm) is computed over
  the global batch (:func:`all_sum`, differentiable), so a step's gradient is that of the
  global batch's loss whatever W: with the same seed a distributed run takes the steps a
  single process takes, up to the rounding of the all-reduce;
- the epoch's random draws come from a generator seeded by (seed, e), not from the
  processes' state, for the same reason (the models use no dropout);
- after every epoch, process 0 writes a checkpoint (model, optimiser, history, best epoch so
  far) atomically, and a run that finds one resumes after its epoch: a killed run rerun with
  the same settings ends with the same weights as one that was never interrupted;
- every process scores the validation documents after each epoch (the replicas are
  identical, so they agree) and the best epoch's weights are returned.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from pipeline.errors import ConfigError
from pipeline.linalg.progress import format_seconds

log = logging.getLogger(__name__)

__all__ = [
    "LoopSettings",
    "Task",
    "all_sum",
    "average_gradients",
    "distributed_entry",
    "import_torch",
    "run_loop",
]

_CKPT = re.compile(r"^epoch-(\d{4})\.pt$")


def import_torch() -> Any:
    """``torch``, or a ConfigError that says how to install it."""
    try:
        import torch
    except ImportError:
        raise ConfigError(
            "train.method xcnn, tlaser and ctlaser need PyTorch, which is not installed. Fix: "
            "pip install 'cr5-on-spark[neural]' (CPU-only build: pip install torch "
            "--index-url https://download.pytorch.org/whl/cpu), or bash scripts/setup.sh dev"
        ) from None
    return torch


class Task(Protocol):
    """A neural method as the loop drives it."""

    #: Training items (parallel pairs) per epoch.
    n_items: int

    def build(self) -> Any:
        """A new ``torch.nn.Module`` (initialised from torch's seeded generator)."""

    def begin_epoch(self, epoch: int) -> dict[str, Any]:
        """Called before epoch ``epoch`` (0-based) trains, also after a resume: set what
        varies by epoch (a loss weight's schedule); the entries returned are added to the
        epoch's history record."""

    def draw(self, rng: np.random.Generator) -> Any:
        """The epoch's random draws for all items (e.g. one unrelated document per item)."""

    def loss(self, model: Any, items: np.ndarray, draws: Any, batch: np.ndarray) -> Any:
        """This process's share of the loss of the global ``batch`` (a scalar tensor).

        ``items`` (indices into 0..n_items-1) is this process's slice of ``batch``, one of
        W = len(batch) / len(items) equal slices. The return value, averaged over the W
        processes (as :func:`average_gradients` averages gradients), must be the loss of the
        whole batch; in one process (``items`` is ``batch``) it is that loss.
        """

    def score(self, model: Any) -> float | None:
        """Validation P@1 of the model (None: no validation documents)."""

    def export(self, model: Any) -> dict[str, np.ndarray]:
        """The model's weights as arrays (what the model directory stores)."""


@dataclass(frozen=True)
class LoopSettings:
    """How :func:`run_loop` trains (the loop keys of a neural method's section,
    ``train.<method>.epochs``, ...)."""

    epochs: int
    batch_size: int
    lr: float
    seed: int
    checkpoint_dir: str | None = None
    threads: int = 1
    #: "cpu", "cuda" or "auto" (cuda when PyTorch sees a GPU).
    device: str = "cpu"
    #: AdamW's decoupled weight decay (0: Adam's steps exactly).
    weight_decay: float = 0.0
    #: Seconds between the progress lines within an epoch (0: none).
    progress_seconds: float = 60.0


class EpochProgress:
    """One log line every ``interval`` seconds within an epoch: the step, the epoch's mean
    loss so far (this process's slices), steps per second and the epoch's ETA. An epoch on a
    parallel corpus of 100k+ pairs runs for many minutes (hours on a CPU at the papers'
    sizes) between the epoch lines; ``interval`` 0 (the other processes) logs nothing."""

    def __init__(
        self,
        epoch: int,
        epochs: int,
        n_steps: int,
        interval: float,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.epoch, self.epochs, self.n_steps, self.interval = epoch, epochs, n_steps, interval
        self._clock = clock
        self.t0 = self._last = clock()

    def step(self, done: int, loss_sum: float) -> None:
        """Record that ``done`` steps of the epoch have run, their losses summing to
        ``loss_sum``; log a line when ``interval`` has passed since the last one."""
        if self.interval <= 0 or done >= self.n_steps:
            return
        now = self._clock()
        if now - self._last < self.interval:
            return
        self._last = now
        rate = done / max(now - self.t0, 1e-9)
        log.info(
            "neural epoch %d/%d: step %d/%d (%.0f%%), loss %.5f, %.3g steps/s, epoch ETA %s",
            self.epoch,
            self.epochs,
            done,
            self.n_steps,
            100.0 * done / self.n_steps,
            loss_sum / done,
            rate,
            format_seconds((self.n_steps - done) / rate),
        )


def resolve_device(torch: Any, device: str) -> Any:
    """The ``torch.device`` that ``device`` ("auto", "cpu", "cuda") names here; "cuda"
    without a GPU is a ConfigError."""
    cuda = torch.cuda.is_available()
    if device == "cuda" and not cuda:
        raise ConfigError(
            "train.<method>.device=cuda, but PyTorch sees no GPU here (a CPU-only build, or "
            "no device visible); set device: auto or cpu"
        )
    if not (device == "cuda" or (device == "auto" and cuda)):
        return torch.device("cpu")
    # a TorchDistributor process sees its own GPU, or all of them: then its local rank's
    count = torch.cuda.device_count()
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % max(count, 1))


def model_device(model: Any) -> Any:
    """The device of ``model``'s parameters (where a task puts its batches)."""
    return next(model.parameters()).device


def all_sum(x: Any) -> Any:
    """``x`` summed over the training processes, with the gradient flowing back to every
    process's ``x`` (torch.distributed.nn's all_reduce); ``x`` itself in one process.

    For a loss normaliser that depends on the whole global batch: each process contributes
    its slice's part and all get the same total, exactly as one process would compute it.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        from torch.distributed.nn.functional import all_reduce

        return all_reduce(x)
    return x


def average_gradients(torch: Any, model: Any, world: int) -> None:
    """Replace every parameter's gradient by its mean over the ``world`` processes, in one
    all-reduce (call after each process's backward pass).

    What DistributedDataParallel does, except for parameters a process's slice did not use:
    XCNN's maps are per language, and a slice of a batch can lack a language that another
    slice has (a language with few training documents), which DDP refuses mid-training.
    Here an unused parameter counts as a zero gradient, and one that no process used keeps
    no gradient, so Adam leaves it alone as a single process running the whole batch would.
    """
    import torch.distributed as dist

    params = [p for p in model.parameters() if p.requires_grad]
    used = torch.tensor(
        [float(p.grad is not None) for p in params], dtype=torch.float32, device=params[0].device
    )
    flat = torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
        + [used]
    )
    dist.all_reduce(flat)
    start = 0
    for p, n_used in zip(params, flat[-len(params) :].tolist(), strict=True):
        n = p.numel()
        p.grad = flat[start : start + n].view_as(p) / world if n_used > 0 else None
        start += n


def _broadcast_parameters(model: Any) -> None:
    """Every process starts from process 0's parameters (they are built from the same seed
    or loaded from the same checkpoint; this makes it so whatever the platform)."""
    import torch.distributed as dist

    for p in model.parameters():
        dist.broadcast(p.data, src=0)


def _latest_checkpoint(where: str | None) -> Path | None:
    if not where or not Path(where).is_dir():
        return None
    found = sorted(p for p in Path(where).iterdir() if _CKPT.match(p.name))
    return found[-1] if found else None


def _save_checkpoint(torch: Any, where: str, epoch: int, payload: dict[str, Any]) -> None:
    """``epoch-<e>.pt`` written to a temporary name and renamed; older ones removed."""
    d = Path(where)
    d.mkdir(parents=True, exist_ok=True)
    final = d / f"epoch-{epoch:04d}.pt"
    tmp = d / f".{final.name}.{os.getpid()}.tmp"
    torch.save(payload, tmp)
    os.replace(tmp, final)
    for p in d.iterdir():
        if _CKPT.match(p.name) and p != final:
            p.unlink(missing_ok=True)


def run_loop(task: Task, s: LoopSettings) -> dict[str, Any]:
    """Train ``task``; in a torch.distributed process group when one is initialised.

    Returns
    -------
    dict
        ``weights`` (the chosen epoch's :meth:`Task.export`), ``history`` (one record per
        epoch: mean loss, validation P@1, seconds), ``chosen_epoch`` (1-based),
        ``resumed_after`` (the checkpoint's epoch, or None), ``world_size``.
    """
    torch = import_torch()
    import torch.distributed as dist

    torch.set_num_threads(s.threads)
    distributed = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    shard = s.batch_size // world
    if shard < 1:
        raise ConfigError(
            f"the batch size {s.batch_size} (train.<method>.batch_size) is smaller than the "
            f"{world} training processes (train.<method>.processes); raise it"
        )
    batch = shard * world
    device = resolve_device(torch, s.device)
    log.info("neural: training on %s", device)
    torch.manual_seed(s.seed)
    model = task.build().to(device)
    # AdamW with no decay takes Adam's steps; its decay shrinks every weight by lr·decay
    # per step, whether the step's batch used it or not
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, weight_decay=s.weight_decay)
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {"epoch": 0, "score": None, "state": None}
    start, resumed = 0, None
    ckpt = _latest_checkpoint(s.checkpoint_dir)
    if ckpt is not None:
        payload = torch.load(ckpt, weights_only=True, map_location=device)
        model.load_state_dict(payload["model"])
        opt.load_state_dict(payload["optimizer"])
        history, best = list(payload["history"]), dict(payload["best"])
        start = resumed = int(payload["epoch"])
        log.info("neural: resumed after epoch %d from %s", start, ckpt)
    if distributed:
        _broadcast_parameters(model)
    n_steps = task.n_items // batch
    if n_steps == 0:
        raise ConfigError(
            f"{task.n_items} training pairs are fewer than one batch "
            f"(train.<method>.batch_size={s.batch_size}); lower the batch size"
        )
    for epoch in range(start, s.epochs):
        t0 = time.perf_counter()
        schedule = task.begin_epoch(epoch)
        rng = np.random.default_rng([s.seed, epoch])
        order = rng.permutation(task.n_items)
        draws = task.draw(rng)
        model.train()
        total = 0.0
        progress = EpochProgress(
            epoch + 1, s.epochs, n_steps, s.progress_seconds if rank == 0 else 0
        )
        for step in range(n_steps):
            whole = order[step * batch : (step + 1) * batch]
            items = whole[rank * shard : (rank + 1) * shard]
            opt.zero_grad()
            loss = task.loss(model, items, draws, whole)
            loss.backward()
            if distributed:
                average_gradients(torch, model, world)
            opt.step()
            total += float(loss.detach())
            progress.step(step + 1, total)
        mean_loss = total / n_steps
        if distributed:
            t = torch.tensor([mean_loss], dtype=torch.float64)
            dist.all_reduce(t)
            mean_loss = float(t) / world
        model.eval()
        with torch.no_grad():
            score = task.score(model)
        record = {
            "epoch": epoch + 1,
            "loss": mean_loss,
            "validation_p_at_1": score,
            "seconds": round(time.perf_counter() - t0, 3),
            **schedule,
        }
        history.append(record)
        # the first epoch with the highest validation P@1; without validation, the last
        if best["state"] is None or score is None or score > best["score"]:
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            best = {"epoch": epoch + 1, "score": score, "state": state}
        log.info(
            "neural epoch %d/%d: loss %.5f, validation P@1 %s, %.1fs",
            epoch + 1,
            s.epochs,
            mean_loss,
            "n/a" if score is None else f"{score:.4f}",
            record["seconds"],
        )
        if s.checkpoint_dir and rank == 0:
            _save_checkpoint(
                torch,
                s.checkpoint_dir,
                epoch + 1,
                {
                    "epoch": epoch + 1,
                    "model": model.state_dict(),
                    "optimizer": opt.state_dict(),
                    "history": history,
                    "best": best,
                },
            )
        if distributed:
            dist.barrier()
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return {
        "weights": task.export(model),
        "history": history,
        # this process's peak resident memory (Linux reports KiB)
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "chosen_epoch": best["epoch"],
        "resumed_after": resumed,
        "world_size": world,
    }


def distributed_entry(task: Task, s: LoopSettings) -> dict[str, Any]:
    """What each TorchDistributor process runs: join the gloo process group that
    ``torchrun``'s environment describes, :func:`run_loop`, leave the group."""
    torch = import_torch()
    import torch.distributed as dist

    torch.set_num_threads(s.threads)
    dist.init_process_group("gloo")
    if dist.get_rank() == 0 and not logging.getLogger().handlers:
        # torchrun's processes start without the driver's logging: report progress from one
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    try:
        return run_loop(task, s)
    finally:
        dist.destroy_process_group()
