"""Property-based: any JSON value in any option gives either a valid config or a message that
names the option; never a traceback. The checks that run before a start (doctor) never crash
on a config that loads, and a config they reject starts no run."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ot_gradio.config.doctor import check, errors
from ot_gradio.config.fields import iter_fields
from ot_gradio.config.io import ConfigError, config_to_dict, load_config
from ot_gradio.config.schema import TrainConfig

# every option path, list items through their first element (concepts.0.name, samples.0.seed)
PATHS = sorted({f.path.replace("[]", ".0") for f in iter_fields(TrainConfig) if f.path != "config_version"})

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)


def _base() -> dict:
    data = config_to_dict(TrainConfig(), include_secrets=True)
    data["concepts"] = [config_to_dict(TrainConfig(concepts=[{"name": "c", "path": "data"}]))["concepts"][0]]
    data["samples"] = [config_to_dict(TrainConfig(samples=[{"prompt": "p"}]))["samples"][0]]
    return data


def _put(data: dict, path: str, value) -> None:
    parts = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = data
    for part in parts[:-1]:
        if isinstance(part, int) and isinstance(node, list) and len(node) <= part:
            node.append({})  # a list item with every key at its default
        if isinstance(node, dict) and part not in node:
            node[part] = {}
        if isinstance(node[part], dict | list):
            node = node[part]
        else:  # a group set to a plain value above: replace it
            node[part] = {}
            node = node[part]
    node[parts[-1]] = value


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=json_values)
def test_any_json_value_in_any_option_is_named_or_accepted(path, value):
    data = _base()
    _put(data, path, value)
    data = json.loads(json.dumps(data))  # exactly what a file could hold
    try:
        loaded = load_config(data)
    except ConfigError as err:
        name = path.split(".")[-1]
        assert err.errors, "a rejected config lists its problems"
        assert any(name in line for line in err.errors), (path, value, err.errors)
        return
    # a config that loads can be checked, saved and loaded again
    check(loaded.config)
    for problem in errors(loaded.config):
        assert ":" in problem or " " in problem
    again = load_config(config_to_dict(loaded.config))
    assert config_to_dict(again.config) == config_to_dict(loaded.config)


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_any_json_document_is_a_config_or_a_message(value):
    try:
        load_config(value if isinstance(value, dict) else {"model_type": value})
    except ConfigError as err:
        assert err.errors



def test_every_option_rejects_a_wrong_shape_by_name():
    """Exhaustive and deterministic: a nested list in each option in turn is refused naming that
    option (or accepted where a list is valid), so the property above is not vacuous."""
    rejected = 0
    for path in PATHS:
        data = _base()
        _put(data, path, [[None]])
        try:
            load_config(data)
        except ConfigError as err:
            rejected += 1
            assert any(path.split(".")[-1] in line for line in err.errors), (path, err.errors)
    assert rejected > len(PATHS) // 2
