"""The methods' driver-memory formulas: what a fit holds in the driver's Python at its peak.

Each method's :class:`~pipeline.methods.spec.DriverMemory` names its formula
(``solver``, ``state`` or ``base``); :func:`driver_need` evaluates it on a
:class:`DriverShape`, the sizes of one fit. The memory plan (:mod:`pipeline.memory`) calls
it through the method's spec, and ``bench/cost_model.py`` builds its peak prediction of a
Cr5 fit from the same parts (its moments of the last eigensolver iteration, where the plan
sums the parts as a bound).

Like the spec, this module imports nothing but the standard library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline.methods.spec import DriverMemory

__all__ = [
    "CG_ARRAYS",
    "DRIVER_PYTHON_BASE",
    "FORMULAS",
    "SOLVE_ARRAYS",
    "DriverShape",
    "base_need",
    "basis_bytes",
    "cg_bytes",
    "ct_results_bytes",
    "driver_need",
    "images_bytes",
    "precond_bytes",
    "ritz_images_bytes",
    "solve_bytes",
    "solver_need",
    "spilled_bytes",
    "state_need",
    "x_bytes",
]

#: The driver's Python without data (interpreter, numpy, scipy, pyspark, pyarrow), as the
#: memory plan counts it (a margin above the ~140 MB measured, bench/cost_model.py).
DRIVER_PYTHON_BASE = 300 * 2**20

#: Float arrays of p_l x b live at once in one language's block CG at its peak (pipeline/
#: linalg/block_cg.py): B, X, R (full), R and X of the active columns, Z, P, the scratch
#: block, A·P and the product's λV term, plus the float32 copy of P and of XᵀXP (2 halves).
CG_ARRAYS = 11
#: Float64 arrays of p x b live while Â⁻¹ is applied (pipeline/linalg/woodbury.py): the
#: right-hand sides U, the per-language solutions, their concatenation X, and the Woodbury
#: correction's outer product and its scaled copy.
SOLVE_ARRAYS = 5


@dataclass(frozen=True)
class DriverShape:
    """The sizes of one fit that a driver-memory formula reads.

    Attributes
    ----------
    method : str
        The method's name (it labels a ``state``).
    terms, concepts, docs, nnz : int
        p (all languages' vocabularies), K, n and the nonzeros z of X.
    r : int
        The rank the fit resolves (``train.r``, at most K - 1).
    block, basis : int
        The eigensolver's block width b and basis columns m (``solver``).
    cg_item : int
        Bytes per element of the CG vectors (``solver``).
    basis_item : int
        Bytes per element of the eigensolver's basis (``solver``: the passes' dtype).
    precond_rank : int
        ``train.precond_rank`` (``solver``).
    local : bool
        The local backend: X, and every language's CG, live in the driver.
    unfused_terms : int or None
        Spark backend: Σ p_l of the languages whose CG runs on the driver (not fused into
        tasks); None when there is none.
    spill_rows : int or None
        ``train.spill_dir`` is set: the basis and the kept images are files of which the
        process holds only the rows of the products' chunks in flight, at most this many
        (:func:`pipeline.linalg.dense.resident_rows`; ``solver``). None: in memory.
    """

    method: str
    terms: int
    concepts: int
    docs: int
    nnz: int
    r: int
    block: int = 0
    basis: int = 0
    cg_item: int = 8
    basis_item: int = 8
    precond_rank: int = 0
    local: bool = False
    unfused_terms: int | None = None
    spill_rows: int | None = None


# --- the parts (bytes) -----------------------------------------------------------------------


def basis_bytes(concepts: int, columns: int, item: int = 8) -> int:
    """The eigensolver's basis buffer: K x m, ``item`` bytes a number (Cr5: its passes'
    dtype, float32 by default), allocated once."""
    return item * concepts * columns


def images_bytes(terms: int, columns: int) -> int:
    """The kept images Â⁻¹CV: p x columns float32."""
    return 4 * terms * columns


def spilled_bytes(concepts: int, terms: int, columns: int, block: int, item: int, rows: int) -> int:
    """The basis and the kept images in files (``train.spill_dir``): what the process holds
    of them at once, the in-memory copy of the block being applied (K x b) and the row
    chunks in flight of a product (at most ``rows`` rows) of the larger of the two (the
    basis in ``item`` bytes, the images float32)."""
    chunks = max(min(concepts, rows) * item, min(terms, rows) * 4) * columns
    return item * concepts * block + chunks


def solve_bytes(terms: int, block: int) -> int:
    """Applying Â⁻¹ to a block: :data:`SOLVE_ARRAYS` float64 p x b arrays."""
    return 8 * SOLVE_ARRAYS * terms * block


def ritz_images_bytes(terms: int, r: int) -> int:
    """The eigensolver's result: the Ritz vectors' images Φ*ᵀ, p x r float32, made while
    the kept images are still alive but after the basis is freed (the end of the
    eigensolver). Φ's own step comes after the images are freed and writes Φᵀ over Φ*ᵀ: no
    larger than this (8 p r, and the basis kept, when a λ path's start keeps Φ*ᵀ and the
    leading Ritz vectors: not counted)."""
    return 4 * terms * r


def precond_bytes(terms: int, rank: int) -> int:
    """The CG preconditioners' p_l x k float32 bases, all languages."""
    return 4 * terms * rank


