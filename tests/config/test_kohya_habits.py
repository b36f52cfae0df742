"""What a kohya_ss user types that means something else here is said before the run, with the
setting that does what they meant."""

from ot_gradio.config.doctor import check
from ot_gradio.config.io import load_config


def _warnings(**config) -> list[str]:
    return check(load_config({"training_method": "LORA", "concepts": [{"name": "c", "path": "/tmp"}], **config}).config)


def test_kohyas_width_comma_height_resolution_is_said_to_be_two_sizes_here():
    (warning,) = [w for w in _warnings(resolution="512,768") if "Training → Resolution" in w]
    assert "512x512 and 768x768" in warning and "write 512x768" in warning
    for fine in ("512", "512,512", "768x512", "384,448,512", "512x768,768x512"):
        assert not [w for w in _warnings(resolution=fine) if "Training → Resolution" in w], fine


def test_kohyas_sample_prompt_options_are_named_with_the_fields_that_hold_them():
    samples = [{"prompt": "ohwx woman, smiling --n blurry, lowres --w 512 --h 768 --d 42 --l 6 --s 28"},
               {"prompt": "a plain prompt -- with dashes and --nothing"}, {"prompt": "ohwx --n bad", "enabled": False},
               {"prompt": "ohwx woman --s 30"}]
    (warning,) = [w for w in _warnings(samples=samples) if "kohya's sample options" in w]
    assert warning.startswith("Sampling → samples 1, 4: ")
    assert "(--n, --w, --h, --d, --l, --s)" in warning and "--n → Negative prompt" in warning and "--s → Steps" in warning
    assert not [w for w in _warnings(samples=samples[1:3]) if "kohya" in w]
