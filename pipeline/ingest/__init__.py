"""Ingestion: aligned corpora (and, later, Wikipedia dumps) into ``documents``."""
