"""The evaluation experiment layer: it sits above the training service and the retrieval maths.

- :mod:`~pipeline.evaluation.protocol`: pairs, directions, roles and the per-direction metrics;
- :mod:`~pipeline.evaluation.engines`: the document pool, embedded and retrieved on the driver
  or over Spark;
- :mod:`~pipeline.evaluation.lambda_selection`: one model per λ, chosen on validation concepts;
- :mod:`~pipeline.evaluation.experiment`: the run, step by step (plan, leak check, model choice,
  test, baselines, report);
- :mod:`~pipeline.evaluation.report`: the evaluation rows, Markdown/JSON reports and plot.

Models are trained through :mod:`pipeline.training` (never through the stages); the retrieval
maths (top-k, CSLS, metrics) is :mod:`pipeline.retrieval`. The stages that drive this layer are
:mod:`pipeline.stages.split` and :mod:`pipeline.stages.evaluate`.
"""
