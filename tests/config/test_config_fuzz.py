"""Property-based: any JSON value in any option gives either a valid config or a message that
names the option; never a traceback. The checks that run before a start (doctor) never crash
on a config that loads, and a config they reject starts no run."""

import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ot_gradio.config.doctor import check, errors
from ot_gradio.config.fields import enum_of, iter_fields, strip_optional
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


# --- every field, every kind of wrong value -----------------------------------------------------
# Generated from iter_fields: every option, nested groups included (concepts[0].image.*, samples[0].*,
# unet.* and the other model parts, optimizer.*, embedding.*, ...). A value is either accepted or
# refused with a ConfigError line that starts with the option's full path; never a traceback.
# Some values must always be refused: true/false, NaN, infinity and float32-overflowing numbers in
# a numeric option, numbers beyond an option's bounds, and lists/objects where a plain value goes.

FLOAT_MAX = 3.4028234663852886e38
LONG = "x" * 5000
STRANGE = ["", LONG, "nul\x00byte", "\udcff\ufffd broken \ud800 utf-8", "../" * 40 + "etc/passwd", "{\"a\": 1}"]
WRONG_SHAPES = [[], [1, "a"], {"a": 1}, {}]


def _kind(f) -> str:
    t = strip_optional(f.type)
    if enum_of(f.type) is not None:
        return "enum"
    if f.choices:  # text with suggested values (layer presets also take a family's own names)
        return "str"
    return {bool: "bool", int: "int", float: "float", str: "str"}.get(t, "other")


def _nullable(f) -> bool:
    return strip_optional(f.type) is not f.type


def bad_values(f) -> list[tuple[object, bool]]:
    """(value, must_be_refused) pairs for one option."""
    kind = _kind(f)
    out: list[tuple[object, bool]] = []
    if kind in ("int", "float"):
        allow_inf = _allows_inf(f)
        out += [(True, True), (False, True), ("text", True), (LONG, True), ("", True)]
        out += [(float("nan"), True), ("NaN", True), (float("inf"), not allow_inf), (float("-inf"), True),
                ("Infinity", not allow_inf), (1e308, True), (-1e308, True), (FLOAT_MAX * 1.5, True)]
        out += [(2**70, kind == "int"), (-(2**70), kind == "int")]  # beyond int64; a float32 holds it
        for name, bound in f.bounds.items():
            step = 1 if kind == "int" else max(abs(bound) * 1e-3, 1e-6)
            beyond = {"ge": bound - step, "gt": bound, "le": bound + step, "lt": bound}[name]
            out.append((int(beyond) if kind == "int" and float(beyond).is_integer() else beyond, True))
        if kind == "int":
            out.append((1.5, True))
        out += [(v, True) for v in WRONG_SHAPES]
    elif kind == "bool":
        out += [(2, True), (-1, True), (1.5, True), ("maybe", True), (LONG, True), (float("nan"), True)]
        out += [(v, True) for v in WRONG_SHAPES]
    elif kind == "str":
        out += [(7, True), (1.5, True), (True, True), (float("nan"), True)] + [(v, True) for v in WRONG_SHAPES]
        out += [(v, False) for v in STRANGE]
    elif kind == "enum":
        # true/false: older OneTrainer configs had booleans where enums are now (gradient_checkpointing)
        out += [(7, True), (True, False), ("NOT_A_CHOICE", True), ("", True), (LONG, True), ("\udcff", True)]
        out += [(v, True) for v in WRONG_SHAPES]
    else:  # free-form dicts and lists (scheduler parameters, cloud settings)
        out += [(7, False), ("text", False), (True, False), (float("nan"), False), ([[None]], False), (LONG, False)]
    if not _nullable(f) and kind != "other":
        out.append((None, True))
    return out


def _allows_inf(f) -> bool:
    owner, name = _owner(f.path)
    meta = owner.model_fields[name].json_schema_extra
    return isinstance(meta, dict) and bool(meta.get("allow_inf"))


def _owner(path: str):
    from ot_gradio.config.fields import nested_section

    model = TrainConfig
    parts = path.replace("[]", "").split(".")
    for part in parts[:-1]:
        _, model = nested_section(model.model_fields[part].annotation)
    return model, parts[-1]


