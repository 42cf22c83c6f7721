"""swarmp2p.config: precedence (flag > env > file > default), typed parsing, one-line errors."""

from __future__ import annotations

import enum
import tempfile
from pathlib import Path
from typing import Literal

import attrs
import pytest
import tomli_w
from attrs import validators as v
from hypothesis import given
from hypothesis import strategies as st

from swarmp2p.config import (
    CONFIG_FILE_ENV,
    ConfigError,
    ConfigRegistry,
    config_or_exit,
    dump_config,
    load_config,
    register_config,
)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Sample:
    count: int = attrs.field(default=1, validator=v.ge(0))
    ratio: float = 0.5
    name: str = "default"
    enabled: bool = False
    tags: tuple[str, ...] = ("a",)
    weights: tuple[float, ...] = ()
    limit: int | None = None
    color: Color = Color.RED
    mode: Literal["fast", "slow"] = "fast"
    data_dir: Path = Path("data")


@attrs.frozen
class Other:
    """A second command's config: its variables are known, so they are not typos."""

    port: int = 8080


def fresh_registry() -> ConfigRegistry:
    registry = ConfigRegistry()
    registry.register(Sample, "sample")
    registry.register(Other, "other")
    return registry


def load(env: dict[str, str] | None = None, **kwargs) -> Sample:
    return load_config(Sample, section="sample", env=env or {}, registry=fresh_registry(), **kwargs)


def write_toml(directory: Path, text: str, name: str = "swarm.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def assert_one_line_error(error: ConfigError, *words: str) -> None:
    message = str(error)
    assert "\n" not in message and message.startswith("config error:")
    for word in words:
        assert word in message, f"{word!r} missing from {message!r}"


# --------------------------------------------------------------------------------------
# Precedence, property-tested
# --------------------------------------------------------------------------------------

safe_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
tag = st.text(st.characters(whitelist_categories=("Ll", "Lu", "Nd")), min_size=1, max_size=8)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)

FIELD_STRATEGIES = {
    "count": st.integers(min_value=0, max_value=2**62),
    "ratio": finite,
    "name": safe_text,
    "enabled": st.booleans(),
    "tags": st.lists(tag, max_size=4).map(tuple),
}


def env_text(field: str, value, bool_style: int) -> str:
    if field == "enabled":
        return [("1", "0"), ("true", "false"), ("YES", "No"), ("on", "off")][bool_style][0 if value else 1]
    if field == "ratio":
        return repr(value)
    if field == "tags":
        return ",".join(value)
    return str(value)


layer_values = st.fixed_dictionaries(
    {
        field: st.tuples(*(st.none() | strategy for _ in range(3)))
        for field, strategy in FIELD_STRATEGIES.items()
    }
)


@given(layers=layer_values, bool_style=st.integers(0, 3))
def test_flag_beats_env_beats_file_beats_default(layers, bool_style):
    file_table, env, flags = {}, {}, {}
    for field, (from_file, from_env, from_flag) in layers.items():
        if from_file is not None:
            file_table[field] = list(from_file) if isinstance(from_file, tuple) else from_file
        if from_env is not None:
            env["SWARMP2P_" + field.upper()] = env_text(field, from_env, bool_style)
        flags[field] = from_flag  # None = flag not given
    with tempfile.TemporaryDirectory() as directory:
        path = write_toml(Path(directory), tomli_w.dumps({"sample": file_table}))
        config = load(env, file=path, overrides=flags)
    defaults = Sample()
    for field, (from_file, from_env, from_flag) in layers.items():
        expected = next(
            (value for value in (from_flag, from_env, from_file) if value is not None),
            getattr(defaults, field),
        )
        assert getattr(config, field) == expected, field


