"""Tiny models saved once per test session, in the layouts real models use."""

from __future__ import annotations

import logging

import pytest  # noqa: E402

from ot_gradio.models.sd15 import StableDiffusion15
from tests.models.family_checks import family_fixtures


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """$OT_GRADIO_TINY_DIR for the session, so `tiny:sd15` never touches the user's cache."""
    root = tmp_path_factory.mktemp("tiny-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OT_GRADIO_TINY_DIR", str(root))
        yield root


# `sd15`: one loaded tiny SD 1.5 for tests that do not change its weights
tiny_sd15_paths, sd15 = family_fixtures("sd15", StableDiffusion15, "tiny_sd15_paths", "sd15", scope="session")


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def library_warnings():
    """Warnings that diffusers and transformers log (they do not propagate to pytest's caplog)."""
    handler = _Collect()
    loggers = [logging.getLogger(name) for name in ("diffusers", "transformers")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.messages
    for logger in loggers:
        logger.removeHandler(handler)
