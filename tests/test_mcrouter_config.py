"""`memfleet route --validate-config`: mcrouter JSON configs checked by the built binary.

These tests run the binary on config files and read its exit status and message (routing
with a config is tested in test_route_mcrouter.py); one routes through a JSONM config to a
real memcached.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from harness import free_port, memfleet_bin
from mcrouter_harness import McRouter, fetch, servers, store

__all__ = ["servers"]

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
            "Param in string: 'port' not found",
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
                '    "failover_policy": {"max_tries": 2}\n  }\n}'
            ),
            5,
            "failover_policy has no 'type'",
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


JSONM = """// JSONM: macros, a const, an import beside the config, vars.
{
  "macros": {
    "pool": {"type": "macroDef", "params": ["port", {"name": "host", "default": "127.0.0.1"}],
             "result": {"servers": ["%host%:%port%"]}},
    "base": {"type": "constDef", "result": "@int(11210)"}
  },
  "pools": "@import(pools.json)",
  "route": {"vars": {"p": "A"}, "type": "PoolRoute", "pool": "%p%"}
}
"""


def test_jsonm_config_validates_and_prints_expanded(tmp_path: Path) -> None:
    path = write(tmp_path, JSONM)
    write(tmp_path, '{"A": "@pool(@str(@add(%base%, @int(1))))"}', name="pools.json")
    r = validate("--config", f"file:{path}")
    assert r.returncode == 0, r.stderr
    r = validate("--config", f"file:{path}", mode="--print-expanded-config")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "pools": {"A": {"servers": ["127.0.0.1:11211"]}},
        "route": {"type": "PoolRoute", "pool": "A"},
    }
    # An error names the file, the line of the call and the macro.
    bad = '{\n "macros": {"pool": {"type": "macroDef", "params": ["p"], "result": "%p%"}},\n'
    path = write(tmp_path, bad + ' "route":\n   "@pool(@int(x))"\n}', name="bad.json")
    for mode in ("--validate-config", "--print-expanded-config"):
        r = validate("--config", f"file:{path}", mode=mode)
        assert r.returncode == 1, r.stderr
        assert f"{path}:4:" in r.stderr, r.stderr
        assert "Macro in string 'pool': Macro in string 'int': Can not cast" in r.stderr, r.stderr


def test_is_local_ip_and_seeded_shuffle_expand_as_in_mcrouter(tmp_path: Path) -> None:
    # A common use: one config for every host, each picking its own pool by address.
    text = """{
      "pools": {
        "here": {"servers": {"type": "shuffle", "seed": 42,
          "dictionary": ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]}},
        "there": {"servers": ["192.0.2.1:11211"]}
      },
      "route": {"type": "PoolRoute",
                "pool": "@if(@isLocalIp(127.0.0.1), here, there)"},
      "local6": "@isLocalIp([::1])", "remote": "@isLocalIp(192.0.2.1)", "name": "@isLocalIp(x)"
    }"""
    path = write(tmp_path, text)
    r = validate("--config", f"file:{path}", mode="--print-expanded-config")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["route"]["pool"] == "here"
    assert out["remote"] is False and out["name"] is False
    assert isinstance(out["local6"], bool)
    # libstdc++'s std::shuffle with std::minstd_rand(42) puts [0, 1, 2] in this order.
    order = json.loads(
        Path(__file__).with_name("vectors").joinpath("jsonm-shuffle.json").read_text()
    )
    want = next(c["order"] for c in order["cases"] if c["seed"] == 42 and c["n"] == 3)
    assert out["pools"]["here"]["servers"] == [f"127.0.0.1:{i + 1}" for i in want]


def generated_jsonm(port: int, clusters: int) -> str:
    """A config of `clusters` macro-built pools and routes, one per routing prefix."""
    lines = [
        "{",
        '  "macros": {',
        '    "pool": {"type": "macroDef", "params": ["port"],',
        '             "result": {"servers": ["127.0.0.1:%port%"]}},',
        '    "route": {"type": "macroDef", "params": ["name"],',
        '              "result": {"type": "PoolRoute", "pool": "%name%"}}',
        "  },",
        '  "pools": {',
    ]
    for i in range(clusters):
        sep = "," if i + 1 < clusters else ""
        lines += [
            f'    "p{i}": {{',
            '      "type": "pool",',
            f'      "port": "{port}"',
            f"    }}{sep}",
        ]
    lines += ["  },", '  "routes": [']
    for i in range(clusters):
        sep = "," if i + 1 < clusters else ""
        lines += [
            "    {",
            f'      "aliases": ["/r/c{i}/"],',
            f'      "route": "@route(p{i})"',
            f"    }}{sep}",
        ]
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


def test_a_large_jsonm_config_routes_to_a_real_server(servers) -> None:
    (backend,) = servers(1)
    text = generated_jsonm(backend.port, 150)
    assert len(text.splitlines()) >= 1000
    with McRouter(text, prefix="/r/c7/").start() as r:
        assert store(r.port, "/r/c42/jsonm", "via-macro") == b"STORED\r\n"
        assert fetch(r.port, "/r/c42/jsonm") == b"VALUE /r/c42/jsonm 0 9\r\nvia-macro\r\nEND\r\n"
        # The macro-built PoolRoute stripped the routing prefix on its way to the server.
        assert fetch(backend.port, "jsonm") == b"VALUE jsonm 0 9\r\nvia-macro\r\nEND\r\n"


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


DOC = Path(__file__).resolve().parent.parent / "docs" / "router-mcrouter.md"


def layout_blocks() -> list[str]:
    text = DOC.read_text()
    start = text.index("\n## Common layouts\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```json\n(.*?)\n```", text[start:end], re.DOTALL)


def test_common_layouts_in_the_docs_are_valid(tmp_path: Path) -> None:
    blocks = layout_blocks()
    assert len(blocks) >= 7, "docs: 'Common layouts' lost its configs"
    for i, block in enumerate(blocks):
        json.loads(block)  # plain JSON, copy-pasteable anywhere
        path = write(tmp_path, block, f"layout{i}.json")
        r = validate("--config", f"file:{path}", "-R", "/east/web/")
        assert r.returncode == 0, (i, r.stderr)
