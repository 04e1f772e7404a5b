"""Embedding documents with a trained model: the Spark job, the CLI, pretrained import."""
