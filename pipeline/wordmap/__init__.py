"""Word-level crosslingual retrieval and word-mapping baselines (pure numpy, no Spark).

* :mod:`~pipeline.wordmap.lexicon`: bilingual lexicons (ours, ``source<TAB>target``, or
  MUSE's ``source target``) and their seeded train/validation/test split by source word;
* :mod:`~pipeline.wordmap.store`: the word-vector files the mappings read;
  :mod:`~pipeline.wordmap.vecfile` imports fastText's and MUSE's ``.vec`` text files into
  them (``python -m pipeline import-vec``);
* :mod:`~pipeline.wordmap.translation`: word translation evaluation (P@1/5/10, cosine and
  CSLS over a whole target vocabulary), for any word vectors (Cr5's Φ rows, mapped word2vec);
* :mod:`~pipeline.wordmap.mapping`: orthogonal Procrustes and RCSLS (Joulin et al. 2018), with
  optional refinement on mutual CSLS nearest neighbours.
"""
