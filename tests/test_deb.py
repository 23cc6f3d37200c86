"""The Debian package end to end: built with cargo-deb (scripts/build-deb), installed with
`dpkg -i` on this machine, a memfleet-serve@ and a memfleet-route@ instance started and
spoken to over the protocol, then removed (`dpkg -r` keeps the conffiles) and purged
(nothing of the package left behind).

Installing a package changes the machine, so this runs only in CI (CI=true; scripts/test
also sets MEMFLEET_TEST_DPKG=1 there) or when asked with MEMFLEET_TEST_DPKG=1, as root.
Anywhere else it fails and says why instead of installing anything.

Where systemd is not PID 1 (containers, this project's machines and CI), the units are not
started by systemctl: their ExecStart line is read from the installed unit file, expanded as
systemd expands it (%i, %%, $$) and run as is. The test prints which of the two it did."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import ROOT, Conn, free_port, terminate, wait_for_port

UNITS = ("memfleet-serve@.service", "memfleet-route@.service")
INSTANCE = "pkgtest"


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def installed() -> bool:
    status = run("dpkg-query", "-W", "-f=${Status}", "memfleet", check=False)
    return status.returncode == 0 and "installed" in status.stdout


def may_install() -> None:
    """Fails (never skips) with the reason when this machine must not be changed."""
    asked = os.environ.get("CI") == "true" or os.environ.get("MEMFLEET_TEST_DPKG") == "1"
    if not asked:
        pytest.fail(
            "installs a Debian package on this machine: runs in CI (CI=true) or with "
            "MEMFLEET_TEST_DPKG=1 (scripts/test sets it when CI=true)"
        )
    if os.geteuid() != 0:
        pytest.fail("dpkg -i needs root")
    if installed():
        pytest.fail("a memfleet package is already installed here; the test would purge it")
    if Path("/usr/bin/memfleet").exists():
        pytest.fail("/usr/bin/memfleet exists (not from the package); dpkg -i would replace it")


def systemd_is_init() -> bool:
    return Path("/proc/1/comm").read_text().strip() == "systemd"


def exec_start(unit: Path, instance: str) -> list[str]:
    """The unit's ExecStart as systemd would run it for `instance`."""
    lines = [
        line.split("=", 1)[1]
        for line in unit.read_text().splitlines()
        if line.startswith("ExecStart=")
    ]
    assert len(lines) == 1, f"{unit}: expected one ExecStart line"
    line = lines[0].lstrip("-@+!:")
    # Specifiers first, then $$ (a literal $), then the quote-aware split systemd does.
    unsupported = line.replace("%i", "").replace("%%", "")
    assert "%" not in unsupported, f"{unit}: a specifier this test does not expand: {line}"
    line = line.replace("%i", instance).replace("%%", "%").replace("$$", "$")
    return shlex.split(line)


class Unit:
    """One instance of a template unit, started by systemctl or by its ExecStart line."""

    def __init__(self, template: str, instance: str) -> None:
        self.name = template.replace("@.", f"@{instance}.")
        self.path = Path("/lib/systemd/system") / template
        self.instance = instance
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if systemd_is_init():
            print(f"{self.name}: started with systemctl", file=sys.stderr)
            run("systemctl", "start", self.name)
            return
        argv = exec_start(self.path, self.instance)
        print(f"{self.name}: systemd is not PID 1, running ExecStart: {argv}", file=sys.stderr)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> None:
        if self.proc is None:
            if systemd_is_init():
                run("systemctl", "stop", self.name, check=False)
            return
        terminate(self.proc)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    assert shutil.which("systemd-analyze"), "systemd-analyze (Debian's systemd) is needed"
    for unit in UNITS:
        shutil.copy(ROOT / "deploy" / "debian" / unit, tmp_path / unit)
    names = [u.replace("@.", f"@{INSTANCE}.") for u in UNITS]
    env = dict(os.environ, SYSTEMD_UNIT_PATH=f"{tmp_path}:")
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *names],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    ours = [line for line in result.stderr.splitlines() if "memfleet" in line]
    assert result.returncode == 0 and not ours, result.stderr


