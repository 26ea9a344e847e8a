"""No test module may skip itself at module level.

With launch_testing's pytest plugin loaded (a sourced ROS 2 Jazzy, or the launch stack
that scripts/setup.sh --test installs), the plugin imports every test module inside its
own collection hook, and a module-level ``pytest.skip(..., allow_module_level=True)`` or
``pytest.importorskip`` raised there dropped the rest of its directory from collection
without a failure (27 tests of test/sim once). A module that needs something missing
says so with ``pytestmark = pytest.mark.skipif(...)``, or skips inside its tests.
scripts/test.sh also compares the collected tests with and without the plugin.
"""

from __future__ import annotations

import ast

from support.paths import REPO

SKIPPING_CALLS = {"skip", "importorskip"}


def module_level_skips(source: str) -> list[int]:
    """Line numbers of pytest.skip/importorskip calls outside any function or class."""
    found: list[int] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            return  # runs when a test runs, not when the module is collected
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SKIPPING_CALLS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "pytest"
        ):
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def test_the_checker_finds_a_module_level_skip() -> None:
    source = "import pytest\nif True:\n    pytest.skip('x', allow_module_level=True)\n"
    assert module_level_skips(source) == [3]
    assert module_level_skips("import pytest\ndef test():\n    pytest.skip('x')\n") == []


def test_no_test_module_skips_at_module_level() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "test").rglob("*.py"))
        for line in module_level_skips(path.read_text())
    ]
    assert not offenders, f"use pytestmark = pytest.mark.skipif(...) instead: {offenders}"
