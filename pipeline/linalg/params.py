"""The parameters of the maths, declared once: the Cr5 solver's (the corpus backends' options
are the backends' own, :mod:`pipeline.backends.params`).

Each field is a :func:`~pipeline.params.param` declaration (type, default, range, help text).
The solvers take their keyword defaults from :data:`CR5_DEFAULTS` and check their arguments
against :class:`Cr5Params` (:func:`~pipeline.params.check_params`); the configuration's
``train`` section embeds the class (:class:`pipeline.config.TrainConfig` subclasses it),
so ``train.lam`` *is* :attr:`Cr5Params.lam`, in the manner of a scikit-learn estimator that
owns its parameters.

This module imports nothing but :mod:`pipeline.params` and the standard library: the
configuration, which the Airflow DAG imports without numpy, embeds it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.params import param

__all__ = [
    "CR5_DEFAULTS",
    "EXECUTION",
    "PASS_DTYPES",
    "PROBLEM",
    "SPILL_AUTO",
    "STOPPING",
    "Cr5Params",
    "default_block_size",
    "default_max_basis",
    "max_rank",
    "resolve_block_size",
    "resolve_w_rtol",
    "smallest_max_basis",
]

#: What a solver parameter is to a checkpoint (field metadata ``"role"``). ``PROBLEM``: it
#: changes the iterates, so it is part of the problem's fingerprint and a checkpoint resumes
#: only under the same value.
PROBLEM = "problem"
#: ``STOPPING``: when the eigensolver stops; a resumed solve may change it (e.g. a larger cap).
STOPPING = "stopping"
#: ``EXECUTION``: how the work is spread and saved; it changes no number, and the fit's
#: history does not record it.
EXECUTION = "execution"

#: ``spill_dir`` value for the process's local scratch directory
#: (:func:`pipeline.linalg.spill.local_scratch_dir`).
SPILL_AUTO = "auto"

#: The solvers' working precisions: allowed values of a backend's ``dtype`` (the arithmetic
#: of one pass over X), of ``cg_dtype`` and of a preconditioner's products
#: (:func:`pipeline.linalg.dtypes.working_dtype`).
PASS_DTYPES = ("float32", "float64")


def max_rank(n_concepts: int, n_terms: int) -> int:
    """The largest r a corpus allows: M is K x K of rank at most K - 1 after centring, and
    Φ has one column per term, so at most ``min(K - 1, p)`` dimensions exist. Declared here,
    beside ``r``, so that the method registry (:mod:`pipeline.methods.registry`), which loads
    without numpy, can name it as the bound of the eigenproblem methods."""
    return min(n_concepts - 1, n_terms)


# --- the eigensolver's widths: the one rule for the block width b and the basis cap, which the
# solver, the memory plan and bench/cost_model.py all use (numpy-free, like max_rank)


def default_block_size(r: int, oversampling: int, *, warm: bool = False) -> int:
    """Eigensolver block width when none is given.

    Random start (``warm=False``): ``min(r + oversampling, max(32, r // 6))``. A block of
    r + oversampling columns needs few iterations, but its Krylov space is poor per column
    (polynomial degree = iterations), so it applies M to several times more columns than
    needed.

    Warm start (:func:`~pipeline.linalg.cr5.surrogate_warm_start`):
    ``min(r + oversampling, max(24, r // 12))``.
    From a good start a narrow block applies M to fewer columns in all: more iterations, but
    each on fewer columns, at the same held-out P@1 on a real corpus; on a corpus whose
    spectrum decays fast a wide block is about as fast (bench/README.md, "Block width").
    A wider block takes fewer passes over X for more column work: worth it where each pass
    is a Spark job with a fixed latency (a language too large to fuse), not where the
    column work is the time (bench/README.md, "Block width at r = 300").
    """
    wide = r + oversampling
    if warm:
        return min(wide, max(24, r // 12))
    return min(wide, max(32, r // 6))


#: ``w_rtol`` when none is given: ``cg_rtol`` over this (:func:`resolve_w_rtol`)
W_RTOL_PER_CG_RTOL = 30.0


def resolve_w_rtol(w_rtol: float | None, cg_rtol: float) -> float:
    """The w solve's tolerance used: ``w_rtol``, or ``cg_rtol / 30``: w is solved as much
    tighter than the eigensolver's blocks as the Woodbury constant amplifies its error
    (nμᵀw / (1 − nμᵀw), a few tens on real corpora), so that its share of M's error stays
    small beside theirs at any ``cg_rtol``."""
    return float(cg_rtol) / W_RTOL_PER_CG_RTOL if w_rtol is None else float(w_rtol)


def default_max_basis(r: int, b: int) -> int:
    """Thick-restart size when none is given: ``max(r, b) + 4 b`` columns.

    Bounds the eigensolver's driver memory independently of its iteration count: the basis
    is ``K x max_basis`` (in the passes' dtype, float32 by default) and the tracked images
    ``p x max_basis`` float32. Four blocks beyond the wanted space leave the usual
    warm-started solves (a few iterations) unrestarted; longer ones restart from the
    leading ``max(r, min(max_basis // 2, room))`` Ritz vectors (Krylov-Schur),
    ``room = max(max_basis - waiting - 2 b, (max_basis - 2 b) // 2)`` (``waiting``: the
    columns not yet applied, b, or more after a λ path's wide start, which the restart cuts
    to as many as the Ritz vectors kept), which keeps their convergence and leaves room for
    two blocks before the next restart.
    """
    return max(r, b) + 4 * b


def smallest_max_basis(r: int, b: int) -> int:
    """The narrowest thick-restart size the eigensolver accepts from a random or surrogate
    start: ``max(r, b) + 2 b`` (the wanted space and room for two blocks)."""
    return max(r, b) + 2 * b


def resolve_block_size(
    r: int, oversampling: int, block_size: int | None, limit: int, *, warm: bool = False
) -> int:
    """The block width used: ``block_size`` or :func:`default_block_size`, at most ``limit``
    (the operator's dimension)."""
    if block_size is None:
        block_size = default_block_size(r, oversampling, warm=warm)
    return min(block_size, limit)


def _role(role: str) -> dict[str, str]:
    return {"role": role}


@dataclass(frozen=True)
class Cr5Params:
    """The Cr5 solver's parameters (:class:`~pipeline.linalg.cr5.Cr5Solver`,
    :func:`~pipeline.linalg.cr5.solve_cr5`); the configuration keys ``train.<name>``."""

    lam: float = param(1.0, lo=0.0, lo_open=True, doc="Ridge parameter λ.", extra=_role(PROBLEM))
    r: int = param(
        300,
        lo=1,
        doc="Embedding dimension (< number of concepts, <= terms).",
        extra=_role(PROBLEM),
    )
    oversampling: int = param(
        20,
        lo=0,
        doc="Extra eigensolver columns beyond r (caps the block width at r + this).",
        extra=_role(PROBLEM),
    )
    cg_rtol: float = param(
        0.03,
        lo=0.0,
        hi=1.0,
        lo_open=True,
        hi_open=True,
        doc="Per-language block CG relative residual tolerance. Looser than the paper's "
        "ε = 0.01, which costs more CG work for the same held-out P@1 (bench/README.md, "
        '"Solver knobs").',
        extra=_role(PROBLEM),
    )
    cg_maxiter: int = param(
        500, lo=1, doc="Per-language block CG iteration cap (paper's T).", extra=_role(PROBLEM)
    )
    cg_dtype: Literal["float32", "float64"] | None = param(
        None,
        doc="Working precision of the eigensolver's CG vectors (iterates, residuals, "
        "directions); None: train.dtype. float32 halves the CG's dense memory traffic at the "
        'same iterations and held-out P@1 (bench/README.md, "Solver knobs"). The w = B⁻¹μ '
        "solve (train.w_rtol) is float64 always.",
        extra=_role(PROBLEM),
    )
    precond_rank: int = param(
        32,
        lo=0,
        doc="Eigen-directions of each language's Jacobi-scaled X_lᵀX_l + λI deflated in the "
        "CG preconditioner, found once per λ by randomized subspace iteration (4 passes of "
        "precond_rank + 8 columns per language), so that each solve needs fewer CG "
        "iterations; 0: plain Jacobi (pipeline/linalg/preconditioner.py).",
        extra=_role(PROBLEM),
    )
    w_rtol: float | None = param(
        None,
        lo=0.0,
        hi=1.0,
        lo_open=True,
        hi_open=True,
        doc="Tolerance of the solve w = B⁻¹μ of the centring's Woodbury correction; None: "
        "train.cg_rtol / 30. The correction's constant amplifies w's error by "
        "nμᵀw / (1 − nμᵀw), yet at a thirtieth of cg_rtol w's share of M's error stays far "
        "below what the eigensolver's own solves leave, for a fraction of a tighter solve's "
        'passes (measured: bench/README.md, "The w solve\'s tolerance").',
        extra=_role(PROBLEM),
    )
    eig_rtol: float = param(
        0.1,
        lo=0.0,
        hi=1.0,
        lo_open=True,
        hi_open=True,
        doc="Eigensolver tolerance: relative Ritz residual (paper: 0.1).",
        extra=_role(STOPPING),
    )
    eig_maxiter: int = param(
        250, lo=1, doc="Eigensolver iteration cap (paper: 250).", extra=_role(STOPPING)
    )
    seed: int = param(0, lo=0, doc="Seeds the eigensolver's start block.", extra=_role(PROBLEM))
    max_basis: int | None = param(
        None,
        lo=3,
        doc="Eigensolver thick-restart size: the driver keeps a K x max_basis basis (in "
        "train.dtype, float32 by default) and p x max_basis float32 images, whatever the "
        "iteration count. None: max(r, b) + 4b "
        "(b the block width), narrowed by the train stage's memory plan (down to "
        "max(r, b) + 2b) when that fuses a language the default leaves to one Spark job per "
        "CG iteration or lets the driver fit.",
        extra=_role(PROBLEM),
    )
    block_size: int | None = param(
        None,
        lo=1,
        doc="Eigensolver block width; None: min(r + oversampling, max(24, r // 12)) with the "
        "warm start, min(r + oversampling, max(32, r // 6)) from a random block (capped at K).",
        extra=_role(PROBLEM),
    )
    start_steps: int = param(
        2,
        lo=0,
        doc="Subspace-iteration steps on the cheap surrogate CᵀD⁻¹C that warm the "
        "eigensolver's start block; 0: random start block.",
        extra=_role(PROBLEM),
    )
    reuse_solves: bool = param(
        True,
        doc="Form Φ*ᵀ from the eigensolver's own solves Â⁻¹CV (p x basis float32 of memory) "
        "instead of r further right-hand sides at the end.",
        extra=_role(PROBLEM),
    )
    stop_rule: Literal["residual", "validation"] = param(
        "residual",
        doc="What ends the eigensolver: residual (every Ritz pair within eig_rtol) or "
        "validation (P@1 of train.validation_concepts held-out concepts, scored after every "
        "iteration, has not improved for stop_patience iterations; the best iteration is "
        "returned, and the residual rule still ends the run if met first; each iteration is "
        "scored from the validation rows' products with the kept images, without forming "
        "Φ*ᵀ, and the driver keeps the best iteration's p x r Φ*ᵀ in the pass dtype). "
        "validation needs the split stage's concepts (features.heldout_concepts: splits).",
        extra=_role(STOPPING),
    )
    stop_patience: int = param(
        2,
        lo=1,
        doc="stop_rule=validation: iterations without improvement before stopping.",
        extra=_role(STOPPING),
    )
    max_workers: int | None = param(
        None,
        lo=1,
        doc="Concurrent language passes / solves (None: one per language).",
        extra=_role(EXECUTION),
    )
    spill_dir: str | None = param(
        None,
        doc="A local directory for the eigensolver's Lanczos basis (K x max_basis) and kept "
        "images (p x max_basis), the driver's largest arrays: they are then files mapped into "
        "memory and paged out row chunk by row chunk as the solver uses them, so the driver's "
        "Python holds the chunks in use and the OS caches the rest as memory allows (the "
        "files need that much local disk; they are deleted when the fit ends, however it "
        "ends). Same results. auto: the local scratch directory Spark gives the driver "
        "(SPARK_LOCAL_DIRS, YARN's LOCAL_DIRS, else the temporary directory). None: in the "
        "driver's memory, unless the train stage's memory plan finds that the driver holds "
        "them only in files (it then uses auto, before it would narrow train.max_basis).",
        extra=_role(EXECUTION),
    )
    checkpoint_every: int = param(
        1, lo=1, doc="Eigensolver iterations between checkpoints.", extra=_role(EXECUTION)
    )
    checkpoint_seconds: float = param(
        60.0,
        lo=0.0,
        doc="Least wall time between two eigensolver checkpoints (each writes the Lanczos "
        "basis and the kept images, too much to write after every iteration of a large fit). "
        "A failure then loses at most this much work (or the gap set by "
        "train.checkpoint_max_share) plus one iteration; 0: every train.checkpoint_every "
        "iterations. The state after the last iteration is always written.",
        extra=_role(EXECUTION),
    )
    checkpoint_max_share: float = param(
        0.05,
        lo=0.0,
        hi=1.0,
        lo_open=True,
        doc="Most of the eigensolver's wall time spent writing checkpoints: after a "
        "checkpoint that took w seconds the next waits at least w (1 - share) / share "
        "(19 w at 0.05) beyond train.checkpoint_seconds, so slow storage (an object store, "
        "a shared disk) spaces the checkpoints out instead of slowing the fit. 1: no bound "
        "beyond train.checkpoint_seconds; not applied when that is 0.",
        extra=_role(EXECUTION),
    )

    @staticmethod
    def of(source: Cr5Params | None = None, /, **changes: Any) -> Cr5Params:
        """The solver parameters of ``source`` (default: the declared defaults), with
        ``changes``, as a plain :class:`Cr5Params`.

        ``source`` may be any instance of a subclass (e.g. the configuration's ``train``
        section); only the solver's fields are taken.

        Raises
        ------
        TypeError
            For a name in ``changes`` that is not a solver parameter.
        """
        base = {} if source is None else Cr5Params.solver_params(source)
        return Cr5Params(**{**base, **changes})

    def solver_params(self) -> dict[str, Any]:
        """The solver parameters as a dict, in declaration order (keyword arguments of
        :class:`~pipeline.linalg.cr5.Cr5Solver`; the solver fields only, also when called on
        a subclass such as the ``train`` section)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Cr5Params)}

    @staticmethod
    def names(*roles: str) -> tuple[str, ...]:
        """The solver parameters' names in declaration order, or only those of ``roles``
        (:data:`PROBLEM`, :data:`STOPPING`, :data:`EXECUTION`)."""
        return tuple(
            f.name
            for f in dataclasses.fields(Cr5Params)
            if not roles or f.metadata["role"] in roles
        )


#: The declared defaults, for keyword defaults of the solvers.
CR5_DEFAULTS = Cr5Params()
