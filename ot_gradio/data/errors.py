"""The one error the data layer raises for problems a user must fix before training."""

from __future__ import annotations


class DataError(Exception):
    """A concept cannot be used as configured (missing folder, no readable images, bad prompt
    file, ...). Raised while the dataset is built, so training never starts on bad data."""
