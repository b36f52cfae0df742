"""'Every N units' decisions for sampling, backups and saves (OneTrainer's TimeUnit)."""

from __future__ import annotations

import time

from ..config.enums import TimeUnit

SECONDS_PER_UNIT = {TimeUnit.SECOND: 1.0, TimeUnit.MINUTE: 60.0, TimeUnit.HOUR: 3600.0}


class Every:
    """Due after every `n` steps or epochs, or after `n` seconds/minutes/hours of training.

    Nothing is due during the first `skip_first` units (steps, epochs, or seconds/minutes/hours
    of training), as OneTrainer counts them (every 5 steps skipping 1: 5, 10, ...; we skipped
    that many intervals). n = 0 or NEVER is never due; ALWAYS is due after every step."""

    def __init__(self, n: int, unit: TimeUnit, skip_first: int = 0, clock=time.monotonic):
        self.n = int(n)
        self.unit = TimeUnit(unit)
        self.skip_first = int(skip_first)
        self.clock = clock
        self.start = clock()
        self.last = self.start

    @property
    def never(self) -> bool:
        return self.unit == TimeUnit.NEVER or (self.n <= 0 and self.unit != TimeUnit.ALWAYS)

    def after_step(self, global_step: int) -> bool:
        if self.never:
            return False
        if self.unit == TimeUnit.ALWAYS:
            return True
        if self.unit == TimeUnit.STEP:
            return global_step > 0 and global_step % self.n == 0 and global_step > self.skip_first
        if self.unit in SECONDS_PER_UNIT:
            now = self.clock()
            period = self.n * SECONDS_PER_UNIT[self.unit]
            if now - self.last >= period and now - self.start > self.skip_first * SECONDS_PER_UNIT[self.unit]:
                self.last = now
                return True
        return False

    def after_epoch(self, epochs_done: int) -> bool:
        if self.never or self.unit != TimeUnit.EPOCH:
            return False
        return epochs_done > 0 and epochs_done % self.n == 0 and epochs_done > self.skip_first
