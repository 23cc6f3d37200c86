"""The release binary stays small enough to ship and copy around: symbols kept, line tables
left to the profiling build (docs/bench.md)."""

from __future__ import annotations

import os
import subprocess

import pytest
from harness import memfleet_bin

MAX_BYTES = 15 * 1024 * 1024


def test_release_binary_is_at_most_15_mb() -> None:
    path = memfleet_bin()
    if f"{os.sep}release{os.sep}" not in path:
        pytest.skip(f"not a release build: {path}")
    size = os.path.getsize(path)
    assert size <= MAX_BYTES, f"{path} is {size / 2**20:.1f} MiB"
    # Symbols stay for backtraces and perf; only debug sections are gone.
    sections = subprocess.run(
        ["readelf", "-S", "-W", path], capture_output=True, text=True, check=True
    ).stdout
    assert ".symtab" in sections
    assert ".debug_info" not in sections
