"""The charts' axes: aspect buckets in aspect order, step axes in whole steps (ui/charts.py)."""

import pandas as pd

from ot_gradio.ui.charts import MIN_STEP_SPAN, bucket_chart, bucket_order, step_chart, step_span


def test_buckets_run_from_the_tallest_to_the_widest_not_as_text():
    names = ["1024x512", "512x512", "384x640", "640x384", "512x1024", "768x768"]
    assert bucket_order(names) == ["512x1024", "384x640", "512x512", "768x768", "640x384", "1024x512"]
    frame = pd.DataFrame({"bucket": ["640x384", "512x512", "640x384"], "concept": ["a", "a", "b"], "images": [1, 2, 3]})
    update = bucket_chart(frame)
    assert update["sort"] == ["512x512", "640x384"] and update["value"] is frame
    assert update["y_lim"] == [0, 5]  # from 0: a bucket of one image has a bar; whole-image ticks
    many = pd.DataFrame({"bucket": ["512x512", "512x512"], "concept": ["a", "b"], "images": [7, 4]})
    assert bucket_chart(many)["y_lim"] == [0, 11]  # the report's bars stack the concepts


def test_a_step_axis_spans_the_run_and_at_least_ten_steps():
    frame = pd.DataFrame({"step": [1.0, 2.0, 3.0], "lr": [0.1, 0.1, 0.1]})
    assert step_chart(frame)["x_lim"] == [0, MIN_STEP_SPAN]  # 3 steps: not ticked 0.5, 1.0, 1.5...
    assert step_chart(frame, 600)["x_lim"] == [0, 600]
    assert step_span(1234, 600) == 1234  # past the planned end (a resumed run): all points shown
    assert step_chart(None) is None  # nothing to draw stays nothing


def test_no_buckets_clear_the_chart():
    """An empty frame (a concept with no images) drew an empty chart that kept drawing nothing
    for the next concept's buckets until a reload: no rows clear the chart instead."""
    import pandas as pd

    assert bucket_chart(pd.DataFrame([], columns=["bucket", "images"])) is None
    assert bucket_chart(None) is None
