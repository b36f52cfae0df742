"""A tool's job followed as the page follows it: the panel's poll, until its timer stops."""

import time


def poll_to_end(panel, job_id: str, timeout: float = 120) -> tuple:
    """The panel's last poll of `job_id`: its outputs once the job has ended (or `timeout` passed)."""
    deadline = time.time() + timeout
    while True:
        out = panel.poll(job_id)
        if not out[3].active or time.time() > deadline:
            return out
        time.sleep(0.2)
