"""Reading a JSON file or text that should hold a config (or OneTrainer's concepts/samples list),
with bounds on its size, nesting and list lengths, and ConfigError naming the file and the fault.
Below config/io.py and config/onetrainer.py, which both read such files."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from ot_gradio.fsutil import human_bytes

from .validation import ConfigError

MAX_CONFIG_BYTES = 16 * 1024 * 1024  # a config with hundreds of concepts is well under 1 MB
MAX_LIST_ITEMS = {"concepts": 5000, "samples": 1000, "additional_embeddings": 1000}
MAX_DEPTH = 64  # our configs nest 4 levels deep; JSON nested deeper is not a config


def read_json(path: str | Path, what: str = "", expect: type = dict) -> Any:
    """A config (or OneTrainer's concepts/samples) JSON file, or ConfigError naming the file and
    what is wrong with it: missing, a folder or a pipe, larger than MAX_CONFIG_BYTES, not UTF-8,
    not JSON, nested too deeply, a number too long, or not of the `expect`ed type."""
    path = Path(path)
    label = f"{what}: {path}" if what else str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"{label}: file not found") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"{label}: cannot be read ({getattr(err, 'strerror', None) or err})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{label}: is a folder; give the path of a JSON file") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{label}: is not a regular file (a pipe, socket or device); give the path of a JSON file")
    if info.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{label}: {human_bytes(info.st_size)} is larger than the {human_bytes(MAX_CONFIG_BYTES)} a "
                          "config file may have; this is not a config (or holds far too many concepts)")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"{label}: cannot be read ({err.strerror or err})") from None
    suffix = path.suffix.lower()
    if suffix == ".env" or path.name.lower().endswith(".env"):  # SimpleTuner's config.env
        from .simpletuner_env import parse_env_text  # noqa: PLC0415

        data = parse_env_text(raw, label)
    else:
        data = (parse_toml_text(raw, label) if suffix == ".toml" else parse_yaml_text(raw, label) if suffix in YAML_SUFFIXES
                else parse_json_text(raw, label))
    if not isinstance(data, expect):
        kind = "a JSON object ({...})" if expect is dict else "a JSON list ([...])"
        raise ConfigError(f"{label}: must hold {kind}, not a {type(data).__name__}")
    return data


def parse_json_text(raw: bytes | str, label: str) -> Any:
    """JSON text (UTF-8, a BOM allowed) -> a value, or ConfigError starting with `label`."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{label}: larger than the {human_bytes(MAX_CONFIG_BYTES)} a config may have")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise ConfigError(f"{label}: is not UTF-8 text (byte 0x{raw[err.start]:02x} at position {err.start}); "
                              "save it as UTF-8") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{label}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except RecursionError:
        raise ConfigError(f"{label}: nested too deeply to be a config (more than {MAX_DEPTH} levels)") from None
    except ValueError as err:  # an integer of more than 4,300 digits
        raise ConfigError(f"{label}: holds a number too long to read ({str(err).split(';')[0]})") from None
    check_shape(data, label)
    return data


def parse_toml_text(raw: bytes, label: str) -> dict[str, Any]:
    """TOML (sd-scripts' config and dataset files) -> a dict, or ConfigError starting with `label`."""
    import tomllib  # noqa: PLC0415

    try:
        data = tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{label}: is not UTF-8 text (position {err.start}); save it as UTF-8") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{label}: not valid TOML ({err})") from None
    except RecursionError:
        raise ConfigError(f"{label}: nested too deeply to be a config (more than {MAX_DEPTH} levels)") from None
    check_shape(data, label)
    return data


YAML_SUFFIXES = (".yaml", ".yml")
# an ai-toolkit job is a few kB: a YAML config is read up to this size (PyYAML is slow on big files)
MAX_YAML_BYTES = 256 * 1024


def parse_yaml_text(raw: bytes, label: str) -> Any:
    """YAML (ai-toolkit's job files) -> a value, or ConfigError starting with `label`. Read with
    PyYAML's safe loader (no objects built), its first document only, without aliases (a config
    needs none, and nested aliases make a few bytes expand to billions of values) and without YAML
    1.1's base-60 numbers (`1:30` stays text, as YAML 1.2 reads it; building them takes quadratic time)."""
    if len(raw) > MAX_YAML_BYTES:
        raise ConfigError(f"{label}: {human_bytes(len(raw))} is larger than the {human_bytes(MAX_YAML_BYTES)} a YAML config may "
                          "have; this is not a training job")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{label}: is not UTF-8 text (position {err.start}); save it as UTF-8") from None
    import yaml  # noqa: PLC0415

    loader = _yaml_loader()(text)
    try:
        data = loader.get_data() if loader.check_data() else None
    except _YamlAlias as err:
        raise ConfigError(f"{label}: uses a YAML alias (*name, line {err.args[0]}); write the value out instead") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{label}: not valid YAML ({getattr(err, 'problem', None) or str(err).splitlines()[0]}{where})") from None
    except RecursionError:
        raise ConfigError(f"{label}: nested too deeply to be a config (more than {MAX_DEPTH} levels)") from None
    except ValueError as err:  # an integer of more than 4,300 digits
        raise ConfigError(f"{label}: holds a number too long to read ({str(err).split(';')[0]})") from None
    finally:
        loader.dispose()
    check_shape(data, label)
    return data


class _YamlAlias(Exception):
    pass


_LOADER = None


def _yaml_loader():
    """PyYAML's SafeLoader without aliases and base-60 numbers (built once, on the first YAML file)."""
    global _LOADER  # noqa: PLW0603
    if _LOADER is None:
        import yaml  # noqa: PLC0415

        class StrictLoader(yaml.SafeLoader):
            def compose_node(self, parent, index):
                if self.check_event(yaml.AliasEvent):
                    raise _YamlAlias(self.peek_event().start_mark.line + 1)
                return super().compose_node(parent, index)

            def sexagesimal_as_text(self, node):
                value = self.construct_scalar(node)
                if ":" in value:
                    return value
                return (yaml.SafeLoader.construct_yaml_int if node.tag.endswith(":int") else yaml.SafeLoader.construct_yaml_float)(self, node)

        for tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
            StrictLoader.add_constructor(tag, StrictLoader.sexagesimal_as_text)
        _LOADER = StrictLoader
    return _LOADER


def check_shape(data: Any, label: str = "config") -> None:
    """ConfigError for a value nested deeper than MAX_DEPTH or with more concepts, samples or
    embeddings than MAX_LIST_ITEMS allows (a 400,000-concept config took minutes and gigabytes)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"{label}: nested too deeply to be a config (more than {MAX_DEPTH} levels)")
        if isinstance(value, dict):
            stack += [(v, depth + 1) for v in value.values() if isinstance(v, (dict, list))]
        elif isinstance(value, list):
            stack += [(v, depth + 1) for v in value if isinstance(v, (dict, list))]
    if isinstance(data, dict):
        for key, most in MAX_LIST_ITEMS.items():
            items = data.get(key)
            if isinstance(items, list) and len(items) > most:
                raise ConfigError(f"{key}: {len(items)} items; at most {most} are supported (split the dataset into "
                                  "fewer concept folders)")


def may_read(path: Path, readable: list[Path] | None) -> bool:
    """`path` (symlinks followed) is inside one of `readable` (an import in the page reads only
    there); None: anywhere (the command line)."""
    if readable is None:
        return True
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(Path(root).resolve()) for root in readable)
