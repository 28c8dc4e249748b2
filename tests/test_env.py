"""Settings helpers: NAME or NAME_FILE, strict parsing, loud errors naming the variable."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from console.env import env_bool, env_float, env_int, env_list, env_str

NAME = "GH_TEST_ENV_VALUE"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    monkeypatch.delenv(f"{NAME}_FILE", raising=False)
    return monkeypatch


def test_env_str_reads_the_variable(clean_env):
    clean_env.setenv(NAME, "value")
    assert env_str(NAME) == "value"


def test_env_str_falls_back_to_the_default():
    assert env_str(NAME, "fallback") == "fallback"
    assert env_str(NAME) is None


def test_env_str_reads_a_secret_file_without_its_trailing_newline(clean_env, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    clean_env.setenv(f"{NAME}_FILE", str(secret))
    assert env_str(NAME) == "s3cret"


def test_the_file_wins_over_the_variable(clean_env, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("from-file")
    clean_env.setenv(NAME, "from-env")
    clean_env.setenv(f"{NAME}_FILE", str(secret))
    assert env_str(NAME) == "from-file"


def test_an_unreadable_file_is_an_error_naming_the_variable(clean_env, tmp_path):
    clean_env.setenv(f"{NAME}_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match=f"{NAME}_FILE="):
        env_str(NAME)


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        (" yes ", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
    ],
)
def test_env_bool_parses_the_usual_spellings(clean_env, raw, expected):
    clean_env.setenv(NAME, raw)
    assert env_bool(NAME, not expected) is expected


@pytest.mark.parametrize("default", [True, False])
def test_env_bool_uses_the_default_when_unset(default):
    assert env_bool(NAME, default) is default


@pytest.mark.parametrize("raw", ["maybe", "2", "enabled", "tru"])
def test_env_bool_refuses_anything_else_naming_the_variable(clean_env, raw):
    clean_env.setenv(NAME, raw)
    with pytest.raises(ImproperlyConfigured, match=f"{NAME}=.*not a boolean"):
        env_bool(NAME, False)


def test_env_bool_reads_a_file(clean_env, tmp_path):
    flag = tmp_path / "flag"
    flag.write_text("true\n")
    clean_env.setenv(f"{NAME}_FILE", str(flag))
    assert env_bool(NAME, False) is True


@pytest.mark.parametrize("raw,expected", [("42", 42), ("-1", -1), (" 7 ", 7)])
def test_env_int_parses_integers(clean_env, raw, expected):
    clean_env.setenv(NAME, raw)
    assert env_int(NAME, 0) == expected


@pytest.mark.parametrize("raw", [None, ""])
def test_env_int_uses_the_default_when_unset_or_empty(clean_env, raw):
    if raw is not None:
        clean_env.setenv(NAME, raw)
    assert env_int(NAME, 9) == 9


@pytest.mark.parametrize("raw", ["4.5", "ten", "1e3"])
def test_env_int_refuses_a_non_integer_naming_the_variable(clean_env, raw):
    clean_env.setenv(NAME, raw)
    with pytest.raises(ImproperlyConfigured, match=f"{NAME}=.*not an integer"):
        env_int(NAME, 0)


def test_env_int_refuses_a_value_below_the_minimum(clean_env):
    clean_env.setenv(NAME, "512")
    with pytest.raises(ImproperlyConfigured, match=f"{NAME}=512 must be at least 1024"):
        env_int(NAME, 2048, minimum=1024)


def test_env_int_accepts_the_minimum_itself(clean_env):
    clean_env.setenv(NAME, "1024")
    assert env_int(NAME, 2048, minimum=1024) == 1024


@pytest.mark.parametrize("raw,expected", [("0.5", 0.5), ("2", 2.0), ("1e-3", 0.001)])
def test_env_float_parses_numbers(clean_env, raw, expected):
    clean_env.setenv(NAME, raw)
    assert env_float(NAME, 0.0) == expected


def test_env_float_refuses_a_non_number(clean_env):
    clean_env.setenv(NAME, "fast")
    with pytest.raises(ImproperlyConfigured, match=f"{NAME}=.*not a number"):
        env_float(NAME, 1.0)


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "NaN"])
def test_env_float_refuses_a_value_that_is_no_duration(clean_env, raw):
    # nan passes every `value < minimum` check; a grace or a timeout of inf never ends
    clean_env.setenv(NAME, raw)
    with pytest.raises(ImproperlyConfigured, match=f"{NAME}=.*not a finite number"):
        env_float(NAME, 1.0, minimum=0.1)


def test_env_float_refuses_a_value_below_the_minimum(clean_env):
    clean_env.setenv(NAME, "0.01")
    with pytest.raises(ImproperlyConfigured, match=r"must be at least 0\.1"):
        env_float(NAME, 1.0, minimum=0.1)


def test_env_float_uses_the_default_when_empty(clean_env):
    clean_env.setenv(NAME, "")
    assert env_float(NAME, 1.5) == 1.5


@pytest.mark.parametrize(
    "raw,expected",
    [("a,b,c", ["a", "b", "c"]), (" a , b ,, c, ", ["a", "b", "c"]), ("", []), ("one", ["one"])],
)
def test_env_list_splits_on_commas_dropping_blanks(clean_env, raw, expected):
    clean_env.setenv(NAME, raw)
    assert env_list(NAME, ["default"]) == expected


def test_env_list_uses_the_default_when_unset():
    assert env_list(NAME, ["x", "y"]) == ["x", "y"]