FIELDS = [f for f in iter_fields(TrainConfig) if not f.group and f.path != "config_version"]
CASES = [(f.path.replace("[]", ".0"), f.path.replace("[]", "[0]"), value, must) for f in FIELDS for value, must in bad_values(f)]
KINDS = {f.path.replace("[]", ".0"): _kind(f) for f in FIELDS}


def _named(err: ConfigError, shown: str) -> bool:
    """A line starts with the option's path (or with a path inside it: scheduler_params[0])."""
    return any(line.startswith(shown) and line[len(shown):][:1] in (":", " ", "[", ".") for line in err.errors)


def _try(data: dict) -> tuple[str, object]:
    """('ok', loaded) or ('refused', ConfigError) from load_config and, for a config that loads,
    the doctor's checks `validate` and `train` run; anything else raised fails the test."""
    try:
        loaded = load_config(json.loads(json.dumps(data)))
    except ConfigError as err:
        return "refused", err
    check(loaded.config)
    errors(loaded.config)
    return "ok", loaded


def test_every_field_gets_every_kind_of_wrong_value_without_a_traceback():
    """Exhaustive and deterministic: each bad value goes into every option at once (one
    load_config call per value and kind, ~30 calls), then into single options where the joint
    try cannot tell; tracebacks are collected, not stopped at."""
    tracebacks, unnamed, accepted_but_must_not = [], [], []
    by_value: dict[tuple[str, str], list] = {}
    for dotted, shown, value, must in CASES:
        by_value.setdefault((repr(value)[:60], type(value).__name__), []).append((dotted, shown, value, must))
    tries = 0
    for group in by_value.values():
        data = _base()
        for dotted, _, value, _ in group:
            _put(data, dotted, value)
        try:
            outcome, result = _try(data)
        except Exception:  # noqa: BLE001  find the option(s) that crash, one by one
            outcome, result = "crash", None
        for dotted, shown, value, must in group:
            tries += 1
            if outcome == "refused" and _named(result, shown):
                continue
            single = _base()
            _put(single, dotted, value)
            try:
                one, res = _try(single)
            except Exception as exc:  # noqa: BLE001
                tracebacks.append(f"{shown}={value!r:.40}: {type(exc).__name__}: {exc}"[:300])
                continue
            if one == "refused" and not _named(res, shown):
                unnamed.append((shown, repr(value)[:40], res.errors[:2]))
            elif one == "ok" and must:
                accepted_but_must_not.append((shown, repr(value)[:40]))
    assert tries == len(CASES) > 4000, tries
    assert not tracebacks, f"{len(tracebacks)} tracebacks:\n" + "\n".join(tracebacks[:20])
    assert not unnamed, f"{len(unnamed)} refusals that do not name the option: {unnamed[:10]}"
    assert not accepted_but_must_not, f"{len(accepted_but_must_not)} bad values accepted: {accepted_but_must_not[:20]}"


ONETRAINER_KEYS = sorted({f.path.split(".")[0].replace("[]", "") for f in FIELDS if "." not in f.path})


def test_sparse_onetrainer_style_configs_with_wrong_values_give_no_traceback():
    """A file without config_version is imported as OneTrainer's (its migrations, separate concept
    and sample files): the path the issue's three tracebacks took (concept_file_name 5,000
    characters or an object, timestep_distribution an object)."""
    tracebacks, tries = [], 0
    for key in ONETRAINER_KEYS:
        for value in [LONG, {"a": 1}, [[None]], 7, True, None, float("nan"), "\udcff"]:
            tries += 1
            try:
                load_config(json.loads(json.dumps({key: value})))
            except ConfigError as err:
                assert err.errors
            except Exception as exc:  # noqa: BLE001
                tracebacks.append(f"{key}={value!r:.30}: {type(exc).__name__}: {exc}"[:200])
    assert tries > 1000
    assert not tracebacks, f"{len(tracebacks)} tracebacks:\n" + "\n".join(tracebacks[:20])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), layout=st.sampled_from(["ours", "onetrainer"]))
