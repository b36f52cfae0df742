"""The load error every model family raises (models/common.py re-exports it)."""


class ModelLoadError(RuntimeError):
    """A base model could not be loaded; the message says which value was wrong and what to do."""
