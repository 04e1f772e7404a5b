"""Numerical core of Cr5: block operators, the corpus-backend contract and the solvers.

Maths only: numpy and scipy, never Spark, pyarrow, datasets or the application's
configuration. The engines that implement :class:`~pipeline.linalg.backend.CorpusBackend`
(local scipy CSR, Spark executors) live in the sibling package :mod:`pipeline.backends` and
plug into the same solvers. The solver parameters are declared here, in
:mod:`pipeline.linalg.params`, and the configuration's ``train`` section embeds them.

The names below load on first use (:mod:`pipeline.lazy`), so that importing
:mod:`pipeline.linalg.params` loads no numpy. The solvers are the functions of their modules
(:func:`pipeline.linalg.block_cg.block_cg`, :func:`pipeline.linalg.block_lanczos.block_lanczos`),
whose names the package attributes of those modules take.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from pipeline.linalg.backend import PASS_DTYPES, CorpusBackend, TermLayout
    from pipeline.linalg.block_cg import BlockCGResult
    from pipeline.linalg.block_lanczos import LanczosResult, LanczosState
    from pipeline.linalg.checkpoint import CheckpointMismatchError, CheckpointStore
    from pipeline.linalg.cr5 import Cr5Result, Cr5Solver, CrossCovariance, solve_cr5
    from pipeline.linalg.operator import BlockOperator, CallableOperator, DenseOperator
    from pipeline.linalg.params import Cr5Params
    from pipeline.linalg.woodbury import GramOperator, WoodburyInverse, global_mean

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "PASS_DTYPES": "backend",
        "CorpusBackend": "backend",
        "TermLayout": "backend",
        "BlockCGResult": "block_cg",
        "LanczosResult": "block_lanczos",
        "LanczosState": "block_lanczos",
        "CheckpointMismatchError": "checkpoint",
        "CheckpointStore": "checkpoint",
        "Cr5Result": "cr5",
        "Cr5Solver": "cr5",
        "CrossCovariance": "cr5",
        "solve_cr5": "cr5",
        "BlockOperator": "operator",
        "CallableOperator": "operator",
        "DenseOperator": "operator",
        "Cr5Params": "params",
        "GramOperator": "woodbury",
        "WoodburyInverse": "woodbury",
        "global_mean": "woodbury",
    },
)

__all__ = [
    "PASS_DTYPES",
    "BlockCGResult",
    "BlockOperator",
    "CallableOperator",
    "CheckpointMismatchError",
    "CheckpointStore",
    "CorpusBackend",
    "Cr5Params",
    "Cr5Result",
    "Cr5Solver",
    "CrossCovariance",
    "DenseOperator",
    "GramOperator",
    "LanczosResult",
    "LanczosState",
    "TermLayout",
    "WoodburyInverse",
    "global_mean",
    "solve_cr5",
]
