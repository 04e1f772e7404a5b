"""The methods: what each one is (:mod:`~pipeline.methods.registry`, one
:class:`~pipeline.methods.spec.MethodSpec` entry per method) and its fit (one module each).

- :mod:`~pipeline.methods.spec`: :class:`MethodSpec`, the fields every method declares;
- :mod:`~pipeline.methods.registry`: the entries, :func:`get_method`, :func:`register`;
- :mod:`~pipeline.methods.fitted`: :class:`FittedModel`, what every fit returns;
- one module per method with its ``fit(t, data, checkpoint)``: ``cr5``, ``untranslated``,
  ``cl_lsi``, ``cca``, ``opca`` (corpus-level, sharing :mod:`~pipeline.methods.corpus`),
  ``jplsa``, ``cplsa`` (sharing :mod:`~pipeline.methods.topic_models`), ``s2net``
  (concept-grouped), ``xcnn``, ``tlaser``, ``ctlaser`` (neural, sharing
  :mod:`~pipeline.methods.neural`).

The registry and the spec load without numpy (the configuration checks ``train.method``
against them); the names below load on first use (:mod:`pipeline.lazy`), and the training
service (:mod:`pipeline.training.fit`) imports a method's fit when it trains one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.lazy import lazy_exports

if TYPE_CHECKING:
    from pipeline.methods.fitted import FittedModel
    from pipeline.methods.registry import (
        all_methods,
        find_method,
        get_method,
        method_names,
        register,
        registered,
        unregister,
    )
    from pipeline.methods.spec import DriverMemory, MethodSpec

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FittedModel": "fitted",
        "all_methods": "registry",
        "find_method": "registry",
        "get_method": "registry",
        "method_names": "registry",
        "register": "registry",
        "registered": "registry",
        "unregister": "registry",
        "DriverMemory": "spec",
        "MethodSpec": "spec",
    },
)

__all__ = [
    "DriverMemory",
    "FittedModel",
    "MethodSpec",
    "all_methods",
    "find_method",
    "get_method",
    "method_names",
    "register",
    "registered",
    "unregister",
]
