"""Shared test helpers: run the CLI in-process and capture exit code, stdout and stderr."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def run_cli(capsys):
    """Run `clusterfit ARGS...` in-process; returns (exit_code, stdout, stderr)."""
    from clusterfit.cli import main

    def _run(*args: str):
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture
def run_json(run_cli):
    """Run `clusterfit ARGS... --json` and parse stdout."""

    def _run(*args: str):
        code, out, err = run_cli(*args, "--json")
        assert code == 0, err
        return json.loads(out)

    return _run