@pytest.fixture
def package() -> Iterator[Path]:
    """The built .deb; purges the package (and this test's instance files) afterwards."""
    may_install()
    built = run(str(ROOT / "scripts" / "build-deb"))
    deb = Path(built.stdout.strip().splitlines()[-1])
    assert deb.is_file() and deb.suffix == ".deb", built.stdout
    ours = [
        Path(f"/etc/memfleet/{kind}-{INSTANCE}.{ext}")
        for kind, ext in [("serve", "conf"), ("route", "conf"), ("route", "yml")]
    ]
    try:
        yield deb
    finally:
        for path in ours:
            path.unlink(missing_ok=True)
        if installed() or run("dpkg-query", "-W", "memfleet", check=False).returncode == 0:
            run("dpkg", "--purge", "memfleet", check=False)


def test_package_installs_runs_and_purges_cleanly(package: Path) -> None:
    run("dpkg", "-i", str(package))
    assert installed()
    files = [Path(p) for p in run("dpkg", "-L", "memfleet").stdout.split()]
    for expected in [
        "/usr/bin/memfleet",
        "/lib/systemd/system/memfleet-serve@.service",
        "/lib/systemd/system/memfleet-route@.service",
        "/etc/memfleet/serve-default.conf",
        "/etc/memfleet/route-default.conf",
        "/etc/memfleet/route-default.yml",
        "/usr/share/man/man1/memfleet.1.gz",
        "/usr/share/man/man1/memfleet-serve.1.gz",
        "/usr/share/man/man1/memfleet-top.1.gz",
    ]:
        assert Path(expected) in files, f"{expected} not in the package"
    conffiles = run("dpkg-query", "-W", "-f=${Conffiles}", "memfleet").stdout
    assert "/etc/memfleet/serve-default.conf" in conffiles, conffiles
    page = run("zcat", "/usr/share/man/man1/memfleet-top.1.gz").stdout
    assert ".TH memfleet-top" in page and "conf\\-file" in page, page[:200]
    assert run("/usr/bin/memfleet", "--version").stdout.startswith("memfleet ")

    # This test's instances, on free ports: the sample files name the standard ports, which
    # a memcached on this machine may hold.
    serve_port, route_port, stats_port = free_port(), free_port(), free_port()
    sample = Path("/etc/memfleet/serve-default.conf").read_text()
    Path(f"/etc/memfleet/serve-{INSTANCE}.conf").write_text(
        sample.replace("-p 11211", f"-p {serve_port}")
    )
    Path(f"/etc/memfleet/route-{INSTANCE}.yml").write_text(
        f"pkg:\n  listen: 127.0.0.1:{route_port}\n  servers:\n   - 127.0.0.1:{serve_port}:1\n"
    )
    Path(f"/etc/memfleet/route-{INSTANCE}.conf").write_text(
        f"# this test's router\n-c /etc/memfleet/route-{INSTANCE}.yml\n"
        f"-s {stats_port}  # stats\n-a 127.0.0.1\n"
    )
    serve = Unit("memfleet-serve@.service", INSTANCE)
    route = Unit("memfleet-route@.service", INSTANCE)
    try:
        serve.start()
        wait_for_port(serve_port)
        route.start()
        wait_for_port(route_port)
        # Stored through the router, read straight from the server: both units work.
        with Conn(route_port) as c:
            assert c.request(b"set pkg:key 5 0 4\r\ndata\r\n") == b"STORED\r\n"
        with Conn(serve_port) as c:
            got = c.request(b"get pkg:key\r\n", b"END\r\n")
            assert got == b"VALUE pkg:key 5 4\r\ndata\r\nEND\r\n"
            stats = c.request(b"stats\r\n", b"END\r\n")
            assert b"STAT limit_maxbytes 67108864\r\n" in stats  # -m 64 from the .conf
    finally:
        route.stop()
        serve.stop()
    for path in Path("/etc/memfleet").glob(f"*-{INSTANCE}.*"):
        path.unlink()

    # dpkg -r removes the program and keeps the conffiles; --purge removes those too.
    run("dpkg", "-r", "memfleet")
    assert not Path("/usr/bin/memfleet").exists()
    assert Path("/etc/memfleet/serve-default.conf").exists()
    run("dpkg", "--purge", "memfleet")
    assert run("dpkg-query", "-W", "memfleet", check=False).returncode != 0
    left = [f for f in files if f.exists() and not f.is_dir()]
    assert not left, f"left behind: {left}"
    assert not Path("/etc/memfleet").exists(), list(Path("/etc/memfleet").iterdir())
