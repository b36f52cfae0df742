from ot_gradio.config.enums import TimeUnit
from ot_gradio.training.intervals import Every


def test_steps_and_skip_first():
    """Skip first counts units, as its tooltip and OneTrainer say (we skipped that many intervals)."""
    e = Every(5, TimeUnit.STEP, skip_first=1)
    assert [s for s in range(1, 21) if e.after_step(s)] == [5, 10, 15, 20]
    assert [s for s in range(1, 21) if Every(5, TimeUnit.STEP, skip_first=7).after_step(s)] == [10, 15, 20]
    epochs = Every(2, TimeUnit.EPOCH, skip_first=3)
    assert [n for n in range(1, 9) if epochs.after_epoch(n)] == [4, 6, 8]
    now = [0.0]
    minutes = Every(1, TimeUnit.MINUTE, skip_first=2, clock=lambda: now[0])
    due = []
    for second in range(0, 241, 10):
        now[0] = second
        if minutes.after_step(second):
            due.append(second)
    assert due == [130, 190]  # nothing in the first 2 minutes, then once a minute


def test_epochs():
    e = Every(2, TimeUnit.EPOCH)
    assert [n for n in range(1, 7) if e.after_epoch(n)] == [2, 4, 6]
    assert not any(e.after_step(s) for s in range(1, 50))


def test_never_and_zero():
    assert not Every(5, TimeUnit.NEVER).after_step(5)
    assert not Every(0, TimeUnit.STEP).after_step(5)
    assert Every(0, TimeUnit.ALWAYS).after_step(1)


def test_minutes_use_the_clock():
    now = [0.0]
    e = Every(1, TimeUnit.MINUTE, clock=lambda: now[0])
    now[0] = 30
    assert not e.after_step(1)
    now[0] = 61
    assert e.after_step(2)
    now[0] = 100
    assert not e.after_step(3)
    now[0] = 122
    assert e.after_step(4)
