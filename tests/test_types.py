"""The types stay true: mypy (default strictness, pydantic plugin; configuration in pyproject.toml) passes on
the whole package. It runs here so that the README's test command, and so CI, checks it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_passes_on_the_package():
    api = pytest.importorskip("mypy.api", reason="mypy is part of the test extra")
    out, err, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", os.devnull,
                                str(ROOT / "src" / "clusterfit")])
    assert status == 0, out + err
