"""Fixtures shared by the training tests."""

import pytest


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """$OT_GRADIO_TINY_DIR for the session: each tiny model is built once per test process, and
    `tiny:<name>` never touches the user's cache."""
    root = tmp_path_factory.mktemp("tiny-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OT_GRADIO_TINY_DIR", str(root))
        yield root