@given(
    count=FIELD_STRATEGIES["count"],
    ratio=finite,
    name=safe_text,
    enabled=st.booleans(),
    tags=FIELD_STRATEGIES["tags"],
    weights=st.lists(finite, max_size=3).map(tuple),
    limit=st.none() | st.integers(-(2**40), 2**40),
    color=st.sampled_from(Color),
    mode=st.sampled_from(["fast", "slow"]),
)
def test_dump_config_loads_back_to_the_same_config(
    count, ratio, name, enabled, tags, weights, limit, color, mode
):
    original = Sample(
        count=count,
        ratio=ratio,
        name=name,
        enabled=enabled,
        tags=tags,
        weights=weights,
        limit=limit,
        color=color,
        mode=mode,
        data_dir=Path("/srv/swarm"),
    )
    text = dump_config(original, registry=fresh_registry())
    assert text.startswith("[sample]\n")
    with tempfile.TemporaryDirectory() as directory:
        assert load(file=write_toml(Path(directory), text)) == original


@given(garbage=st.text(max_size=12).filter(lambda s: not s.strip().lstrip("+-").isdigit()))
def test_any_non_integer_env_value_is_a_one_line_error_naming_key_and_variable(garbage):
    with pytest.raises(ConfigError) as caught:
        load({"SWARMP2P_COUNT": garbage})
    assert_one_line_error(caught.value, "[sample] count", "expected an integer", "SWARMP2P_COUNT")


# --------------------------------------------------------------------------------------
# Parsing of each supported type
# --------------------------------------------------------------------------------------


def test_environment_strings_are_parsed_into_every_field_type():
    config = load(
        {
            "SWARMP2P_COUNT": " 7 ",
            "SWARMP2P_RATIO": "1e-3",
            "SWARMP2P_ENABLED": "yes",
            "SWARMP2P_TAGS": "arc_1d, bf ,basic_arithmetic",
            "SWARMP2P_WEIGHTS": "0.5,1.5",
            "SWARMP2P_LIMIT": "12",
            "SWARMP2P_COLOR": "blue",
            "SWARMP2P_MODE": "slow",
            "SWARMP2P_DATA_DIR": "/tmp/x",
        }
    )
    assert config == Sample(
        count=7,
        ratio=0.001,
        enabled=True,
        tags=("arc_1d", "bf", "basic_arithmetic"),
        weights=(0.5, 1.5),
        limit=12,
        color=Color.BLUE,
        mode="slow",
        data_dir=Path("/tmp/x"),
    )


def test_empty_environment_value_means_none_for_optional_and_empty_for_tuples():
    config = load({"SWARMP2P_LIMIT": "", "SWARMP2P_TAGS": ""}, overrides={"limit": None})
    assert config.limit is None and config.tags == ()


def test_flags_given_as_text_are_parsed_like_the_environment():
    assert load(overrides={"count": "5", "tags": ["x", "y"], "enabled": "false"}) == Sample(
        count=5, tags=("x", "y"), enabled=False
    )


def test_relative_path_in_a_file_is_relative_to_that_file(tmp_path):
    path = write_toml(tmp_path, '[sample]\ndata_dir = "checkpoints"\n')
    assert load(file=path).data_dir == tmp_path / "checkpoints"
    # ...but from the environment it stays relative to the working directory.
    assert load({"SWARMP2P_DATA_DIR": "checkpoints"}).data_dir == Path("checkpoints")


def test_config_file_path_can_come_from_swarmp2p_config(tmp_path):
    path = write_toml(tmp_path, "[sample]\ncount = 42\n")
    assert load({CONFIG_FILE_ENV: str(path)}).count == 42
    # An explicit --config wins over the variable.
    other = write_toml(tmp_path, "[sample]\ncount = 43\n", name="other.toml")
    assert load({CONFIG_FILE_ENV: str(path)}, file=other).count == 43


def test_sections_of_other_commands_in_the_same_file_are_left_alone(tmp_path):
    path = write_toml(tmp_path, "[sample]\ncount = 3\n[other]\nport = 1\n")
    assert load(file=path).count == 3


def test_variables_of_other_registered_commands_are_not_typos_and_do_not_leak():
    assert load({"SWARMP2P_PORT": "9"}) == Sample()


