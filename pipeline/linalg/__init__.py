"""Numerical core of Cr5: block operators, the corpus-backend contract and the solvers.

Maths only: numpy and scipy, never Spark, pyarrow or datasets. The engines that implement
:class:`~pipeline.linalg.backend.CorpusBackend` (local scipy CSR, Spark executors) live in the
sibling package :mod:`pipeline.backends` and plug into the same solvers. Defaults of every
solver parameter come from :mod:`pipeline.config` (``train.*``).
"""

from pipeline.linalg.backend import PASS_DTYPES, CorpusBackend, TermLayout
from pipeline.linalg.block_cg import BlockCGResult, block_cg
from pipeline.linalg.block_lanczos import LanczosResult, LanczosState, block_lanczos
from pipeline.linalg.checkpoint import CheckpointMismatchError, CheckpointStore
from pipeline.linalg.cr5 import Cr5Result, Cr5Solver, CrossCovariance, solve_cr5
from pipeline.linalg.operator import BlockOperator, CallableOperator, DenseOperator
from pipeline.linalg.woodbury import GramOperator, WoodburyInverse, global_mean

__all__ = [
    "PASS_DTYPES",
    "BlockCGResult",
    "BlockOperator",
    "CallableOperator",
    "CheckpointMismatchError",
    "CheckpointStore",
    "CorpusBackend",
    "Cr5Result",
    "Cr5Solver",
    "CrossCovariance",
    "DenseOperator",
    "GramOperator",
    "LanczosResult",
    "LanczosState",
    "TermLayout",
    "WoodburyInverse",
    "block_cg",
    "block_lanczos",
    "global_mean",
    "solve_cr5",
]
