"""gangsched.quantity: Kubernetes quantities to integer milli-units."""

from __future__ import annotations

import pytest

from gangsched.quantity import QuantityError, parse_milli

GI = 2**30
MI = 2**20


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("1", 1000),
        ("1.5", 1500),
        ("2Gi", 2 * GI * 1000),
        ("1e3", 1000 * 1000),
        ("1E3", 1000 * 1000),
        ("100Mi", 100 * MI * 1000),
        ("1k", 1000 * 1000),
        ("1Ki", 1024 * 1000),
        ("1.5Gi", 3 * GI * 1000 // 2),
        ("250M", 250 * 10**6 * 1000),
        ("0.5", 500),
        (".5", 500),
        ("+2", 2000),
        ("0", 0),
        ("100n", 1),  # 1e-7: rounds up to 1m
        ("0.1m", 1),  # rounds up, as Kubernetes does
        ("1.0001", 1001),
        ("5e-1", 500),
    ],
)
def test_strings(text: str, milli: int) -> None:
    assert parse_milli(text) == milli


@pytest.mark.parametrize(("value", "milli"), [(0, 0), (1, 1000), (8, 8000), (110, 110_000)])
def test_integers(value: int, milli: int) -> None:
    assert parse_milli(value) == milli


@pytest.mark.parametrize(("value", "milli"), [(0.5, 500), (1.5, 1500), (0.0001, 1), (2.0, 2000)])
def test_floats(value: float, milli: int) -> None:
    assert parse_milli(value) == milli


@pytest.mark.parametrize(
    "value",
    [
        "abc",
        "1.2.3",
        "-1",
        "-500m",
        "1Gb",
        "1K",  # the decimal kilo is lower-case
        "",
        "1 Gi",
        "Gi",
        "1e",
        "1m2",
        "NaN",
        "1e999999999",  # beyond Decimal's exponent range
        "9e18",  # does not fit int64 milli-units
        -1,
        -0.5,
        float("nan"),
        float("inf"),
        10**30,
        True,
        None,
        [1],
        {"cpu": 1},
    ],
)
def test_invalid(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_milli(value)


def test_error_names_the_value() -> None:
    with pytest.raises(QuantityError, match="'1Gb'"):
        parse_milli("1Gb")


def test_quantity_error_is_a_value_error() -> None:
    assert issubclass(QuantityError, ValueError)
