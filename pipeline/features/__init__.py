"""Features: vocabulary, IDF and TF-IDF assembly."""
