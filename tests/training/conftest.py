"""Fixtures shared by the training tests."""

import pytest


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """$OT_GRADIO_TINY_DIR for a test file, so `tiny:<name>` never touches the user's cache. Per
    file, not per session: the variable is set back after the file, where tests/models' own
    session folder is in use (a session-wide setting here pointed its tiny models elsewhere)."""
    root = tmp_path_factory.mktemp("tiny-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OT_GRADIO_TINY_DIR", str(root))
        yield root
