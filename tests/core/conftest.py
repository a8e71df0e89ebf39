"""Fixtures of the transformer_core tests (tiny and tiny_gpt, shared with the page tests, are in ../conftest.py)."""
import pytest


@pytest.fixture(scope="module")
def gpt(tiny_gpt):
    """The analysis tests' decoder-only model: the tiny-gpt preset (one per test module)."""
    return tiny_gpt
