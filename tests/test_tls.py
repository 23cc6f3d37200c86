"""TLS on `memfleet serve -Z` (and the Python client's `tls=`), checked against Debian's
memcached -Z where both should behave alike. Certificates are made per test with trustme."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import memfleet as mf
import pytest
import redis
import trustme
from harness import (
    Conn,
    Server,
    eventually,
    free_port,
    memcached,
    memfleet,
    memfleet_bin,
    wait_for_port,
)
from mcrouter_harness import McRouter, ask
from memfleet.aio import AsyncClient
from memfleet.errors import MemfleetError
from proxy_harness import Proxy, pool_yaml

IMPLS = ["memfleet", "memcached"]


@dataclass
class Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as files."""

    ca: trustme.CA
    dir: Path
    chain: Path
    key: Path
    ca_file: Path
    client: trustme.LeafCert

    def context(self, client_cert: bool = False, ca: trustme.CA | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        (ca or self.ca).configure_trust(ctx)
        if client_cert:
            self.client.configure_cert(ctx)
        return ctx

    def client_files(self) -> tuple[Path, Path]:
        """The client certificate and its key written as files, for programs given paths."""
        pem, key = self.dir / "client.pem", self.dir / "client.key"
        self.client.cert_chain_pems[0].write_to_path(str(pem))
        self.client.private_key_pem.write_to_path(str(key))
        return pem, key

    def pool_tls(self) -> dict[str, object]:
        """A nutcracker pool's keys for mutual TLS to its servers, with our client certificate."""
        client_pem, client_key = self.client_files()
        return {
            "tls": True,
            "tls_ca_file": self.ca_file,
            "tls_cert_file": client_pem,
            "tls_key_file": client_key,
        }

    def server_opts(self, *extra: str) -> tuple[str, ...]:
        opts = ",".join((f"ssl_chain_cert={self.chain}", f"ssl_key={self.key}", *extra))
        return ("-Z", "-o", opts)


def write_server_cert(ca: trustme.CA, chain: Path, key: Path) -> None:
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    chain.write_bytes(b"".join(b.bytes() for b in leaf.cert_chain_pems))
    key.write_bytes(leaf.private_key_pem.bytes())


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = trustme.CA()
    chain, key, ca_file = tmp_path / "chain.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    write_server_cert(ca, chain, key)
    ca.cert_pem.write_to_path(str(ca_file))
    return Pki(ca, tmp_path, chain, key, ca_file, ca.issue_cert("client@example"))


@pytest.fixture
def start() -> Iterator[Callable[..., Server]]:
    """Starts memfleet or memcached with given flags; stops them after the test."""
    started: list[Server] = []

    def run(impl: str, *args: str, port: int | None = None) -> Server:
        s = (memfleet if impl == "memfleet" else memcached)(*args, port=port).start()
        started.append(s)
        return s

    yield run
    for s in started:
        s.stop()


def tls_conn(port: int, ctx: ssl.SSLContext) -> Conn:
    c = Conn(port)
    c.sock = ctx.wrap_socket(c.sock, server_hostname="127.0.0.1")
    return c


def read_to_close(c: Conn) -> bytes:
    """What the server sends before it closes (memcached resets rather than closes)."""
    try:
        return c.read_all(timeout=5.0)
    except ConnectionResetError:
        return b""


@pytest.mark.parametrize("impl", IMPLS)
def test_sync_and_async_clients_over_tls(impl: str, pki: Pki, start: Callable[..., Server]) -> None:
    srv = start(impl, *pki.server_opts())
    ctx = pki.context()
    client = mf.Client([("127.0.0.1", srv.port)], tls=ctx)
    big = b"v" * 300_000  # several TLS records each way
    client.set("small", "hello")
    client.set("big", big)
    assert client.get("small") == "hello"
    assert client.get("big") == big
    assert client.get_many(["small", "big", "missing"]) == {"small": "hello", "big": big}
    client.close()

    async def run() -> None:
        a = AsyncClient([("127.0.0.1", srv.port)], tls=ctx)
        await a.set("async", b"x" * 70_000)
        assert await a.get("async") == b"x" * 70_000
        assert await a.get("small") == "hello"

    asyncio.run(run())


@pytest.mark.parametrize("impl", IMPLS)
def test_client_refuses_a_server_it_does_not_trust(
    impl: str, pki: Pki, start: Callable[..., Server]
) -> None:
    srv = start(impl, *pki.server_opts())
    with pytest.raises(MemfleetError):
        mf.Client([("127.0.0.1", srv.port)], tls=pki.context(ca=trustme.CA())).get("k")


@pytest.mark.parametrize("impl", IMPLS)
def test_mutual_tls_require_refuses_a_client_without_certificate(
    impl: str, pki: Pki, start: Callable[..., Server]
) -> None:
    srv = start(impl, *pki.server_opts(f"ssl_ca_cert={pki.ca_file}", "ssl_verify_mode=2"))
    with_cert = mf.Client([("127.0.0.1", srv.port)], tls=pki.context(client_cert=True))
    with_cert.set("k", "v")
    assert with_cert.get("k") == "v"
    without = mf.Client([("127.0.0.1", srv.port)], tls=pki.context(), failure_limit=100)
    with pytest.raises(MemfleetError):
        without.get("k")
    # A certificate from another CA is refused as well.
    stranger = pki.context()
    trustme.CA().issue_cert("mallory").configure_cert(stranger)
    with pytest.raises(MemfleetError):
        mf.Client([("127.0.0.1", srv.port)], tls=stranger).get("k")


@pytest.mark.parametrize("impl", IMPLS)
def test_verify_mode_request_lets_clients_without_certificate_in(
    impl: str, pki: Pki, start: Callable[..., Server]
) -> None:
    srv = start(impl, *pki.server_opts(f"ssl_ca_cert={pki.ca_file}", "ssl_verify_mode=1"))
    for ctx in (pki.context(), pki.context(client_cert=True)):
        c = mf.Client([("127.0.0.1", srv.port)], tls=ctx)
        c.set("k", "v")
        assert c.get("k") == "v"


@pytest.mark.parametrize("impl", IMPLS)
def test_refresh_certs_picks_up_a_new_certificate(
    impl: str, pki: Pki, start: Callable[..., Server]
) -> None:
    srv = start(impl, *pki.server_opts())
    old = tls_conn(srv.port, pki.context())
    assert old.request(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    new_ca = trustme.CA()
    write_server_cert(new_ca, pki.chain, pki.key)
    # Not yet re-read: new connections still get the old certificate.
    tls_conn(srv.port, pki.context()).close()
    assert old.request(b"refresh_certs\r\n") == b"OK\r\n"
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_conn(srv.port, pki.context())
    fresh = tls_conn(srv.port, pki.context(ca=new_ca))
    assert fresh.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n"
    # The connection made before the refresh goes on with its session.
    assert old.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nv\r\nEND\r\n"
    assert old.request(b"refresh_certs noreply\r\nmn\r\n") == b"MN\r\n"
    # A file that cannot be read: an error reply, and the loaded certificate stays in use.
    pki.chain.unlink()
    reply = old.request(b"refresh_certs\r\n")
    assert reply.startswith(b"Error loading the certificate chain: ") and reply.endswith(b"\r\n")
    tls_conn(srv.port, pki.context(ca=new_ca)).close()
    old.close()
    fresh.close()


def test_refresh_certs_without_tls_says_so(start: Callable[..., Server]) -> None:
    for impl in IMPLS:
        srv = start(impl)
        with Conn(srv.port) as c:
            assert c.request(b"refresh_certs\r\n") == b"Error TLS not enabled\r\n"


@pytest.mark.parametrize("impl", IMPLS)
def test_plain_listener_beside_a_tls_one(impl: str, pki: Pki, start: Callable[..., Server]) -> None:
    plain_port = free_port()
    srv = start(impl, *pki.server_opts(), "-l", f"notls:127.0.0.1:{plain_port}")
    with Conn(plain_port) as plain:
        assert plain.request(b"set k 0 0 2\r\nab\r\n") == b"STORED\r\n"
    with tls_conn(srv.port, pki.context()) as secure:
        assert secure.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 2\r\nab\r\nEND\r\n"
    # Plain text on the TLS listener gets no memcached reply.
    with Conn(srv.port) as wrong:
        wrong.send(b"get k\r\n")
        assert b"VALUE" not in read_to_close(wrong)


def test_stats_show_tls_like_memcached(pki: Pki, start: Callable[..., Server]) -> None:
    seen = []
    for impl in IMPLS:
        srv = start(impl, *pki.server_opts(f"ssl_ca_cert={pki.ca_file}", "ssl_verify_mode=1"))
        with tls_conn(srv.port, pki.context()) as c:
            general = c.stats()
            settings = c.stats("settings")
        # memcached sometimes counts the harness's connect-and-close probe; memfleet never
        # counts a connection that closes before sending anything.
        assert general["ssl_handshake_errors"] == "0" or impl == "memcached"
        assert int(general["time_since_server_cert_refresh"]) >= 0
        assert settings["ssl_enabled"] == "yes"
        assert settings["ssl_verify_mode"] == "1"
        assert settings["ssl_chain_cert"] == str(pki.chain)
        assert settings["ssl_ca_cert"] == str(pki.ca_file)
        seen.append(sorted(k for k in settings if k.startswith("ssl_")))
    assert seen[0] == seen[1]


def test_a_client_stalled_mid_handshake_blocks_no_one(
    pki: Pki, start: Callable[..., Server]
) -> None:
    srv = start("memfleet", *pki.server_opts(), "-t", "1")
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = pki.context().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = outgoing.read()
    stalled = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    stalled.sendall(hello[: len(hello) // 2])
    # One worker thread: the stalled handshake and these clients share its loop.
    for i in range(3):
        with tls_conn(srv.port, pki.context()) as c:
            assert c.request(b"set k%d 0 0 1\r\nx\r\n" % i) == b"STORED\r\n"
    # The stalled client finishes its handshake and is served too.
    stalled.sendall(hello[len(hello) // 2 :])
    while True:
        try:
            obj.do_handshake()
            break
        except ssl.SSLWantReadError:
            if outgoing.pending:
                stalled.sendall(outgoing.read())
            data = stalled.recv(65536)
            assert data, "server closed the stalled connection"
            incoming.write(data)
    if outgoing.pending:
        stalled.sendall(outgoing.read())
    obj.write(b"get k0\r\n")
    stalled.sendall(outgoing.read())
    reply = b""
    while not reply.endswith(b"END\r\n"):
        try:
            reply += obj.read(65536)
        except ssl.SSLWantReadError:
            incoming.write(stalled.recv(65536))
    assert reply == b"VALUE k0 0 1\r\nx\r\nEND\r\n"
    stalled.close()


def test_garbage_instead_of_a_client_hello_closes_only_that_connection(
    pki: Pki, start: Callable[..., Server]
) -> None:
    srv = start("memfleet", *pki.server_opts(), "-t", "1")
    good = tls_conn(srv.port, pki.context())
    assert good.request(b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
    with Conn(srv.port) as bad:
        bad.send(b"GET / HTTP/1.0\r\n\r\n" * 4)
        got = read_to_close(bad)
        # At most a TLS alert record (content type 21), then the close.
        assert got == b"" or got[0] == 21
        assert bad.sock.recv(1) == b""
    assert good.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
    assert good.stats()["ssl_handshake_errors"] == "1"
    good.close()


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            memfleet_bin(),
            "bench",
            "-t",
            "1",
            "-c",
            "2",
            "-n",
            "200",
            "--hide-histogram",
            "--quiet",
            *args,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("impl", IMPLS)
def test_bench_over_tls_with_memtier_options(
    impl: str, pki: Pki, start: Callable[..., Server]
) -> None:
    srv = start(impl, *pki.server_opts(f"ssl_ca_cert={pki.ca_file}", "ssl_verify_mode=2"))
    client_pem, client_key = pki.client_files()
    js = pki.dir / "r.json"
    port = ["-p", str(srv.port)]
    mutual = ["--cert", str(client_pem), "--key", str(client_key)]
    r = bench(*port, "--tls", "--cacert", str(pki.ca_file), *mutual, f"--json-out-file={js}")
    assert r.returncode == 0, r.stderr + r.stdout
    report = json.loads(js.read_text())
    assert report["totals"]["ops"] == 400
    assert report["errors"] == 0 and report["connection_errors"] == 0
    with tls_conn(srv.port, pki.context(client_cert=True)) as c:
        assert int(c.stats()["cmd_set"]) > 0
    # Verified against the name given with --sni: the certificate is for localhost too.
    assert (
        bench(
            *port, "--tls", "--cacert", str(pki.ca_file), *mutual, "--sni", "localhost"
        ).returncode
        == 0
    )
    # Without a client certificate the server refuses every connection (with TLS 1.3 the
    # client learns it after its side of the handshake, at the first read).
    refused = bench(*port, "--tls", "--cacert", str(pki.ca_file))
    assert refused.returncode != 0 or "connection errors 2\n" in refused.stdout
    # A server certificate from an unknown CA fails, unless verification is skipped.
    other_ca = pki.dir / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    assert bench(*port, "--tls", "--cacert", str(other_ca), *mutual).returncode != 0
    assert bench(*port, "--tls", "--tls-skip-verify", *mutual).returncode == 0


# ---- memfleet route: TLS on a pool's listener and to its servers ----


def route(conf: str, port: int) -> Proxy:
    return Proxy(conf, port).start()


@pytest.mark.parametrize("impl", IMPLS)
def test_route_speaks_mutual_tls_to_its_servers(
    impl: str, pki: Pki, start: Callable[..., Server]
) -> None:
    backend = start(impl, *pki.server_opts(f"ssl_ca_cert={pki.ca_file}", "ssl_verify_mode=2"))
    port = free_port()
    tls = pki.pool_tls()
    conf = pool_yaml("p", f"127.0.0.1:{port}", [f"127.0.0.1:{backend.port}:1"], **tls)
    proxy = route(conf, port)
    try:
        with Conn(port) as c:
            assert c.request(b"set k 0 0 5\r\nhello\r\n") == b"STORED\r\n"
            assert c.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"
        with tls_conn(backend.port, pki.context(client_cert=True)) as direct:
            assert direct.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"
    finally:
        proxy.stop()
    # Without the client certificate the server refuses the router: clients get an error.
    del tls["tls_cert_file"], tls["tls_key_file"]
    conf = pool_yaml("p", f"127.0.0.1:{port}", [f"127.0.0.1:{backend.port}:1"], **tls)
    proxy = route(conf, port)
    try:
        with Conn(port) as c:
            assert c.request(b"get k\r\n").startswith(b"SERVER_ERROR")
    finally:
        proxy.stop()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_route_speaks_mutual_tls_to_redis_servers(pki: Pki) -> None:
    """A Redis pool with `tls: true`: redis-server listens on TLS only and requires a client
    certificate; redis-py reaches it through the router in plaintext."""
    rport = free_port()
    backend = Server(
        [
            shutil.which("redis-server") or "redis-server",
            *("--port", "0", "--tls-port", str(rport), "--bind", "127.0.0.1"),
            *("--tls-cert-file", str(pki.chain), "--tls-key-file", str(pki.key)),
            *("--tls-ca-cert-file", str(pki.ca_file), "--tls-auth-clients", "yes"),
            *("--save", "", "--appendonly", "no", "--logfile", "", "--loglevel", "warning"),
        ],
        port=rport,
    ).start()
    port = free_port()
    tls = pki.pool_tls()
    try:
        conf = pool_yaml("r", f"127.0.0.1:{port}", [f"127.0.0.1:{rport}:1"], redis=True, **tls)
        proxy = route(conf, port)
        try:
            r = redis.Redis(host="127.0.0.1", port=port, protocol=2)
            assert r.set("tls:k", "hello") is True
            assert r.get("tls:k") == b"hello"
            assert r.incr("tls:n", 5) == 5
        finally:
            proxy.stop()
        direct = redis.Redis(
            host="127.0.0.1",
            port=rport,
            protocol=2,
            ssl=True,
            ssl_ca_certs=str(pki.ca_file),
            ssl_certfile=str(tls["tls_cert_file"]),
            ssl_keyfile=str(tls["tls_key_file"]),
        )
        assert direct.get("tls:k") == b"hello"
        # Without the client certificate redis-server refuses the router: clients get errors.
        del tls["tls_cert_file"], tls["tls_key_file"]
        conf = pool_yaml("r", f"127.0.0.1:{port}", [f"127.0.0.1:{rport}:1"], redis=True, **tls)
        proxy = route(conf, port)
        try:
            with pytest.raises(redis.RedisError):
                redis.Redis(host="127.0.0.1", port=port, protocol=2).get("tls:k")
        finally:
            proxy.stop()
    finally:
        backend.stop()


def test_route_listener_speaks_tls(pki: Pki, start: Callable[..., Server]) -> None:
    backend = start("memcached")
    port = free_port()
    tls = {
        "listen_tls_cert_file": pki.chain,
        "listen_tls_key_file": pki.key,
        "listen_tls_ca_file": pki.ca_file,
    }
    proxy = route(pool_yaml("p", f"127.0.0.1:{port}", [f"127.0.0.1:{backend.port}:1"], **tls), port)
    try:
        client = mf.Client(
            [("127.0.0.1", port)], tls=pki.context(client_cert=True), protocol="text"
        )
        client.set("k", "through")
        assert client.get("k") == "through"
        with tls_conn(port, pki.context(client_cert=True)) as c:
            big = b"x" * 200_000
            assert c.request(b"set big 0 0 %d\r\n%s\r\n" % (len(big), big)) == b"STORED\r\n"
            assert c.request(b"get big\r\n", b"END\r\n") == b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (
                len(big),
                big,
            )
        refuses_clients_without_certificate_or_tls(pki, port)
    finally:
        proxy.stop()


def refuses_clients_without_certificate_or_tls(pki: Pki, port: int) -> None:
    """A client without a certificate, and one that does not speak TLS, get nothing."""
    with pytest.raises(MemfleetError):
        mf.Client([("127.0.0.1", port)], tls=pki.context(), protocol="text").get("k")
    with Conn(port) as plain:
        plain.send(b"get k\r\n")
        assert b"VALUE" not in read_to_close(plain)


# ---- memfleet route with an mcrouter config: `:ssl` servers, --pem-*, --ssl-port ----


def mcrouter_route(
    pki: Pki, config: dict, *flags: str, plain_port: bool = True
) -> tuple[McRouter, int]:
    """The router with `config` and `flags`; its plain port (0 without one)."""
    r = McRouter(config)
    # Appended as given: McRouter's extras are flag/value pairs, and some of these take none.
    r.argv += flags
    if not plain_port:
        # Only --ssl-port: drop the harness's `-p PORT`.
        i = r.argv.index("-p")
        del r.argv[i : i + 2]
        r.port = None
    return r.start(), (r.port or 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_mcrouter_ssl_servers_with_pem_flags(
    impl: str, pki: Pki, start: Callable[..., Server]
) -> None:
    """A pool of `host:port:ascii:ssl` servers over mutual TLS (--pem-*), beside a plain
    pool; a TLS server that goes away is TKO'd and brought back by a TLS probe."""
    mutual = (f"ssl_ca_cert={pki.ca_file}", "ssl_verify_mode=2")
    secure = start(impl, *pki.server_opts(*mutual))
    plain = start(impl)
    client_pem, client_key = pki.client_files()
    config = {
        "pools": {
            "S": {"servers": [f"{secure.address}:ascii:ssl"]},
            "P": {"servers": [f"{plain.address}:ascii:plain"]},
        },
        "route": {"type": "AllSyncRoute", "children": ["PoolRoute|S", "PoolRoute|P"]},
    }
    pem = ["--pem-ca-path", str(pki.ca_file)]
    pem += ["--pem-cert-path", str(client_pem), "--pem-key-path", str(client_key)]
    r, port = mcrouter_route(pki, config, *pem)
    try:
        with Conn(port) as c:
            assert c.request(b"set k 0 0 5\r\nhello\r\n") == b"STORED\r\n"
            assert c.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"
        with tls_conn(secure.port, pki.context(client_cert=True)) as direct:
            assert direct.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"
        with Conn(plain.port) as direct:
            assert direct.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"

        port_of_secure = secure.port
        secure.stop()
        eventually(
            lambda: ask(port, b"set k 0 0 1\r\nx\r\n") == b"SERVER_ERROR unavailable\r\n",
            "the TLS server is TKO",
        )
        start(impl, *pki.server_opts(*mutual), port=port_of_secure)
        eventually(
            lambda: ask(port, b"set k 0 0 1\r\ny\r\n") == b"STORED\r\n", "back after a TLS probe"
        )
        assert "is back (probe answered)" in r.log_text()
    finally:
        r.stop()
    # Without the client certificate the TLS server refuses the router.
    r, port = mcrouter_route(pki, config, "--pem-ca-path", str(pki.ca_file))
    try:
        assert ask(port, b"set k 0 0 1\r\nz\r\n").startswith(b"SERVER_ERROR")
        assert ask(plain.port, b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\nz\r\nEND\r\n"
    finally:
        r.stop()


def test_mcrouter_pool_wide_use_ssl_and_port_override(
    pki: Pki, start: Callable[..., Server]
) -> None:
    """mcrouter's pool-level `use_ssl` makes its servers TLS, and `port_override` sends every
    server of the pool to that port (here: the TLS port, the entry naming a dead one)."""
    secure = start("memcached", *pki.server_opts())
    config = {
        "pools": {
            "S": {"servers": ["127.0.0.1:1"], "use_ssl": True, "port_override": secure.port},
        },
        "route": "PoolRoute|S",
    }
    r, port = mcrouter_route(pki, config, "--pem-ca-path", str(pki.ca_file))
    try:
        assert ask(port, b"set k 0 0 3\r\ntls\r\n") == b"STORED\r\n"
        with tls_conn(secure.port or 0, pki.context()) as direct:
            assert direct.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 3\r\ntls\r\nEND\r\n"
    finally:
        r.stop()


def test_mcrouter_cross_dc_settings_apply_to_every_server(
    pki: Pki, start: Callable[..., Server]
) -> None:
    """Differing `*_within_dc` / `*_cross_dc` halves: as open-source mcrouter, no server is
    in the local data center, so the `_cross_dc` halves (TLS, the TLS port) reach them all."""
    secure = start("memcached", *pki.server_opts())
    plain = start("memcached")
    config = {
        "pools": {
            "S": {
                "servers": ["127.0.0.1:1:ascii:plain"],
                "security_mech_within_dc": "plain",
                "security_mech_cross_dc": "ssl",
                "port_override_within_dc": plain.port,
                "port_override_cross_dc": secure.port,
            },
        },
        "route": "PoolRoute|S",
    }
    r, port = mcrouter_route(pki, config, "--pem-ca-path", str(pki.ca_file))
    try:
        assert ask(port, b"set k 0 0 5\r\ncross\r\n") == b"STORED\r\n"
        with tls_conn(secure.port or 0, pki.context()) as direct:
            assert direct.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 5\r\ncross\r\nEND\r\n"
        assert ask(plain.port or 0, b"get k\r\n", b"END\r\n") == b"END\r\n"
        assert "security_mech_within_dc is not used" in r.log_text()
    finally:
        r.stop()


def test_mcrouter_config_errors_for_tls(pki: Pki) -> None:
    config = {"pools": {"S": {"servers": ["127.0.0.1:1:ascii:tls_to_plain"]}}, "route": "Pool|S"}
    for flags, message in [
        ([], "security 'tls_to_plain'"),
        (["--ssl-port", str(free_port())], "--ssl-port needs --server-pem-cert-path"),
    ]:
        if flags:
            config["pools"]["S"]["servers"] = ["127.0.0.1:1:ascii:ssl"]
        r = McRouter(config, *flags)
        proc = subprocess.run(r.argv, capture_output=True, timeout=30, check=False)
        assert proc.returncode != 0
        assert message in proc.stderr.decode(), proc.stderr
    r = McRouter(config, "--pem-cert-path", str(pki.chain))
    proc = subprocess.run(r.argv, capture_output=True, timeout=30, check=False)
    assert b"--pem-cert-path and --pem-key-path go together" in proc.stderr, proc.stderr


def test_mcrouter_ssl_port_listener(pki: Pki, start: Callable[..., Server]) -> None:
    backend = start("memcached")
    config = {"pools": {"A": {"servers": [backend.address]}}, "route": "PoolRoute|A"}
    ssl_port = free_port()
    flags = ["--ssl-port", str(ssl_port), "--server-pem-cert-path", str(pki.chain)]
    flags += ["--server-pem-key-path", str(pki.key)]
    mutual = ["--ssl-require-peer-certs", "--server-pem-ca-path", str(pki.ca_file)]
    r, port = mcrouter_route(pki, config, *flags, *mutual)
    try:
        wait_for_port(ssl_port)
        with tls_conn(ssl_port, pki.context(client_cert=True)) as c:
            assert c.request(b"set k 0 0 3\r\nsec\r\n") == b"STORED\r\n"
        # The plain -p port serves alongside.
        assert ask(port, b"get k\r\n", b"END\r\n") == b"VALUE k 0 3\r\nsec\r\nEND\r\n"
        refuses_clients_without_certificate_or_tls(pki, ssl_port)
    finally:
        r.stop()
    # Only --ssl-port, no client certificates asked for.
    r, _ = mcrouter_route(pki, config, *flags, plain_port=False)
    try:
        wait_for_port(ssl_port)
        client = mf.Client([("127.0.0.1", ssl_port)], tls=pki.context(), protocol="text")
        assert client.get("k") == b"sec"
    finally:
        r.stop()


@pytest.mark.parametrize("impl", IMPLS)
def test_mcrouter_asynclog_replays_over_tls(
    impl: str, pki: Pki, start: Callable[..., Server], tmp_path: Path
) -> None:
    """Deletes spooled for an `ssl` server while it hangs are replayed to it over TLS."""
    secure = start(impl, *pki.server_opts())
    keys = [f"gone{i}" for i in range(20)]
    with tls_conn(secure.port or 0, pki.context()) as direct:
        for k in keys:
            assert direct.request(f"set {k} 0 0 1\r\nv\r\n".encode()) == b"STORED\r\n"
    config = {"pools": {"S": {"servers": [f"{secure.address}:ascii:ssl"]}}, "route": "PoolRoute|S"}
    spool = tmp_path / "spool"
    flags = ["--pem-ca-path", str(pki.ca_file), "--async-dir", str(spool)]
    flags += ["--server-timeout", "200", "--timeouts-until-tko", "1"]
    r = McRouter(config)
    r.argv = [a for a in r.argv if a not in ("--server-timeout", "300")] + flags
    with r:
        with secure.paused(), Conn(r.port or 0) as c:
            for k in keys:
                assert c.request(f"delete {k}\r\n".encode()) == b"NOT_FOUND\r\n"
            assert (spool / f"{secure.address}.asynclog").read_text().split() == keys

        def none_left() -> bool:
            with tls_conn(secure.port or 0, pki.context()) as c:
                return all(
                    c.request(f"get {k}\r\n".encode(), b"END\r\n") == b"END\r\n" for k in keys
                )

        eventually(none_left, "every key deleted over TLS")
        # Logged once the replay's last batch was acknowledged.
        eventually(lambda: "asynclog: replayed" in r.log_text(), "the replay logged")


@pytest.mark.parametrize("impl", IMPLS)
def test_a_bulk_load_of_quiet_sets_over_tls_is_run_through(
    impl: str, pki: Pki, start: Callable[..., Server]
) -> None:
    """200,000 `set ... noreply` down one TLS connection without reading (quiet requests make
    no replies, so only the server's read-ahead bound slows the client), then `version`:
    all are run, and the server holds a bounded part of the stream at a time."""
    srv = start(impl, *pki.server_opts(), "-m", "64")
    count = 200_000
    with tls_conn(srv.port or 0, pki.context()) as c:
        for first in range(0, count, 2000):
            c.send(
                b"".join(
                    b"set k%d 0 0 100 noreply\r\n%s\r\n" % (i, b"v" * 100)
                    for i in range(first, first + 2000)
                )
            )
        assert c.request(b"version\r\n").startswith(b"VERSION ")
        reply = c.request(b"get k%d\r\n" % (count - 1), b"END\r\n")
        assert reply.endswith(b"v" * 100 + b"\r\nEND\r\n"), reply[:80]
    assert srv.rss_mb("VmHWM") < 64 + 40, impl


def test_watch_over_tls_is_bounded_and_says_skipped(pki: Pki, start: Callable[..., Server]) -> None:
    """A `watch` connection on a TLS listener gets its lines through the session, and one
    that stalls gets memcached's `skipped=N` once it reads again."""
    srv = start("memfleet", *pki.server_opts())
    with tls_conn(srv.port, pki.context()) as w, tls_conn(srv.port, pki.context()) as c:
        assert w.request(b"watch fetchers\r\n") == b"OK\r\n"
        assert c.request(b"get first\r\n") == b"END\r\n"
        assert re.match(rb"ts=\d+\.\d+ gid=\d+ type=item_get key=first ", w.read_until(b"\n"))
        spacer = b"X" * 180
        for n in range(100):
            c.send(b"".join(b"get t%d%s\r\n" % (n * 1000 + i, spacer) for i in range(1000)))
            for _ in range(1000):
                assert c.read_line() == b"END\r\n"
        for seen in range(1, 200_000):
            line = w.read_until(b"\n")
            if line.startswith(b"skipped="):
                assert re.fullmatch(rb"skipped=\d+\n", line)
                break
            assert line.startswith(b"ts="), line
            # The skipped count is written once there is room again: make new lines.
            if seen % 100 == 0:
                assert c.request(b"get more\r\n") == b"END\r\n"
        else:
            raise AssertionError("no skipped= line")


def test_near_cache_tracking_over_tls(pki: Pki, start: Callable[..., Server]) -> None:
    """A listener and a tracked data connection on a TLS listener: notices come through
    the session."""
    srv = start("memfleet", *pki.server_opts())
    ctx = pki.context()
    with tls_conn(srv.port, ctx) as lc, tls_conn(srv.port, ctx) as c, tls_conn(srv.port, ctx) as w:
        line = lc.request(b"track listen\r\n")
        assert line.startswith(b"TRACKING "), line
        assert c.request(b"track %s\r\n" % line.split()[1]) == b"OK\r\n"
        assert w.request(b"set k 0 0 1\r\n1\r\n") == b"STORED\r\n"
        assert c.request(b"get k\r\n", b"END\r\n") == b"VALUE k 0 1\r\n1\r\nEND\r\n"
        assert w.request(b"set k 0 0 1\r\n2\r\n") == b"STORED\r\n"
        assert lc.read_line() == b"IV k\r\n"
