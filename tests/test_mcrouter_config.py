"""`memfleet route --validate-config`: mcrouter JSON configs checked by the built binary.

These tests start no servers: they run the binary on config files and read its exit status
and message (routing with a config is tested in test_route_mcrouter.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import free_port, memfleet_bin

VALID = """// An mcrouter config as mcrouter's wiki writes them.
{
  "pools": {
    "A": {"servers": ["127.0.0.1:11211", "[::1]:11212", "cache-3:11213"]},
    "B": {"servers": ["127.0.0.1:11311"], "weights": [0.5]}, /* weighted */
  },
  "named_handles": {"main": {"type": "PoolRoute", "pool": "A", "hash": "Ch3"}},
  "routes": [
    {
      "aliases": ["/region/cluster/"],
      "route": {
        "type": "OperationSelectorRoute",
        "operation_policies": {
          "delete": "AllSyncRoute|Pool|A",
          "get": {"type": "FailoverRoute", "children": ["main", "PoolRoute|B"]}
        },
        "default_policy": {"type": "FailoverWithExptimeRoute", "normal": "main",
                           "failover": ["PoolRoute|B"], "failover_exptime": 60}
      }
    },
    {"aliases": ["/region/other/"], "route": "HashRoute|Pool|A"},
  ]
}
"""


def validate(*args: str, mode: str = "--validate-config") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [memfleet_bin(), "route", mode, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def write(tmp_path: Path, text: str, name: str = "mcrouter.json") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_valid_config_exits_zero(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    r = validate("--config", f"file:{path}", "-R", "/region/cluster/")
    assert r.returncode == 0, r.stderr
    assert f"mcrouter config '{path}' is valid (2 pools," in r.stderr


def test_every_way_of_giving_the_config(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    for args in (
        ["--config-file", str(path)],
        ["--config", VALID],
        ["--config-str", VALID],
    ):
        r = validate(*args, "--route-prefix", "/region/other/")
        assert r.returncode == 0, (args, r.stderr)
    for mode in ("--validate-config=exit", "--validate-config"):
        r = validate("--config", f"file:{path}", "-R", "/region/other/", mode=mode)
        assert r.returncode == 0, (args, r.stderr)


def test_default_route_must_be_an_alias(tmp_path: Path) -> None:
    r = validate("--config", f"file:{write(tmp_path, VALID)}")
    assert r.returncode == 1
    assert "default routing prefix /././ (--route-prefix) is not among" in r.stderr


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            '{\n  "pools": {"A": {"servers": ["h:1",, "h:2"]}},\n  "route": "PoolRoute|A"\n}',
            2,
            "at pools.A.servers[0]",
        ),
        (
            '{\n  "pools": {"A": {"servers": ["h:1"]}},\n  "route": {"type": "FancyRoute"}\n}',
            3,
            "unknown route handle type 'FancyRoute'",
        ),
        (
            '{\n  "pools": {"A": {"servers": ["h:1"]}},\n  "route": "PoolRoute|C"\n}',
            3,
            "pool 'C' is not defined (pools: A)",
        ),
        (
            (
                '{\n  "named_handles": {\n    "a": "FailoverRoute|b",\n    "b": "AllSyncRoute|a"\n'
                '  },\n  "route": "a"\n}'
            ),
            4,
            "route cycle: a -> b -> a",
        ),
        (
            '{\n  "pools": {"A": {"servers": ["h:%port%"]}},\n  "route": "PoolRoute|A"\n}',
            2,
            "JSONM variable '%port%'",
        ),
        (
            '{\n  "pools": {"A": {"servers": ["h:1:caret"]}},\n  "route": "PoolRoute|A"\n}',
            2,
            "ascii only",
        ),
        (
            (
                '{\n  "pools": {"A": {"servers": ["h:1", "h:2"]}},\n  "route": {\n'
                '    "type": "FailoverRoute", "children": "Pool|A",\n'
                '    "failover_policy": {"type": "FancyPolicy"}\n  }\n}'
            ),
            5,
            "unknown failover_policy type 'FancyPolicy'",
        ),
    ],
)
def test_bad_config_exits_one_naming_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = write(tmp_path, text)
    r = validate("--config", f"file:{path}")
    assert r.returncode == 1, r.stderr
    assert f"{path}:{line}:" in r.stderr, r.stderr
    assert message in r.stderr, r.stderr


def test_macros_are_refused_by_name(tmp_path: Path) -> None:
    path = write(tmp_path, '{"macros": {}, "route": "@merge(a, b)"}')
    r = validate("--config", f"file:{path}")
    assert r.returncode == 1
    assert "JSONM 'macros' are not supported" in r.stderr


def test_missing_file_and_bad_mode_are_errors(tmp_path: Path) -> None:
    r = validate("--config", f"file:{tmp_path / 'absent.json'}")
    assert r.returncode == 1
    assert "cannot read config file" in r.stderr
    path = write(tmp_path, '{"route": "NullRoute"}')
    r = validate("--config", f"file:{path}", mode="--validate-config=later")
    assert r.returncode == 1
    assert "expected exit or run" in r.stderr


def test_a_path_without_file_prefix_is_named_as_such(tmp_path: Path) -> None:
    """mcrouter reads `--config` as `file:PATH` or inline JSON; a bare path (a common slip)
    gets a message that says so, not a JSON error at line 1, whether it exists or not."""
    path = write(tmp_path, VALID)
    for given in (str(path), str(tmp_path / "absent.json"), "mcrouter.json"):
        r = validate("--config", given, "-R", "/region/cluster/")
        assert r.returncode == 1, r.stderr
        assert f"--config file:{given}" in r.stderr, r.stderr
        run = subprocess.run(
            [memfleet_bin(), "route", "--config", given, "-p", str(free_port())],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert run.returncode != 0
        assert f"--config file:{given}" in run.stderr, run.stderr
    # Inline JSON(M) still works, with a comment before the object too.
    r = validate("--config", "// pools\n" + VALID, "-R", "/region/cluster/")
    assert r.returncode == 0, r.stderr
