"""Project exceptions, all in one place.

Every error a user can trigger with bad input or configuration derives from
:class:`PipelineError`, so a job entry point can catch it, print the message
(which names the file, key or record and the fix) and exit non-zero without a
Java stack trace.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Base class of every error the pipeline raises on purpose."""


class ConfigError(PipelineError, ValueError):
    """A configuration file or override is invalid (unknown key, wrong type, bad value)."""


class InputDataError(PipelineError, ValueError):
    """Input data is malformed: missing columns, empty text, bad encoding, ..."""


class DatasetNotFoundError(PipelineError, FileNotFoundError):
    """A dataset an upstream stage should have written is missing or incomplete."""


class DatasetIntegrityError(PipelineError, RuntimeError):
    """What a writer is about to publish does not match its manifest; nothing is published."""


class ConcurrentWriteError(DatasetIntegrityError):
    """Another run is writing the same dataset (or took over this run's write lock)."""


class DamagedDatasetError(PipelineError, RuntimeError):
    """A published dataset or model no longer matches its manifest (a file truncated, changed,
    missing or unreadable since it was written): the message names the dataset, the file, the
    stage that writes it and the command that rebuilds it."""


class EnvironmentFailure(PipelineError, RuntimeError):
    """The environment failed (an unreachable cluster, lost executors, no memory or disk
    space, changed permissions): the message names what failed, where, and the fix."""


class ModelError(PipelineError, ValueError):
    """A model directory is missing, corrupted, truncated or of an unknown version."""


class SolverError(PipelineError, ArithmeticError):
    """A numerical solver broke down (NaN/Inf, loss of positive definiteness, ...)."""


class BreakdownError(SolverError):
    """A Krylov method lost orthogonality or met a singular block it cannot recover from."""


class ConvergenceWarning(UserWarning):
    """A solver stopped at its iteration cap before meeting its tolerance."""


class DamagedModelError(ModelError, DamagedDatasetError):
    """A model file no longer matches ``model.json`` (truncated, changed or missing)."""
