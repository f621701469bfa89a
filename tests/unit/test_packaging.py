"""The wheel holds the product and nothing else, and runs on its declared dependencies alone.

Test and demo tooling lives in its own source root, testing/gangsched_testing (the local
control plane, fake nodes, object builders), which the wheel must never carry; nothing in the
wheel may import it, nor anything that only it needs (cryptography, for the control plane's
PKI). The wheel is built as `docker build` builds it: from pyproject.toml, README.md and
operator/ alone (.dockerignore), in a scratch directory, so no stale build/ output leaks in.
"""

from __future__ import annotations

import ast
import email
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
BUILD_CONTEXT = ("pyproject.toml", "README.md", "operator")  # what .dockerignore lets through
PRODUCT = "gangsched"
MUST_SHIP = ("gangsched/__init__.py", "gangsched/cli.py", "gangsched/py.typed")
TOOLING_ONLY = ("gangsched_testing", "cryptography")
"""Imported by the test tooling, never by the product."""
TOOLING_NAMES = ("gangsched_testing", "devcluster", "fakenodes", "open_stream", "rawapi")
"""Names that mark test tooling inside the wheel: file names or identifiers in the sources."""
OPTIONAL_EXTRAS = ("plot",)
"""Extras the product may import from, inside a function only (the feature that needs one says
which extra to install when it is missing): `plot` is matplotlib, for --plot."""

WHY = (
    "test and demo tooling belongs in testing/gangsched_testing, which is never packaged "
    "(pyproject.toml [tool.setuptools.packages.find] takes operator/gangsched only)"
)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    context = tmp_path_factory.mktemp("context")
    for name in BUILD_CONTEXT:
        source = ROOT / name
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
            shutil.copytree(source, context / name, ignore=ignore)
        else:
            shutil.copy2(source, context / name)
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(context), "--no-deps", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"`pip wheel . --no-deps` failed:\n{result.stdout}\n{result.stderr}"
    [built] = out.glob(f"{PRODUCT}-*.whl")
    return built


@pytest.fixture(scope="module")
def names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


