"""Every Client method against a real server, over the meta and the text protocol."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable

import pytest
from client_support import free_port, listening_socket, raw_request

import memfleet
from memfleet.serde import FLAG_INTEGER, FLAG_MSGPACK, FLAG_TEXT

VALUES: list[Any] = [
    b"raw bytes",
    b"",
    "text é ✓",
    "",
    0,
    -17,
    2**70,
    True,
    False,
    1.5,
    None,
    [1, "two", 3.0, None],
    {"name": "ada", "tags": ["a", "b"], "nested": {"x": 1}},
    {1: "int keys"},
    "x" * 20000,
    b"\x00\xff" * 10000,
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_set_get_roundtrip(client: Any, value: Any) -> None:
    assert client.set("k", value)
    got = client.get("k")
    assert got == value
    assert type(got) is type(value)


def test_get_miss_returns_default(client: Any) -> None:
    assert client.get("missing") is None
    assert client.get("missing", "dflt") == "dflt"


def test_tuple_comes_back_as_list(client: Any) -> None:
    client.set("t", (1, 2))
    assert client.get("t") == [1, 2]


def test_add_replace(client: Any) -> None:
    assert client.add("a", 1)
    assert not client.add("a", 2)
    assert client.get("a") == 1
    assert client.replace("a", 3)
    assert not client.replace("nope", 3)
    assert client.get("a") == 3
    assert client.get("nope") is None


def test_append_prepend(client: Any) -> None:
    assert not client.append("ap", b"x")
    client.set("ap", b"mid")
    assert client.append("ap", b">")
    assert client.prepend("ap", "<")
    assert client.get("ap") == b"<mid>"


def test_gets_and_cas(client: Any) -> None:
    assert client.gets("c") == (None, None)
    client.set("c", {"v": 1})
    value, token = client.gets("c")
    assert value == {"v": 1} and isinstance(token, int)
    assert client.cas("c", {"v": 2}, token)
    assert not client.cas("c", {"v": 3}, token)
    assert client.get("c") == {"v": 2}


def test_delete(client: Any) -> None:
    client.set("d", 1)
    assert client.delete("d")
    assert not client.delete("d")
    assert client.get("d") is None


def test_incr_decr(client: Any) -> None:
    assert client.incr("n") is None
    client.set("n", 10)
    assert client.incr("n") == 11
    assert client.incr("n", 5) == 16
    assert client.decr("n", 20) == 0
    assert client.get("n") == 0
    assert client.incr("fresh", 3, initial=100) == 100
    assert client.incr("fresh", 3, initial=100) == 103
    with pytest.raises(ValueError):
        client.incr("n", -1)


def test_touch_and_ttl(client: Any) -> None:
    assert not client.touch("t", 10)
    client.set("t", "v", ttl=2)  # 1 may expire at the next clock tick, before the touch
    assert client.touch("t", 100)
    client.set("gone", "v", ttl=1)
    time.sleep(2.1)
    assert client.get("t") == "v"
    assert client.get("gone") is None


def test_get_many_set_many_delete_many(client: Any) -> None:
    data = {f"k{i}": {"i": i} for i in range(1200)}  # more than one pipeline batch
    assert client.set_many(data) == []
    got = client.get_many(list(data) + ["absent"])
    assert got == data
    assert client.delete_many(list(data)[:600] + ["absent"]) == 600
    assert len(client.get_many(list(data))) == 600
    assert client.get_many([]) == {}


@pytest.mark.parametrize("protocol", ["auto", "meta", "text"])
def test_get_many_reads_every_kind_of_value(servers3: list[Any], make_client: Any, protocol: str) -> None:
    addresses = [s.address for s in servers3]
    c = make_client(addresses, protocol=protocol, key_prefix="gm:", allow_pickle=True)
    values: dict[Any, Any] = {
        "str": "text",
        "unicode": "caf\u00e9 \u2603",
        "empty": "",
        b"bytes-key": b"\x00\xffraw",
        "empty-bytes": b"",
        "int": 7,
        "negative": -12,
        "big": 1 << 80,
        "float": 2.5,
        "dict": {"a": [1, 2], "b": None},
        "list": [True, False, "x"],
        "compressed": "abc" * 2000,
    }
    values.update({f"n{i}": i for i in range(60)})  # enough keys to reach every server
    assert c.set_many(values) == []
    # a duplicate and an absent key
    got = c.get_many([*values, "str", "absent"])
    assert got == values
    assert {type(v) for v in got.values()} >= {str, bytes, int, float, dict, list}
    # another client's prefix sees none of them
    assert make_client(addresses, protocol=protocol).get_many(list(values)) == {}


def test_get_many_of_keys_memcached_refuses(client: Any) -> None:
    with pytest.raises(ValueError):
        client.get_many(["fine", "not fine"])
    with pytest.raises(ValueError):
        client.get_many(["k" * 251])
    assert client.get_many([bytearray(b"ba")]) == {}


def test_set_many_reports_failures(client: Any, make_client: Any) -> None:
    # an item larger than the server's 1 MB limit is refused
    huge = make_client([client.servers[0]], compress_threshold=None, protocol="meta")
    failed = huge.set_many({"ok": 1, "big": b"x" * (2 * 1024 * 1024)})
    assert failed == ["big"]
    assert huge.get("ok") == 1


def test_key_prefix_and_validation(server: Any, make_client: Any) -> None:
    c = make_client([server.address], key_prefix="app1:")
    plain = memfleet.Client([server.address])
    c.set("k", "v")
    assert plain.get("app1:k") == "v"
    assert c.get_many(["k"]) == {"k": "v"}
    for bad in ["has space", "ctl\x01", "x" * 251, ""]:
        with pytest.raises(ValueError):
            plain.get(bad)
    assert plain.set("ключ", "utf-8 keys work")
    assert plain.get("ключ") == "utf-8 keys work"


@pytest.mark.parametrize("protocol", ["meta", "text"])
def test_get_or_set_with_key_prefix_releases_its_lock(server: Any, make_client: Any, protocol: str) -> None:
    c = make_client([server.address], protocol=protocol, key_prefix="app1:")
    plain = memfleet.Client([server.address])
    c.flush_all()
    assert c.get_or_set("k", lambda: "v1", ttl=60) == "v1"
    assert plain.get("app1:k") == "v1"
    # the text protocol's lock key (the prefix is in it once) is gone, so the next miss loads at once
    assert raw_request(c, b"mg memfleet-lock:app1:k v\r\n") == b"EN\r\n"
    assert c.delete("k")
    assert c.get_or_set("k", lambda: "v2", ttl=60) == "v2"
    assert plain.get("app1:k") == "v2"


def test_stats_version_flush(client: Any) -> None:
    (version,) = client.version().values()
    assert version[0].isdigit()
    (stats,) = client.stats().values()
    assert "curr_items" in stats
    client.set("f", 1)
    assert client.flush_all()
    assert client.get("f") is None


def test_flags_on_the_wire(mclient: Any, server: Any) -> None:
    mclient.set("s", "text")
    mclient.set("i", 42)
    mclient.set("m", {"a": 1})
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"mg s f\r\nmg i f\r\nmg m f\r\n")
        time.sleep(0.1)
        reply = s.recv(1000)
    assert reply == b"HD f%d\r\nHD f%d\r\nHD f%d\r\n" % (FLAG_TEXT, FLAG_INTEGER, FLAG_MSGPACK)


def test_protocol_autodetect_uses_meta(server: Any, make_client: Any) -> None:
    c = make_client([server.address])
    c.get("x")
    assert c._router.servers[0].meta is True


def _scripted_server(stop: threading.Event, answer: Callable[[bytes], bytes]) -> int:
    """A fake server on a free port that sends ``answer(line)`` for each request line."""
    lsock = listening_socket()
    lsock.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except OSError:
                continue
            with conn:
                buf = b""
                while not stop.is_set():
                    data = conn.recv(4096)
                    if not data:
                        break
                    buf += data
                    while b"\r\n" in buf:
                        line, buf = buf.split(b"\r\n", 1)
                        conn.sendall(answer(line))
        lsock.close()

    threading.Thread(target=serve, daemon=True).start()
    return int(lsock.getsockname()[1])


def test_protocol_autodetect_falls_back_to_text(make_client: Any) -> None:
    stop = threading.Event()
    # a pre-meta server: ERROR for mn, END for every get
    port = _scripted_server(stop, lambda line: b"END\r\n" if line.startswith(b"get ") else b"ERROR\r\n")
    try:
        c = make_client([f"127.0.0.1:{port}"])
        assert c.get("x") is None
        assert c._router.servers[0].meta is False
    finally:
        stop.set()


def _multiget_answer(line: bytes) -> bytes:
    """Meta replies to ``mg <key> f v k q``: a hit for h*, an EN (which a quiet miss should not
    send, and the client skips) for e*, a server error for x*; MN for mn."""
    if line == b"mn":
        return b"MN\r\n"
    key = line.split()[1]
    if key.startswith(b"h"):
        return b"VA 2 f0 k%b\r\n%b\r\n" % (key, key[-2:])
    if key.startswith(b"e"):
        return b"EN\r\n"
    return b"SERVER_ERROR out of memory\r\n"


def test_meta_multiget_reply_reading(make_client: Any) -> None:
    stop = threading.Event()
    port = _scripted_server(stop, _multiget_answer)
    try:
        c = make_client([f"127.0.0.1:{port}"], protocol="meta", compress_threshold=None)
        assert c.get_many(["h01", "e1", "h02", "e2"]) == {"h01": b"01", "h02": b"02"}
        with pytest.raises(memfleet.MemfleetServerError, match="out of memory"):
            c.get_many(["h03", "x1"])
        assert c.get_many(["h04"]) == {"h04": b"04"}  # a fresh connection: the failed one is closed
    finally:
        stop.set()


def test_timeout_on_silent_server(make_client: Any) -> None:
    lsock = listening_socket()
    try:
        c = make_client([f"127.0.0.1:{lsock.getsockname()[1]}"], timeout=0.3, protocol="meta")
        t0 = time.monotonic()
        with pytest.raises(memfleet.MemfleetConnectionError):
            c.get("x")
        assert 0.25 < time.monotonic() - t0 < 2
    finally:
        lsock.close()


def test_connect_refused_raises_and_ignore_errors(make_client: Any) -> None:
    port = free_port()  # free: nothing listens there
    c = make_client([f"127.0.0.1:{port}"], failure_limit=0)
    with pytest.raises(memfleet.MemfleetConnectionError):
        c.get("x")
    quiet = make_client([f"127.0.0.1:{port}"], ignore_errors=True, failure_limit=0)
    assert quiet.get("x", "d") == "d"
    assert quiet.set("x", 1) is False
    assert quiet.get_many(["a", "b"]) == {}


def test_thread_safety(server: Any) -> None:
    c = memfleet.Client([server.address], max_pool_size=4)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(200):
                key = f"t{n}-{i}"
                c.set(key, {"n": n, "i": i})
                assert c.get(key) == {"n": n, "i": i}
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
