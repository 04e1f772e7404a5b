"""Cr5-on-Spark: crosslingual document embeddings (Cr5) trained and served on Spark."""

__version__ = "0.1.0"
