"""Trained models: the on-disk format and the embedding API."""

from pipeline.model.cr5_model import Cr5Model
from pipeline.model.format import MODEL_SCHEMA_VERSION, LanguageMap, load_model_files, save_model

__all__ = ["MODEL_SCHEMA_VERSION", "Cr5Model", "LanguageMap", "load_model_files", "save_model"]
