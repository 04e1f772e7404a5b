"""Numerical core of Cr5: block operators, corpus backends and the solvers.

Nothing here imports Spark: a Spark backend implements
:class:`~pipeline.linalg.backend.CorpusBackend` elsewhere and plugs into the same solvers.
"""

from pipeline.linalg.backend import PASS_DTYPES, CorpusBackend, TermLayout
from pipeline.linalg.block_cg import BlockCGResult, block_cg
from pipeline.linalg.block_lanczos import LanczosResult, LanczosState, block_lanczos
from pipeline.linalg.checkpoint import CheckpointMismatchError, CheckpointStore
from pipeline.linalg.cr5 import Cr5Result, Cr5Solver, CrossCovariance, solve_cr5
from pipeline.linalg.local_backend import LocalCorpusBackend
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
    "LocalCorpusBackend",
    "TermLayout",
    "WoodburyInverse",
    "block_cg",
    "block_lanczos",
    "global_mean",
    "solve_cr5",
]