def test_wrong_values_through_validate_are_refused_by_name(case, layout, tmp_path_factory):
    """The `validate` command on a file with one bad value (our layout, or OneTrainer's: no
    config_version): exit 0 or 2, never a traceback; a refusal names the option's full path."""
    import contextlib
    import io

    from ot_gradio.cli import main

    dotted, shown, value, must = case
    data = _base()
    if layout == "onetrainer":
        data.pop("config_version")
        # OneTrainer's from_dict: a number in a text field is its text, null keeps the default
        must = must and not (value is None or (KINDS[dotted] == "str" and isinstance(value, int | float) and not isinstance(value, bool)))
    _put(data, dotted, value)
    path = tmp_path_factory.mktemp("v") / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    (path.parent / "data").mkdir()  # the base config's concept folder: validate checks it exists
    (path.parent / "data" / "a.png").write_bytes(b"")  # an image name: an empty folder is refused
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(path.parent):
        code = main(["validate", "--config", str(path)])
    if code == 0:
        assert not must, (shown, value, "accepted")
    else:
        text = err.getvalue()
        assert code == 2 and any(f"{shown}{c}" in text for c in ":[."), (shown, value, text[:500])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES))
def test_wrong_values_through_set_are_refused_by_name(case, tmp_path_factory):
    """`--set path=value` (what `train --set` parses, run through `validate` so nothing trains):
    exit 0 or 2, never a traceback; a refusal names the option. (A text option takes `--set
    key=7` as the text "7", so acceptance is not checked here: the file fuzz above does that.)"""
    import contextlib
    import io

    from ot_gradio.cli import main

    dotted, shown, value, _ = case
    if dotted.split(".")[0] in ("concepts", "samples", "additional_embeddings") and dotted.split(".")[1:2] != ["0"]:
        return
    path = tmp_path_factory.mktemp("s") / "config.json"
    path.write_text(json.dumps(_base()), encoding="utf-8")
    (path.parent / "data").mkdir()
    (path.parent / "data" / "a.png").write_bytes(b"")  # an image name: an empty folder is refused
    key = dotted.replace(".0.", "[0].") if ".0." in dotted else dotted
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(path.parent):
        code = main(["validate", "--config", str(path), "--set", f"{key}={json.dumps(value, allow_nan=True)}"])
    text = _without_logging_errors(err.getvalue())
    assert code in (0, 2) and "Traceback" not in text, (shown, value, text[:500])
    if code == 2:
        assert shown.split("[")[0] in text or key.split("[")[0] in text, (shown, value, text[:500])


def _without_logging_errors(text: str) -> str:
    """stderr without the logging module's own "--- Logging error ---" reports: a library's log
    handler made during an earlier test writes to that test's captured stream, closed since, and
    logging reports that (with a traceback) on the stderr this test reads. Which test ran before
    depends on how pytest-xdist shares the files out; it is not this command's output."""
    return re.sub(r"--- Logging error ---\n.*?\nArguments: [^\n]*\n?", "", text, flags=re.S)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES))
def test_wrong_values_through_the_page_start_are_listed_by_name(case, tmp_path_factory):
    """The page's Start check (ui/page.validate, what the Start button runs before anything
    starts): never raises; a refused value is listed under its option's path."""
    from ot_gradio.ui.page import validate

    dotted, shown, value, must = case
    data = _base()
    _put(data, dotted, value)
    folder = tmp_path_factory.mktemp("p")
    (folder / "data").mkdir()
    (folder / "data" / "a.png").write_bytes(b"")  # an image name: an empty folder is refused
    data["concepts"][0]["path"] = str(folder / "data") if dotted != "concepts.0.path" else data["concepts"][0]["path"]
    valid, problems, _ = validate(data)
    if must:
        assert problems, (shown, value, "accepted")
    if valid is None:
        assert any(p.startswith(shown) for p in problems), (shown, value, problems[:3])


# --- files that are not what a config file holds ------------------------------------------------
# Whole classes of file, each through `validate` and `train` (exit 2, one "error:" line naming the
# file, never a traceback and never a hang) and as the page's autosaved ui-config.json (moved aside,
# the page starts): bytes that are not UTF-8, JSON nested deeper than any config, numbers too long
# to read, files far too large or with far too many concepts, a folder, a pipe.

def _config_text() -> str:
    return json.dumps(_base())


