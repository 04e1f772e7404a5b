"""One loader for every model directory: the linear maps (Cr5, the baselines, XCNN) and the
neural encoders (T-LASER, cT-LASER), each with the same embedding interface
(``languages``, ``dim``, ``is_sparse``, ``embed``, ``embed_with_counts``, ``encode``).

The neural encoders need PyTorch (the ``neural`` extra); it is imported only when such a
model is loaded, so the linear models load without it.
"""

from __future__ import annotations

import os
from typing import Any

from pipeline.model.cr5_model import Cr5Model
from pipeline.model.format import read_model_json

__all__ = ["load_model"]


def load_model(path: str | os.PathLike, *, verify: bool = True, lazy: bool = False) -> Any:
    """The model at ``path``: a :class:`~pipeline.model.Cr5Model`, or for an encoder
    method a :class:`~pipeline.model.encoder_model.EncoderModel` (``lazy``: see
    :meth:`Cr5Model.load`)."""
    meta = read_model_json(path)
    if meta.get("phi_format") == "encoder":
        from pipeline.model.encoder_model import EncoderModel

        return EncoderModel.load(path, verify=verify)
    return Cr5Model.load(path, verify=verify, lazy=lazy)
