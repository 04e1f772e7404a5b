"""Neural crosslingual document encoders trained with PyTorch: XCNN, T-LASER, cT-LASER.

Nothing here imports Spark (but :mod:`pipeline.neural.distributed`); PyTorch is the optional
``neural`` extra, imported only by the modules that need it, so :mod:`pipeline.neural.params`
loads without it.
"""
