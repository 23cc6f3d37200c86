"""value_format="php-memcached": values shared with real php-memcached, in both directions."""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
from typing import Any

import pytest
from client_support import Server

import memfleet
from memfleet import _php

PHP = shutil.which("php")


def _php_modules() -> set[str]:
    if PHP is None:
        return set()
    out = subprocess.run([PHP, "-m"], capture_output=True, text=True, check=False).stdout
    return {line.strip().lower() for line in out.splitlines()}


pytestmark = pytest.mark.skipif(
    not {"memcached", "msgpack", "json"} <= _php_modules(), reason="needs php with memcached, msgpack, json"
)

SERIALIZERS = {"msgpack": "Memcached::SERIALIZER_MSGPACK", "json": "Memcached::SERIALIZER_JSON_ARRAY"}

PRELUDE = """
$m = new Memcached();
$m->addServer('127.0.0.1', (int)$argv[1]);
$m->setOption(Memcached::OPT_SERIALIZER, %s);
$m->setOption(Memcached::OPT_COMPRESSION_TYPE, %s);
function rep($v) {
    if (is_string($v)) return ['string', bin2hex($v)];
    if (is_float($v)) return ['double', is_nan($v) ? 'NAN' : (is_infinite($v) ? ($v > 0 ? 'INF' : '-INF') : $v)];
    return [gettype($v), $v];
}
"""


