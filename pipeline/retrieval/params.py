"""The retrieval maths' parameters, declared once (:func:`~pipeline.params.param`).

:mod:`~pipeline.retrieval.topk` and :mod:`~pipeline.retrieval.csls` take their keyword
defaults from :data:`RETRIEVAL_DEFAULTS`; the configuration's ``evaluate`` section embeds
:class:`RetrievalParams` (:class:`pipeline.config.EvaluateConfig` subclasses it), so
``evaluate.csls_k`` *is* :attr:`RetrievalParams.csls_k`.

This module imports nothing but :mod:`pipeline.params` and the standard library: the
configuration, which the Airflow DAG imports without numpy, embeds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.params import param

__all__ = ["RETRIEVAL_DEFAULTS", "RetrievalParams"]


@dataclass(frozen=True)
class RetrievalParams:
    """Exact blocked top-k retrieval and CSLS; the keys ``evaluate.<name>``."""

    csls_k: int = param(10, lo=1, doc="CSLS neighbourhood size.")
    block_q: int = param(1024, lo=1, doc="Query rows per scoring block (bounds memory).")
    block_c: int = param(4096, lo=1, doc="Candidate rows per scoring block (bounds memory).")


#: The declared defaults, for keyword defaults of the retrieval functions.
RETRIEVAL_DEFAULTS = RetrievalParams()
