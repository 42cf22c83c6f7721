"""One configuration loader for every command: typed attrs classes filled from four layers.

Precedence, highest first: command-line flag > environment variable (`SWARMP2P_<FIELD>`) >
the `[section]` table of a TOML file > the attrs default. Each command declares its settings
as an attrs class with typed fields and attrs validators and calls `load_config` (or
`config_or_exit` from a CLI command). Everything is checked once, at start: a typo in the
file, an unknown `SWARMP2P_*` variable, a wrong type or a failing validator is a
`ConfigError` whose message is ONE line naming the key and where the bad value came from,
so that a misconfigured node fails before it joins a swarm rather than an hour later.

Why a registry: an environment variable that matches no field of any config class is almost
always a typo (`SWARMP2P_ROUDNS=5` silently doing nothing is the bug we refuse). To tell a
typo from a setting that belongs to another command, the loader must know every config
class; `register_config` (also applied by `load_config` itself) records them. `swarmp2p.cli`
imports every subcommand module at start, so config classes imported at module level by
those modules are all registered before any command loads its config.

Over 400 lines: one precedence rule and its one-line errors for every kind of
field (scalars, tuples, paths, nested tables, env parsing); splitting it by type would scatter the
rule that every command must share. The config classes themselves live with their commands.
"""

from __future__ import annotations

import difflib
import enum
import os
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

ENV_PREFIX = "SWARMP2P_"
CONFIG_FILE_ENV = "SWARMP2P_CONFIG"
READ_ELSEWHERE_ENV = frozenset(
    {
        "SWARMP2P_ANVIL",  # the anvil binary (swarmp2p/chain/anvil.py, its tests and bench)
        "SWARMP2P_TEST_WORKERS",  # the test command's workers (scripts/test.sh)
        "SWARMP2P_TEST_KEEP_CACHE",  # tests/conftest.py
        "SWARMP2P_BENCH_PUSH_MAX_BYTES",  # bench/network_worker.py's knobs
        "SWARMP2P_BENCH_FETCH_SLOTS",
        "SWARMP2P_BENCH_MESH_DEGREE",
        "SWARMP2P_BENCH_RELAY_ALL",
        "SWARMP2P_BENCH_RELAY_BACKUP",
    }
)
"""`SWARMP2P_*` variables that are not settings but are read by other parts of the project. A
user may have one set in the shell that runs a command (docs/chain.md's `SWARMP2P_ANVIL`, the
README's `SWARMP2P_TEST_WORKERS`): the unknown-variable check lets them through."""


class ConfigError(Exception):
    """A configuration problem. `str()` is one line naming the key and its source."""


# --------------------------------------------------------------------------------------
# Registry of config classes
# --------------------------------------------------------------------------------------