def _not_utf8(data: st.DataObject) -> bytes:
    text = _config_text().encode()
    at = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.sampled_from([b"\xff", b"\xfe\xfe", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80", b"\x80abc", b"\xf8\x88\x80\x80\x80"]))
    return text[:at] + junk + text[at:]


def _deep(data: st.DataObject) -> bytes:
    depth = data.draw(st.sampled_from([65, 200, 1000, 5000, 100_000]))
    opener, closer = data.draw(st.sampled_from([("[", "]"), ('{"a": ', "}")]))
    path = data.draw(st.sampled_from(PATHS))
    value = opener * depth + "1" + closer * depth
    base = _base()
    _put(base, path, "@@")
    return json.dumps(base).replace('"@@"', value).encode()


def _long_number(data: st.DataObject) -> bytes:
    digits = data.draw(st.sampled_from([400, 4299, 4301, 5000, 20_000]))
    sign = data.draw(st.sampled_from(["", "-"]))
    tail = data.draw(st.sampled_from(["", ".5", "e5", "e400"]))
    # (a float this long reads as infinity, which Prodigy's growth_rate takes: its default)
    path = data.draw(st.sampled_from([p for p in PATHS if p != "optimizer.growth_rate"] if tail else PATHS))
    base = _base()
    _put(base, path, "@@")
    return json.dumps(base).replace('"@@"', sign + "9" * digits + tail).encode()


def _many_concepts(data: st.DataObject) -> bytes:
    base = _base()
    key = data.draw(st.sampled_from(["concepts", "samples", "additional_embeddings"]))
    base[key] = [{}] * data.draw(st.sampled_from([5001, 20_000]))
    return json.dumps(base).encode()


FILE_CLASSES = {"not utf-8": _not_utf8, "deep": _deep, "long number": _long_number, "many items": _many_concepts}


def _run_cli(command: str, path, folder) -> tuple[int, str]:
    import contextlib
    import io

    from ot_gradio.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), contextlib.chdir(folder):
        code = main([command, "--config", str(path), "--workspace", str(folder / "ws")])
    return code, err.getvalue()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(FILE_CLASSES)), data=st.data())
def test_files_no_config_holds_are_refused_naming_file_or_option(kind, data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("f")
    (folder / "data").mkdir()
    path = folder / "config.json"
    path.write_bytes(FILE_CLASSES[kind](data))
    for command in ("validate", "train"):
        code, err = _run_cli(command, path, folder)  # any exception fails the test: a traceback
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and lines, (kind, command, err[:500])
        assert str(path) in lines[0] or kind in ("long number", "many items"), (kind, command, lines[0][:300])
        # bounded: the long number or the many items are not echoed (the longest message lists
        # the 33 model types, ~620 characters)
        assert len(lines[0]) < 1000 and "Traceback" not in err


def test_a_folder_a_pipe_or_a_huge_file_as_config_is_refused_at_once(tmp_path):
    import os
    import threading

    (tmp_path / "data").mkdir()
    folder = tmp_path / "a-folder.json"
    folder.mkdir()
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(40 * 1024 * 1024)  # sparse: 40 MB that take no disk space
    expect = {folder: "is a folder", pipe: "is not a regular file", huge: "40.0 MB is larger than the 16.0 MB"}
    for path, words in expect.items():
        for command in ("validate", "train"):
            result = {}

            def run(p=path, c=command, result=result):
                try:
                    result["out"] = _run_cli(c, p, tmp_path)
                except BaseException as exc:  # noqa: BLE001  a traceback: reported below
                    result["out"] = (None, f"{type(exc).__name__}: {exc}")

            worker = threading.Thread(target=run, daemon=True)
            worker.start()
            worker.join(60)
            assert "out" in result, f"{command} --config {path.name} hangs"
            code, err = result["out"]
            assert code == 2 and f"error: --config: {path}: {words}" in err, (command, err[:400])


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(FILE_CLASSES)), data=st.data())
def test_an_unreadable_autosaved_page_config_is_moved_aside_and_the_page_starts(kind, data, tmp_path_factory):
    from ot_gradio.ui.state import UI_CONFIG, load_ui_config

    workspace = tmp_path_factory.mktemp("ws")
    text = FILE_CLASSES[kind](data)
    (workspace / UI_CONFIG).write_bytes(text)
    config = load_ui_config(workspace)
    assert isinstance(config, dict) and config.get("model_type")
    assert not (workspace / UI_CONFIG).exists()
    assert (workspace / f"{UI_CONFIG}.unreadable").read_bytes() == text  # nothing is lost
