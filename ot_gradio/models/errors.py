"""The load error every model family raises (models/common.py re-exports it)."""


class ModelLoadError(RuntimeError):
    """A base model could not be loaded; the message says which value was wrong and what to do."""


def first_line(error: BaseException) -> str:
    """An exception's first line for a message (its type's name when it says nothing)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