@pytest.fixture(scope="module")
def sources(wheel: Path, names: list[str]) -> dict[str, str]:
    """path in the wheel -> text, for every Python file."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name).decode() for name in names if name.endswith(".py")}


@pytest.fixture(scope="module")
def declared(wheel: Path, names: list[str]) -> list[Requirement]:
    """The wheel's Requires-Dist without extras: what `pip install gangsched` brings."""
    [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
    with zipfile.ZipFile(wheel) as archive:
        message = email.message_from_bytes(archive.read(metadata))
    requirements = [Requirement(text) for text in message.get_all("Requires-Dist") or []]
    return [r for r in requirements if not r.marker or r.marker.evaluate({"extra": ""})]


@pytest.fixture(scope="module")
def allowed_imports(declared: list[Requirement]) -> frozenset[str]:
    """Top-level module names the product may import: stdlib, itself, its dependency closure."""
    closure: set[str] = set()
    pending = [_normalise(r.name) for r in declared]
    while pending:
        name = pending.pop()
        if name in closure:
            continue
        closure.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{name}, a dependency of the wheel, is not installed here: run `make setup`")
        for text in requires:
            requirement = Requirement(text)
            if not requirement.marker or requirement.marker.evaluate({"extra": ""}):
                pending.append(_normalise(requirement.name))
    provided = {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if any(_normalise(d) in closure for d in dists)
    }
    return frozenset({*sys.stdlib_module_names, PRODUCT, *provided} - set(TOOLING_ONLY))


def _imports(path: str, source: str) -> Iterator[str]:
    """Every absolute module name `source` imports, at top level or inside functions alike."""
    package = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    if not path.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    for node in ast.walk(ast.parse(source, path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield f"{base}.{node.module}" if node.module else base
            elif node.module:
                yield node.module


def _lazy_imports(path: str, source: str) -> set[str]:
    """The absolute module names `source` imports inside functions (not when it is imported)."""
    lazy: set[str] = set()
    for function in ast.walk(ast.parse(source, path)):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    lazy.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    lazy.add(node.module)
    return lazy


@pytest.fixture(scope="module")
def optional_imports(wheel: Path, names: list[str]) -> frozenset[str]:
    """Top-level modules of the packages `OPTIONAL_EXTRAS` bring (only they, not their closure)."""
    [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
    with zipfile.ZipFile(wheel) as archive:
        message = email.message_from_bytes(archive.read(metadata))
    wanted = set()
    for text in message.get_all("Requires-Dist") or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is not None and any(marker.evaluate({"extra": extra}) for extra in OPTIONAL_EXTRAS):
            wanted.add(_normalise(requirement.name))
    return frozenset(
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if any(_normalise(d) in wanted for d in dists)
    )


def test_the_wheel_holds_the_product_only(names: list[str], sources: dict[str, str]) -> None:
    missing = [name for name in MUST_SHIP if name not in names]
    assert not missing, f"the wheel lacks {missing}; it holds {sorted(names)}"
    tops = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert tops == {PRODUCT}, f"the wheel ships more than {PRODUCT}/: {sorted(tops - {PRODUCT})}; {WHY}"
    tooling_files = [n for n in names if any(word in n for word in TOOLING_NAMES)]
    assert not tooling_files, f"the wheel ships test tooling {tooling_files}; {WHY}"
    mentions = {
        path: word
        for path, text in sources.items()
        for word in ("gangsched_testing", "open_stream")
        if re.search(rf"\b{word}\b", text)
    }
    assert not mentions, f"product sources name test tooling ({mentions}); {WHY}"


SECOND_CLIENT = ("ApiException", "ApiClient", "call_api", "urllib3", "rawapi", "request_json")
"""What marks a second HTTP client in the product, which has one: `gangsched.session.ApiSession`
(the `kubernetes` package only loads the credentials into a `client.Configuration`). The sync
admin helper of the tests is `gangsched_testing.rawapi`."""


def test_the_product_has_one_http_client(sources: dict[str, str]) -> None:
    found = sorted(
        {f"{path}: {word}" for path, text in sources.items() for word in SECOND_CLIENT if word in text}
    )
    assert not found, f"a second HTTP client (or its error type) in the product: {found}"


def test_the_wheel_does_not_depend_on_test_tooling_dependencies(declared: list[Requirement]) -> None:
    names = {_normalise(r.name) for r in declared}
    leaked = sorted(names & {_normalise(n) for n in TOOLING_ONLY})
    assert not leaked, (
        f"{leaked} in the main dependencies: only testing/gangsched_testing needs them; "
        "keep them in the test/dev/bench extras of pyproject.toml"
    )


def test_product_imports_resolve_within_the_wheel_and_its_dependencies(
    sources: dict[str, str], allowed_imports: frozenset[str], optional_imports: frozenset[str]
) -> None:
    modules = {path.removesuffix(".py").replace("/", ".").removesuffix(".__init__") for path in sources}
    problems = []
    for path, source in sorted(sources.items()):
        lazy = _lazy_imports(path, source)
        for module in _imports(path, source):
            top = module.split(".")[0]
            if top in TOOLING_ONLY:
                problems.append(f"{path} imports {module}, which only the test tooling may use")
            elif top == PRODUCT:
                # `from gangsched.x import y` may name a module or an attribute of gangsched.x.
                if module not in modules and module.rpartition(".")[0] not in modules:
                    problems.append(f"{path} imports {module}, which is not in the wheel")
            elif top in optional_imports and top not in allowed_imports:
                if module not in lazy:
                    problems.append(
                        f"{path} imports {module} (an optional extra's) when it is imported: import it "
                        "inside the function that needs it, and say which extra to install when it is missing"
                    )
            elif top not in allowed_imports:
                problems.append(
                    f"{path} imports {module}, which no dependency in [project] dependencies provides"
                )
    assert not problems, "\n".join([*problems, WHY])


_IMPORT_ALL = """
import importlib, importlib.abc, importlib.machinery, json, pkgutil, sys

blocked = set(json.loads(sys.argv[1]))

# The path finder, blind to the blocked packages: to importers and to probes alike
# (importlib.util.find_spec, as python-json-logger does for orjson) they are not installed.
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            return None
        return importlib.machinery.PathFinder.find_spec(name, path, target)

    def invalidate_caches(self):
        importlib.machinery.PathFinder.invalidate_caches()

sys.meta_path[:] = [Block() if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
import gangsched
failures = {}
if not gangsched.__file__.startswith(sys.argv[2]):
    failures["gangsched"] = f"imported from {gangsched.__file__}, not from the wheel"
for info in pkgutil.walk_packages(gangsched.__path__, "gangsched."):
    if info.name.rpartition(".")[2] == "__main__":
        continue
    try:
        importlib.import_module(info.name)
    except Exception as exc:
        failures[info.name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failures))
"""


def test_every_module_imports_with_the_declared_dependencies_only(
    wheel: Path, tmp_path: Path, allowed_imports: frozenset[str]
) -> None:
    """Import each module of the unpacked wheel with every other installed package hidden."""
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    installed = set(importlib.metadata.packages_distributions()) | set(TOOLING_ONLY)
    blocked = sorted(name for name in installed if name not in allowed_imports)
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, json.dumps(blocked), str(unpacked)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=unpacked,
        env={**os.environ, "PYTHONPATH": str(unpacked)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    failures = json.loads(result.stdout.strip().splitlines()[-1])
    assert not failures, "modules of the wheel that do not import with its dependencies alone:\n" + "\n".join(
        f"  {module}: {error}" for module, error in sorted(failures.items())
    )
