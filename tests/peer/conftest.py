"""Shared fixtures for the peer tests: where the built binaries and the shared models are."""
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("QCONFORM_BUILD", REPO / "build"))
SHARED = REPO.parent / "shared"
# The digest record (docs/formats.md) of the peer tests is in the build folder, not the user's cache.
os.environ.setdefault("QC_DIGEST_RECORD", str(BUILD / "test-digest-record"))


def tool(name: str) -> pathlib.Path:
    """Path of a test tool built from tests/tools/<name>.cpp (or the CLI when name == 'qconform')."""
    path = BUILD / name if name == "qconform" else BUILD / "tests" / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make build` first (QCONFORM_BUILD={BUILD})")
    return path


def run(args, check=True, **kw):
    """Runs a command, returning CompletedProcess with text output."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=check, **kw)