def test_lazily_known_classes_are_imported_only_to_tell_a_setting_from_a_typo():
    registry = fresh_registry()
    registry.add_lazy("trainer.config", "TrainerConfig", "trainer")
    registry.add_lazy("no_such_module_anywhere", "Gone", "gone")  # missing parts are skipped
    assert load_config(Sample, section="sample", env={}, registry=registry) == Sample()
    assert "trainer" not in registry.sections()  # nothing unknown yet: nothing imported
    env = {"SWARMP2P_NUM_GENERATIONS": "8"}  # a trainer setting, not a typo
    assert load_config(Sample, section="sample", env=env, registry=registry) == Sample()
    assert "trainer" in registry.sections()
    with pytest.raises(ConfigError):
        load_config(Sample, section="sample", env={"SWARMP2P_NUM_GENERATOINS": "8"}, registry=registry)


def test_a_lazily_known_section_in_the_file_is_not_unknown(tmp_path):
    registry = fresh_registry()
    registry.add_lazy("trainer.config", "TrainerConfig", "trainer")
    path = write_toml(tmp_path, "[sample]\ncount = 2\n[trainer]\nnum_generations = 8\n")
    assert load_config(Sample, section="sample", file=path, env={}, registry=registry).count == 2


def test_register_config_decorator_adds_the_class_to_a_registry():
    registry = ConfigRegistry()

    @register_config("widget", registry=registry)
    @attrs.frozen
    class Widget:
        size: int = 1

    assert registry.sections() == {"widget": Widget}
    assert "SWARMP2P_SIZE" in registry.known_env_names("SWARMP2P_")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Sample, "widget")


# --------------------------------------------------------------------------------------
# Errors: one line, naming key and source
# --------------------------------------------------------------------------------------


def test_unknown_key_in_the_file_section_is_an_error_with_a_suggestion(tmp_path):
    path = write_toml(tmp_path, "[sample]\ncuont = 3\n")
    with pytest.raises(ConfigError) as caught:
        load(file=path)
    assert_one_line_error(caught.value, "[sample] cuont", "unknown key", str(path), "'count'")


def test_unknown_section_is_an_error(tmp_path):
    path = write_toml(tmp_path, "[smaple]\ncount = 3\n")
    with pytest.raises(ConfigError) as caught:
        load(file=path)
    assert_one_line_error(caught.value, "[smaple]", "unknown section", "'sample'")


def test_key_outside_any_section_is_an_error(tmp_path):
    path = write_toml(tmp_path, "count = 3\n")
    with pytest.raises(ConfigError) as caught:
        load(file=path)
    assert_one_line_error(caught.value, "count", "outside any [section]")


def test_unknown_swarmp2p_variable_is_an_error_naming_it():
    with pytest.raises(ConfigError) as caught:
        load({"SWARMP2P_CUONT": "3"})
    assert_one_line_error(caught.value, "SWARMP2P_CUONT", "SWARMP2P_COUNT")


def test_unrelated_environment_variables_are_ignored():
    assert load({"PATH": "/bin", "SWARMP2PX": "1", "HOME": "/root"}) == Sample()


def test_wrong_type_in_the_file_names_key_and_file(tmp_path):
    path = write_toml(tmp_path, '[sample]\ncount = "three"\n')
    with pytest.raises(ConfigError) as caught:
        load(file=path)
    assert_one_line_error(caught.value, "[sample] count", "expected an integer", "'three'", str(path))


def test_bool_in_the_file_is_not_an_integer(tmp_path):
    path = write_toml(tmp_path, "[sample]\ncount = true\n")
    with pytest.raises(ConfigError) as caught:
        load(file=path)
    assert_one_line_error(caught.value, "count", "expected an integer")


def test_failing_validator_names_key_and_source():
    with pytest.raises(ConfigError) as caught:
        load({"SWARMP2P_COUNT": "-1"})
    assert_one_line_error(caught.value, "[sample] count", ">= 0", "from SWARMP2P_COUNT")