class ConfigRegistry:
    """Every known config section and its class, plus extra reserved variable names.

    The module-level `REGISTRY` is the one commands use; tests pass their own instance so that
    test classes do not leak into the process-wide set of known variables.
    """

    def __init__(self, lazy: tuple[tuple[str, str, str], ...] = ()) -> None:
        self._sections: dict[str, type] = {}
        self._reserved_env: set[str] = {CONFIG_FILE_ENV, *READ_ELSEWHERE_ENV}
        # (module, class name, section) of config classes that do not register themselves at
        # import; imported only when an unknown variable shows up, so a command never pays
        # for importing another command's modules unless it must tell a typo from a setting.
        self._lazy = list(lazy)

    def add_lazy(self, module: str, class_name: str, section: str) -> None:
        self._lazy.append((module, class_name, section))

    def import_lazy(self) -> None:
        """Import and register the lazily known classes (those whose modules import cleanly)."""
        import importlib

        pending, self._lazy = self._lazy, []
        for module_name, class_name, section in pending:
            try:
                cls = getattr(importlib.import_module(module_name), class_name)
            except (ImportError, AttributeError):
                continue  # a part not installed or renamed: its variables stay unknown
            if section not in self._sections and attrs.has(cls):
                self._sections[section] = cls

    def register(self, cls: type, section: str) -> None:
        if not attrs.has(cls):
            raise TypeError(f"{cls.__qualname__} is not an attrs class")
        existing = self._sections.get(section)
        if existing is not None and existing is not cls:
            # Same section from a reloaded module (same qualified name) is fine; two different
            # classes fighting over one section is a programming error worth failing loudly on.
            if (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
                raise ValueError(f"config section [{section}] already registered by {existing.__qualname__}")
        self._sections[section] = cls

    def reserve_env(self, name: str) -> None:
        """Allow a `SWARMP2P_*` variable that is not a config field (read elsewhere)."""
        self._reserved_env.add(name)

    def sections(self) -> dict[str, type]:
        return dict(self._sections)

    def section_of(self, cls: type) -> str | None:
        for section, registered in self._sections.items():
            if registered is cls:
                return section
        return None

    def known_env_names(self, prefix: str) -> set[str]:
        names = set(self._reserved_env)
        for cls in self._sections.values():
            names.update(prefix + field.name.upper() for field in _init_fields(cls))
        return names


# Config classes of other layers that are plain attrs classes (no `register_config`).
KNOWN_CONFIG_CLASSES: tuple[tuple[str, str, str], ...] = (("trainer.config", "TrainerConfig", "trainer"),)

REGISTRY = ConfigRegistry(lazy=KNOWN_CONFIG_CLASSES)


def register_config(section: str, *, registry: ConfigRegistry | None = None) -> Callable[[type[T]], type[T]]:
    """Class decorator: `@register_config("node")` above an attrs class."""

    def decorate(cls: type[T]) -> type[T]:
        (registry or REGISTRY).register(cls, section)
        return cls

    return decorate


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def load_config(
    cls: type[T],
    *,
    section: str,
    file: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    env_prefix: str = ENV_PREFIX,
    registry: ConfigRegistry | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> T:
    """Build `cls` from defaults < file `[section]` < environment < overrides (CLI flags).

    `file` None means: the path in `SWARMP2P_CONFIG` if set, else no file. `overrides` values
    that are None are ignored (a flag the user did not pass). `defaults` replaces the class's
    own defaults for this command (e.g. `swarmp2p node` evaluates every 5 rounds where the
    trainer's default is never): the lowest layer. Raises `ConfigError`.
    """
    registry = registry or REGISTRY
    registry.register(cls, section)
    env = os.environ if env is None else env
    fields = {field.name: field for field in _init_fields(cls)}
    hints = _resolved_types(cls)

    _check_unknown_env(env, env_prefix, registry)

    # Each layer maps field name -> (raw value, source description, base dir for relative paths).
    layers: dict[str, tuple[Any, str, Path | None]] = {}
    for key, raw in (defaults or {}).items():
        if key not in fields:
            raise ConfigError(f"config error: [{section}] {key}: not a setting of this command (default)")
        layers[key] = (raw, "the command's default", None)

    config_path, path_source = _config_file_path(file, env)
    if config_path is not None:
        table = _read_section(config_path, path_source, section, registry)
        for key, raw in table.items():
            if key not in fields:
                raise ConfigError(
                    f"config error: [{section}] {key}: unknown key in {config_path}{_suggest(key, fields)}"
                )
            layers[key] = (raw, f"file {config_path}", config_path.parent)

    for name in fields:
        var = env_prefix + name.upper()
        if var in env:
            layers[name] = (env[var], f"from {var}", None)

    for key, raw in (overrides or {}).items():
        if raw is None:
            continue
        if key not in fields:
            raise ConfigError(f"config error: [{section}] {key}: not a setting of this command (from flag)")
        layers[key] = (raw, f"from flag --{key.replace('_', '-')}", None)

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, (raw, source, base_dir) in layers.items():
        # Environment values are always text; a flag may arrive as text too when the command
        # declares it as a plain string option, so text is parsed the same way for both.
        from_text = isinstance(raw, str) and not source.startswith("file ")
        try:
            values[name] = _convert(raw, hints[name], from_text=from_text, base_dir=base_dir)
        except _ConversionError as error:
            raise ConfigError(
                f"config error: [{section}] {name}: expected {error.expected}, got {_short(raw)} "
                f"({_source_words(source)})"
            ) from None
        sources[name] = source

    return _construct(cls, section, fields, values, sources, env_prefix)


def _construct(
    cls: type[T],
    section: str,
    fields: dict[str, attrs.Attribute],
    values: dict[str, Any],
    sources: dict[str, str],
    env_prefix: str,
) -> T:
    kwargs = {(fields[name].alias or name): value for name, value in values.items()}
    try:
        return cls(**kwargs)
    except Exception as error:
        # Find which field's own validator refuses its value, to name the key and source.
        for name, value in values.items():
            validator = fields[name].validator
            if validator is None:
                continue
            try:
                converter = fields[name].converter
                if converter is not None and not isinstance(converter, attrs.Converter):
                    value = converter(value)  # validators see the converted value, as in __init__
                validator(None, fields[name], value)
            except Exception as field_error:
                raise ConfigError(
                    f"config error: [{section}] {name}: {_validator_words(name, field_error)} "
                    f"({_source_words(sources[name])})"
                ) from None
        # A default that fails, a missing mandatory field or a cross-field check.
        missing = [
            name for name, field in fields.items() if field.default is attrs.NOTHING and name not in values
        ]
        if missing:
            raise ConfigError(
                f"config error: [{section}] {missing[0]}: required setting is missing "
                f"(set it in the file, as {env_prefix}{missing[0].upper()}, or by flag)"
            ) from None
        raise ConfigError(f"config error: [{section}]: {_one_line(str(error))}") from None


def _source_words(source: str) -> str:
    return source if source.startswith("from ") else f"from {source}"


def _validator_words(name: str, error: Exception) -> str:
    message = str(error.args[0]) if error.args else str(error)
    # attrs validators say "'rounds' must be >= 1: 0"; the key is already named, drop its echo.
    prefix = f"'{name}' "
    if message.startswith(prefix):
        message = message[len(prefix) :]
    return _one_line(message)


def _config_file_path(file: Path | str | None, env: Mapping[str, str]) -> tuple[Path | None, str]:
    if file is not None:
        return Path(file).expanduser(), "--config"
    from_env = env.get(CONFIG_FILE_ENV)
    if from_env:
        return Path(from_env).expanduser(), CONFIG_FILE_ENV
    return None, ""


def _read_section(path: Path, path_source: str, section: str, registry: ConfigRegistry) -> dict[str, Any]:
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config error: config file {path} does not exist (from {path_source})") from None
    except IsADirectoryError:
        raise ConfigError(f"config error: config file {path} is a directory (from {path_source})") from None
    except OSError as error:
        raise ConfigError(
            f"config error: cannot read config file {path}: {error.strerror} (from {path_source})"
        ) from None
    try:
        document = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"config error: config file {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(
            f"config error: config file {path} is not valid TOML: {_one_line(str(error))}"
        ) from None

    known_sections = registry.sections()
    if any(key not in known_sections for key in document):
        registry.import_lazy()
        known_sections = registry.sections()
    for key, value in document.items():
        if not isinstance(value, dict):
            raise ConfigError(
                f"config error: {key}: top-level key outside any [section] in {path} "
                f"(settings belong under a table such as [{section}])"
            )
        if key not in known_sections:
            raise ConfigError(
                f"config error: [{key}]: unknown section in {path}{_suggest(key, known_sections)}"
            )
    table = document.get(section, {})
    for key, value in table.items():
        if isinstance(value, dict):
            raise ConfigError(
                f"config error: [{section}] {key}: nested tables are not settings (file {path})"
            )
    return table


def _check_unknown_env(env: Mapping[str, str], prefix: str, registry: ConfigRegistry) -> None:
    known = registry.known_env_names(prefix)
    if any(var.startswith(prefix) and var not in known for var in env):
        registry.import_lazy()
        known = registry.known_env_names(prefix)
    for var in sorted(env):
        if var.startswith(prefix) and var not in known:
            raise ConfigError(
                f"config error: unknown environment variable {var}: it matches no setting of any "
                f"command{_suggest(var, known)}"
            )


def _suggest(word: str, choices: Any) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _init_fields(cls: type) -> list[attrs.Attribute]:
    return [field for field in attrs.fields(cls) if field.init]


def _resolved_types(cls: type) -> dict[str, Any]:
    # Classes written with `from __future__ import annotations` carry string annotations.
    hints = typing.get_type_hints(cls, include_extras=False)
    return {field.name: hints.get(field.name, field.type) for field in _init_fields(cls)}


# --------------------------------------------------------------------------------------
# Type conversion
# --------------------------------------------------------------------------------------


class _ConversionError(Exception):
    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


_TRUE_WORDS = {"1", "true", "yes", "on"}
_FALSE_WORDS = {"0", "false", "no", "off"}


def _convert(raw: Any, tp: Any, *, from_text: bool, base_dir: Path | None) -> Any:
    """Turn a raw value into `tp`. `from_text`: raw is an environment string to parse."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in args if arg is not type(None)]
        if type(None) in args:
            if raw is None or (from_text and raw.strip().lower() in ("", "none")):
                return None
        for option in options:
            try:
                return _convert(raw, option, from_text=from_text, base_dir=base_dir)
            except _ConversionError:
                continue
        expected = " or ".join(_describe(option) for option in options)
        raise _ConversionError(expected + (" (or empty for none)" if type(None) in args else ""))

    if origin is typing.Literal:
        for choice in args:
            try:
                value = _convert(raw, type(choice), from_text=from_text, base_dir=base_dir)
            except _ConversionError:
                continue
            if value == choice:
                return choice
        raise _ConversionError("one of " + ", ".join(repr(choice) for choice in args))

    if origin in (tuple, list):
        item_type = args[0] if args else str
        expected = f"a list of {_describe_plural(item_type)}" + (" (comma-separated)" if from_text else "")
        if from_text:
            items: Any = [] if raw.strip() == "" else [item.strip() for item in raw.split(",")]
        elif isinstance(raw, list | tuple):
            items = raw
        else:
            raise _ConversionError(expected)
        try:
            return tuple(_convert(item, item_type, from_text=from_text, base_dir=base_dir) for item in items)
        except _ConversionError:
            raise _ConversionError(expected) from None

    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if raw is member or raw == member.value or (isinstance(raw, str) and raw == member.name):
                return member
            if from_text and str(member.value) == raw:
                return member
        raise _ConversionError("one of " + ", ".join(repr(member.value) for member in tp))

    if tp is bool:
        if isinstance(raw, bool):
            return raw
        if from_text:
            word = raw.strip().lower()
            if word in _TRUE_WORDS:
                return True
            if word in _FALSE_WORDS:
                return False
        raise _ConversionError("a boolean (true/false, yes/no, 1/0)")

    if tp is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        if from_text:
            try:
                return int(raw.strip())
            except ValueError:
                pass
        raise _ConversionError("an integer")

    if tp is float:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
        if from_text:
            try:
                return float(raw.strip())
            except ValueError:
                pass
        raise _ConversionError("a number")

    if tp is str:
        if isinstance(raw, str):
            return raw
        raise _ConversionError("a string")

    if tp is Path or (isinstance(tp, type) and issubclass(tp, os.PathLike)):
        if isinstance(raw, str | os.PathLike) and str(raw) != "":
            path = Path(raw).expanduser()
            # A relative path written in a config file means "next to that file", so that a
            # config file and the files it names can be moved together.
            if base_dir is not None and not path.is_absolute():
                path = base_dir / path
            return path
        raise _ConversionError("a path")

    if tp is Any:
        return raw
    raise _ConversionError(f"a value of type {tp!r} (unsupported config field type)")


def _describe_plural(tp: Any) -> str:
    names = {int: "integers", float: "numbers", str: "strings", bool: "booleans", Path: "paths"}
    return names.get(tp, "values")


def _describe(tp: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "a boolean", Path: "a path"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        return "a list"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(choice) for choice in typing.get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(repr(member.value) for member in tp)
    return repr(tp)


# --------------------------------------------------------------------------------------
# Showing the effective config, and the CLI helper
# --------------------------------------------------------------------------------------


def dump_config(obj: Any, *, section: str | None = None, registry: ConfigRegistry | None = None) -> str:
    """The effective config as TOML under its `[section]`, loadable again by `load_config`.

    Fields that are None are written as comments: TOML has no null, and leaving the key out
    gives the same result when the default is None.
    """
    import tomli_w

    registry = registry or REGISTRY
    cls = type(obj)
    section = section or registry.section_of(cls)
    if section is None:
        raise ValueError(f"{cls.__qualname__} is not a registered config class; pass section=")
    table: dict[str, Any] = {}
    unset: list[str] = []
    for field in _init_fields(cls):
        value = _to_toml(getattr(obj, field.name))
        if value is None:
            unset.append(field.name)
        else:
            table[field.name] = value
    text = tomli_w.dumps({section: table})
    if unset:
        text += "".join(f"# {name} is unset\n" for name in unset)
    return text


def _to_toml(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple | list):
        return [_to_toml(item) for item in value]
    return value


def config_or_exit(
    cls: type[T],
    *,
    section: str,
    file: Path | str | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    env_prefix: str = ENV_PREFIX,
    registry: ConfigRegistry | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> T:
    """`load_config` for CLI commands: on error print the one line in red to stderr, exit 2."""
    try:
        return load_config(
            cls,
            section=section,
            file=file,
            env=env,
            overrides=overrides,
            env_prefix=env_prefix,
            registry=registry,
            defaults=defaults,
        )
    except ConfigError as error:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True, soft_wrap=True).print(f"[red]{escape(str(error))}[/red]")
        raise SystemExit(2) from None