def php(server: Server, serializer: str, body: str, *args: str, compression: str = "ZLIB") -> Any:
    """Run PHP ``body`` against ``server`` (compression from 100 bytes, ``$argv[2:]`` = ``args``);
    its JSON output."""
    code = PRELUDE % (SERIALIZERS[serializer], f"Memcached::COMPRESSION_{compression}") + body
    out = subprocess.run(
        [PHP or "php", "-d", "memcached.compression_threshold=100", "-r", code, "--", str(server.port), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(out.stdout) if out.stdout.strip() else None


# what PHP writes (as PHP source) and what Python must read
RECORD = {"name": "Ada", "roles": ["admin", "dev"], "n": 3, "x": 1.5, "ok": True, "none": None}
PHP_RECORD = "['name' => 'Ada', 'roles' => ['admin', 'dev'], 'n' => 3, 'x' => 1.5, 'ok' => true, 'none' => null]"
FROM_PHP: dict[str, tuple[str, Any]] = {
    "s": ("'héllo wörld'", "héllo wörld"),
    "bin": ('"\\xff\\x00"', b"\xff\x00"),
    "empty": ("''", ""),
    "i": ("42", 42),
    "neg": ("-7", -7),
    "d": ("3.25", 3.25),
    "inf": ("INF", math.inf),
    "t": ("true", True),
    "f": ("false", False),
    "rec": (PHP_RECORD, RECORD),
    "list": ("[1, 2, 3]", [1, 2, 3]),
    "big": ("str_repeat('abcdefgh', 500)", "abcdefgh" * 500),
    "bigrec": (f"array_fill(0, 100, {PHP_RECORD})", [RECORD] * 100),
}
COMPRESSED = {"big", "bigrec"}


def raw_item(server: Server, key: str) -> tuple[int, bytes]:
    """(flags, stored bytes) as the server holds them."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as s:
        s.sendall(b"mg " + key.encode() + b" f v\r\n")
        buf = b""
        while not buf.endswith(b"\r\n") or buf.count(b"\r\n") < 2:
            buf += s.recv(65536)
    head, _, rest = buf.partition(b"\r\n")
    parts = head.split()
    return int(parts[2][1:]), rest[: int(parts[1])]


def raw_flags(server: Server, key: str) -> int:
    return raw_item(server, key)[0]


@pytest.mark.parametrize("serializer", ["msgpack", "json"])
def test_python_reads_what_php_wrote(server: Server, make_client: Any, serializer: str) -> None:
    c = make_client([server.address], value_format="php-memcached")
    c.flush_all()
    php(server, serializer, "".join(f"$m->set('{k}', {src});\n" for k, (src, _) in FROM_PHP.items()))
    for k, (_, want) in FROM_PHP.items():
        assert c.get(k) == want, k
    assert c.get_many(list(FROM_PHP)) == {k: want for k, (_, want) in FROM_PHP.items()}
    for k in COMPRESSED:  # PHP really compressed these (zlib)
        assert raw_flags(server, k) & (_php.COMPRESSED | _php.ZLIB) == _php.COMPRESSED | _php.ZLIB
    assert c.incr("i", 8) == 50  # a PHP integer is a memcached counter
    assert c.get("i") == 50


def _from_php_rep(rep: list[Any]) -> Any:
    kind, v = rep
    if kind == "string":
        return bytes.fromhex(v)
    if kind == "double" and isinstance(v, str):
        return {"INF": math.inf, "-INF": -math.inf}.get(v, math.nan)
    return v


@pytest.mark.parametrize("serializer", ["msgpack", "json"])
@pytest.mark.parametrize("compression", ["zlib", "zstd"])
def test_php_reads_what_python_wrote(server: Server, make_client: Any, serializer: str, compression: str) -> None:
    if compression == "zstd" and php(server, serializer, "echo json_encode(defined('Memcached::HAVE_ZSTD'));") is False:
        pytest.skip("this php-memcached has no zstd (Debian's 3.2 build); Python reads its own below")
    c = make_client(
        [server.address],
        value_format="php-memcached",
        serializer=serializer,
        compress_threshold=100,
        php_compression=compression,
    )
    c.flush_all()
    values: dict[str, Any] = {k: want for k, (_, want) in FROM_PHP.items()}
    values["nan"] = math.nan
    values["ninf"] = -math.inf
    for k, v in values.items():
        assert c.set(k, v)
    for k in COMPRESSED:
        flags, stored = raw_item(server, k)
        assert flags & _php.COMPRESSED
        # php-memcached's header: the uncompressed length, 4 bytes little-endian
        assert int.from_bytes(stored[:4], "little") == len(c._serde.serialize(values[k])[0])
    read = "$o = []; foreach (json_decode($argv[2]) as $k) { $o[$k] = rep($m->get($k)); } echo json_encode($o);"
    got = php(server, serializer, read, json.dumps(list(values)))
    php_type = {bool: "boolean", int: "integer", float: "double", dict: "array", list: "array"}
    for k, want in values.items():
        have = _from_php_rep(got[k])
        assert got[k][0] == php_type.get(type(want), "string"), k
        if isinstance(want, float) and math.isnan(want):
            assert math.isnan(have), k
        else:
            assert have == (want.encode() if isinstance(want, str) else want), k


def test_zstd_layout_reads_back(server: Server) -> None:
    """php-memcached 3.3's zstd layout: flags 16|128, then the length and a zstd frame."""
    c = memfleet.Client([server.address], value_format="php-memcached", php_compression="zstd")
    c.set("z", "x" * 5000)
    assert raw_flags(server, "z") & 0xFFF0 == _php.COMPRESSED | _php.ZSTD
    assert c.get("z") == "x" * 5000
    c.close()


def test_python_reads_php_fastlz(server: Server) -> None:
    """PHP's default compression: FastLZ level 1 below 64 KB, level 2 from 64 KB."""
    php(
        server,
        "msgpack",
        "mt_srand(7); $words = ['cache', 'fleet', 'memory', 'php', 'python', 'zstd', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'];"
        "$s = ''; for ($i = 0; $i < 30000; $i++) { $s .= $words[mt_rand(0, 6)] . chr(mt_rand(0, 255)); }"
        "$m->set('short', substr($s, 0, 3000)); $m->set('long', $s); $m->set('rec', array_fill(0, 200, ['a' => 1]));"
        "$m->set('run', str_repeat('x', 100000));"
        "echo json_encode(['short' => bin2hex(substr($s, 0, 3000)), 'long' => bin2hex($s)]);",
        compression="FASTLZ",
    )
    c = memfleet.Client([server.address], value_format="php-memcached")
    want = php(
        server,
        "msgpack",
        "mt_srand(7); $words = ['cache', 'fleet', 'memory', 'php', 'python', 'zstd', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'];"
        "$s = ''; for ($i = 0; $i < 30000; $i++) { $s .= $words[mt_rand(0, 6)] . chr(mt_rand(0, 255)); }"
        "echo json_encode(['short' => bin2hex(substr($s, 0, 3000)), 'long' => bin2hex($s)]);",
    )
    for key in ("short", "long", "rec", "run"):
        assert raw_flags(server, key) & (_php.COMPRESSED | _php.FASTLZ) == _php.COMPRESSED | _php.FASTLZ, key
    assert len(bytes.fromhex(want["long"])) > 65536  # FastLZ level 2
    got = c.get_many(["short", "long", "rec", "run"])
    for key in ("short", "long"):
        v = got[key]
        assert (v.encode("utf-8") if isinstance(v, str) else v) == bytes.fromhex(want[key]), key
    assert got["rec"] == [{"a": 1}] * 200
    assert got["run"] == "x" * 100000
    c.close()


def test_corrupt_fastlz_is_an_error_not_garbage() -> None:
    with pytest.raises(ValueError):
        _php.fastlz_decompress(b"\x1f" + b"ab", 100)  # a literal run longer than the block
    with pytest.raises(ValueError):
        _php.fastlz_decompress(b"\x00a\xe0\x05", 100)  # a match reaching before the start
    assert _php.fastlz_decompress(b"\x02abc\x20\x02", 6) == b"abcabc"


def test_php_format_has_no_managed_dictionaries(server: Server) -> None:
    c = memfleet.Client([server.address], value_format="php-memcached")
    assert c.dictionaries.policy is None
    with pytest.raises(ValueError):
        memfleet.Client([server.address], value_format="php-memcached", serializer="pickle")
    c.close()