def ct_results_bytes(rows: int, block: int) -> int:
    """Cᵀ-product results: ``rows`` (the K x b sum and each language's own rows) float64."""
    return 8 * rows * block


def x_bytes(nnz: int, docs: int) -> int:
    """X on the local backend: float32 values and int32 indices per nonzero, int64 row
    pointers and concept ids per document."""
    return 8 * nnz + 16 * docs


def cg_bytes(terms: int, block: int, item: int) -> int:
    """Block CG vectors of languages of ``terms`` terms: :data:`CG_ARRAYS` p_l x b arrays
    of ``item`` bytes."""
    return CG_ARRAYS * item * terms * block


# --- the formulas ----------------------------------------------------------------------------


def solver_need(memory: DriverMemory, s: DriverShape) -> dict[str, int]:
    """``solver``: Cr5's eigensolver, by part, at the larger of its moments. In an
    iteration: the basis (K x m, float32 or float64 as the passes), the kept images (p x m
    float32), and the larger of applying Â⁻¹ (p x b float64 arrays) and applying Cᵀ (its
    p x b input and the Cᵀ results), which follow each other. At the eigensolver's end the
    basis and those arrays are freed (their heap pages returned to the OS) before the
    result, the Ritz vectors' images (p x r float32), is made beside the kept images:
    counted by what it exceeds them by. Always:
    the preconditioners; X itself on the local backend, and the CG vectors of the languages
    whose CG runs on the driver (all of them on the local backend). With ``spill_rows`` the
    basis and the images count only the rows the process holds of their files."""
    basis = basis_bytes(s.concepts, s.basis, s.basis_item)
    images = images_bytes(s.terms, s.basis)
    freed = basis  # what the end moment no longer holds of the iterations' arrays
    if s.spill_rows is not None:
        basis = spilled_bytes(s.concepts, s.terms, s.basis, s.block, s.basis_item, s.spill_rows)
        images = 0
        # the end reads the images' rows in chunks beside the Ritz images: only the block's
        # copy is gone
        freed = s.basis_item * s.concepts * s.block
    products = max(
        solve_bytes(s.terms, s.block),
        8 * s.terms * s.block + ct_results_bytes(s.concepts + s.docs, s.block),
    )
    parts = {
        "base": DRIVER_PYTHON_BASE,
        "basis": basis,
        "images": images,
        "solve or Cᵀ results": products,
        "preconditioners": precond_bytes(s.terms, s.precond_rank),
        # the end moment's p x r array beyond the arrays it replaces: the basis and the
        # products' arrays, whose heap pages the fit returns to the OS first
        # (allocator.release_free_memory); the Φ step after it is no larger (Φᵀ written
        # over Φ*ᵀ)
        "Ritz images beyond the freed arrays": max(
            0, ritz_images_bytes(s.terms, s.r) - freed - products
        ),
    }
    if s.local:
        parts["X"] = x_bytes(s.nnz, s.docs)
        parts["CG vectors"] = cg_bytes(s.terms, s.block, s.cg_item)
    elif s.unfused_terms is not None:
        parts["CG vectors"] = cg_bytes(s.unfused_terms, s.block, s.cg_item)
    return parts


def state_need(memory: DriverMemory, s: DriverShape) -> dict[str, int]:
    """``state``: the Python base, a state of ``memory.pr_arrays`` float64 p x r arrays
    and, on the local backend, X."""
    parts = {
        "base": DRIVER_PYTHON_BASE,
        f"{s.method} state": int(memory.pr_arrays * 8 * s.terms * s.r),
    }
    if s.local:
        parts["X"] = x_bytes(s.nnz, s.docs)
    return parts


def base_need(memory: DriverMemory, s: DriverShape) -> dict[str, int]:
    """``base``: the Python base only."""
    return {"base": DRIVER_PYTHON_BASE}


#: The formula of each :attr:`DriverMemory.formula <pipeline.methods.spec.DriverMemory>`.
FORMULAS: dict[str, Callable[[DriverMemory, DriverShape], dict[str, int]]] = {
    "solver": solver_need,
    "state": state_need,
    "base": base_need,
}


def driver_need(memory: DriverMemory, shape: DriverShape) -> dict[str, int]:
    """The driver Python's peak of a fit of ``shape`` (bytes, by part) by the formula
    ``memory`` (a method's spec's ``driver_memory``) names."""
    return FORMULAS[memory.formula](memory, shape)
