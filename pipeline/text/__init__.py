"""Text processing: the single tokeniser used for training and inference."""

from pipeline.text.tokenizer import Tokenizer

__all__ = ["Tokenizer"]