def test_failing_validator_from_a_flag_names_the_flag():
    with pytest.raises(ConfigError) as caught:
        load(overrides={"count": -5})
    assert_one_line_error(caught.value, "count", "from flag --count")


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("SWARMP2P_ENABLED", "maybe", ("enabled", "a boolean")),
        ("SWARMP2P_RATIO", "half", ("ratio", "a number")),
        ("SWARMP2P_WEIGHTS", "1,x", ("weights", "a list of numbers")),
        ("SWARMP2P_COLOR", "green", ("color", "'red'", "'blue'")),
        ("SWARMP2P_MODE", "medium", ("mode", "'fast'", "'slow'")),
        ("SWARMP2P_LIMIT", "lots", ("limit", "an integer")),
    ],
)
def test_bad_environment_values_are_one_line_errors(variable, value, words):
    with pytest.raises(ConfigError) as caught:
        load({variable: value})
    assert_one_line_error(caught.value, *words, variable)


def test_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(file=tmp_path / "nope.toml")
    assert_one_line_error(caught.value, "nope.toml", "does not exist", "--config")
    with pytest.raises(ConfigError) as caught:
        load({CONFIG_FILE_ENV: str(tmp_path / "gone.toml")})
    assert_one_line_error(caught.value, "gone.toml", CONFIG_FILE_ENV)


def test_directory_as_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load(file=tmp_path)
    assert_one_line_error(caught.value, "is a directory")


def test_unreadable_config_file_is_an_error(tmp_path, monkeypatch):
    path = write_toml(tmp_path, "[sample]\n")

    def refuse(self):  # chmod 000 does not stop root, so simulate the denial directly
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", refuse)
    with pytest.raises(ConfigError) as caught:
        load(file=path)
    assert_one_line_error(caught.value, "cannot read", "Permission denied", str(path))


def test_invalid_toml_is_an_error_with_the_position(tmp_path):
    path = write_toml(tmp_path, "[sample\ncount = \n")
    with pytest.raises(ConfigError) as caught:
        load(file=path)
    assert_one_line_error(caught.value, str(path), "not valid TOML", "line 1")


def test_non_utf8_file_is_an_error(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[sample]\nname = "caf\xe9"\n')
    with pytest.raises(ConfigError) as caught:
        load(file=path)
    assert_one_line_error(caught.value, "not UTF-8")


def test_unknown_override_is_an_error():
    with pytest.raises(ConfigError) as caught:
        load(overrides={"colour": "red"})
    assert_one_line_error(caught.value, "colour")


def test_missing_required_setting_is_named():
    @attrs.frozen
    class NeedsUrl:
        rpc_url: str

    registry = ConfigRegistry()
    with pytest.raises(ConfigError) as caught:
        load_config(NeedsUrl, section="chain", env={}, registry=registry)
    assert_one_line_error(caught.value, "[chain] rpc_url", "SWARMP2P_RPC_URL")
    assert load_config(NeedsUrl, section="chain", env={"SWARMP2P_RPC_URL": "http://x"}, registry=registry)


def test_cross_field_check_is_reported_as_a_section_error():
    @attrs.frozen
    class Split:
        local: int = 4
        external: int = 4

        def __attrs_post_init__(self) -> None:
            if self.local + self.external == 0:
                raise ValueError("local + external must be > 0")

    with pytest.raises(ConfigError) as caught:
        load_config(
            Split,
            section="split",
            env={"SWARMP2P_LOCAL": "0", "SWARMP2P_EXTERNAL": "0"},
            registry=ConfigRegistry(),
        )
    assert_one_line_error(caught.value, "[split]", "local + external must be > 0")


def test_config_or_exit_prints_one_red_line_to_stderr_and_exits_2(capsys, monkeypatch):
    monkeypatch.setenv("SWARMP2P_NO_SUCH_SETTING", "1")
    with pytest.raises(SystemExit) as caught:
        config_or_exit(Sample, section="sample", registry=fresh_registry())
    assert caught.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "SWARMP2P_NO_SUCH_SETTING" in lines[0]
