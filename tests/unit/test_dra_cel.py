"""DRA selector CEL against the real Kubernetes v0.36.3 code.

tests/unit/data/dra_cel_cases.json holds 72 selectors x 3 devices and 714 Quantity/Semver
library expressions with the outcome k8s.io/dynamic-resource-allocation@v0.36.3/cel gives
(compiled and evaluated by a Go program built from the module cache; hack/dra-oracle answers
the same in its `cel` mode, which tests/unit/test_dra_oracle.py uses for generated cases).
Every outcome must agree, except the divergences listed here with their reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gangsched.engine.dra import celfunctions
from gangsched.engine.dra.allocator import CelError
from gangsched.engine.dra.cel import CelCompileError, CelRuntimeError, DraCel, SelectorEvaluator
from gangsched.model.dra import parse_resource_slice

DATA = json.loads((Path(__file__).parent / "data" / "dra_cel_cases.json").read_text())

# Selector cases (by index) where gangsched's outcome differs from Kubernetes', and why.
KNOWN = {
    # Kubernetes rejects it at compile time; the apiserver therefore never stores it, and
    # accepting more than Kubernetes is harmless (the encoded strings compare in order).
    16: "`q >= quantity(..)` compiles (encoded strings compare); Kubernetes rejects it at compile time",
    # cel-expr-python 0.1.3 does not register cel.@mapInsert: rejected with a clear message.
    44: "transformMap is not supported by cel-expr-python 0.1.3",
    # cel-cpp's cross-numeric checker option is not exposed in 0.1.3 (attributes, being dyn, work).
    63: "literal-only int vs double comparison is a compile error",
    70: "the Kubernetes IP/CIDR library is not provided",
    71: "the Kubernetes URL library is not provided",
}
# Kubernetes' Quantity keeps its representation: isInteger()/asInteger() are false/errors for
# values parsed with a fraction, a milli suffix or 19+ digits, though integral. A canonical
# encoding (which `==` needs) cannot reproduce that.
KNOWN_LIBRARY = ("1000m", "1Ei", "9223372036854775807", "1.5Gi")
# One environment for the whole corpus: compiled selectors are cached in it.
CEL = DraCel()


def _outcome(expression: str, device: dict[str, Any]) -> str:
    cel = CEL
    try:
        selector = cel.compile(expression)
    except CelCompileError:
        return "compile-error"
    try:
        device_input = cel.device_input(device)
    except celfunctions.CelFunctionError:
        return "runtime-error"
    try:
        return "true" if selector.matches(device_input) else "false"
    except CelRuntimeError:
        return "runtime-error"


CASES = [
    (i, name, feature, expression)
    for i, (feature, expression) in enumerate(DATA["cases"])
    for name in DATA["devices"]
]


@pytest.mark.parametrize(
    ("index", "device", "feature", "expression"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_selectors_evaluate_as_in_kubernetes(index: int, device: str, feature: str, expression: str) -> None:
    want = DATA["results"][f"{index}:{device}"]["outcome"]
    got = _outcome(expression, DATA["devices"][device])
    if index in KNOWN:
        assert got != want, f"fixed? {KNOWN[index]}"
    else:
        assert got == want, f"{feature}: {expression} on {device}"


def test_library_functions_agree_with_kubernetes() -> None:
    device = next(iter(DATA["devices"].values()))
    wrong = []
    for expression, want in zip(DATA["library"]["cases"], DATA["library"]["outcomes"], strict=True):
        got = _outcome(expression, device)
        known = any(f'quantity("{q}")' in expression for q in KNOWN_LIBRARY) and "nteger()" in expression
        if got != want and not known:
            wrong.append(f"{expression}: Kubernetes {want}, gangsched {got}")
    assert wrong == []


def _slice(attributes: dict[str, Any], version: str = "1") -> Any:
    return parse_resource_slice(
        {
            "metadata": {"name": "s", "resourceVersion": version},
            "spec": {
                "driver": "gpu.example.com",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n1",
                "devices": [{"name": "gpu0", "attributes": attributes}],
            },
        }
    )


def test_the_evaluator_caches_per_device_version_and_keeps_errors_errors() -> None:
    evaluator = SelectorEvaluator()
    first = _slice({"model": {"string": "H100"}})
    expression = 'device.attributes["gpu.example.com"].model == "H100"'
    assert evaluator.matches(expression, "gpu.example.com", first.devices[0], first)
    # The same slice republished with another model: a new version, evaluated anew.
    changed = _slice({"model": {"string": "A100"}}, version="2")
    assert not evaluator.matches(expression, "gpu.example.com", changed.devices[0], changed)
    with pytest.raises(CelError, match="no such key: numa") as caught:
        evaluator.matches(
            'device.attributes["gpu.example.com"].numa == 0', "gpu.example.com", first.devices[0], first
        )
    assert not caught.value.compile_error
    with pytest.raises(CelError) as caught:
        evaluator.matches("device.attributes[", "gpu.example.com", first.devices[0], first)
    assert caught.value.compile_error
