"""The Debian package, built with cargo-deb (scripts/build-deb).

Everywhere: the .deb is unpacked with `dpkg-deb -x` into a temporary directory (nothing is
installed) and checked without installing it: its metadata and conffiles, the files it
ships, and its memfleet-serve@ and memfleet-route@ units run from the unpacked tree (their
ExecStart lines with the package's paths rewritten into it) and spoken to over the protocol.

Only in CI (CI=true; scripts/test also sets MEMFLEET_TEST_DPKG=1 there) or when asked with
MEMFLEET_TEST_DPKG=1, as root: the package is also installed with `dpkg -i`, the same units
run from the installed files, then it is removed (`dpkg -r` keeps the conffiles) and purged
(nothing of the package left behind). Without that, this test is skipped and the host's
packages are never touched.

Where systemd is not PID 1 (containers, this project's machines and CI), the installed
units are not started by systemctl: their ExecStart line is read from the unit file,
expanded as systemd expands it (%i, %%, $$) and run as is. The test prints which it did."""

from __future__ import annotations

import os
import re
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
PACKAGE_FILES = [
    "/usr/bin/memfleet",
    "/lib/systemd/system/memfleet-serve@.service",
    "/lib/systemd/system/memfleet-route@.service",
    "/etc/memfleet/serve-default.conf",
    "/etc/memfleet/route-default.conf",
    "/etc/memfleet/route-default.yml",
    "/usr/share/man/man1/memfleet.1.gz",
    "/usr/share/man/man1/memfleet-serve.1.gz",
    "/usr/share/man/man1/memfleet-top.1.gz",
]
CONFFILES = [
    "/etc/memfleet/serve-default.conf",
    "/etc/memfleet/route-default.conf",
    "/etc/memfleet/route-default.yml",
]


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def installed() -> bool:
    status = run("dpkg-query", "-W", "-f=${Status}", "memfleet", check=False)
    return status.returncode == 0 and "installed" in status.stdout


def may_install() -> None:
    """Skips unless asked to change this machine; fails with the reason when asked but it
    would be unsafe."""
    asked = os.environ.get("CI") == "true" or os.environ.get("MEMFLEET_TEST_DPKG") == "1"
    if not asked:
        pytest.skip(
            "installs a Debian package on this machine: runs in CI (CI=true) or with "
            "MEMFLEET_TEST_DPKG=1; test_unpacked_package checks the same package unpacked"
        )
    if os.geteuid() != 0:
        pytest.fail("dpkg -i needs root")
    if installed():
        pytest.fail("a memfleet package is already installed here; the test would purge it")
    if Path("/usr/bin/memfleet").exists():
        pytest.fail("/usr/bin/memfleet exists (not from the package); dpkg -i would replace it")


def systemd_is_init() -> bool:
    return Path("/proc/1/comm").read_text().strip() == "systemd"


def into_root(line: str, root: Path) -> str:
    """`line` with each absolute path that exists under `root` (the unpacked package)
    rewritten to that copy; others (/bin/sh) stay the host's."""

    def rewrite(m: re.Match[str]) -> str:
        path = m.group(0)
        return f"{root}{path}" if (root / path.lstrip("/")).exists() else path

    return re.sub(r"(?<![\w.~/-])/[A-Za-z][\w@.+/-]*", rewrite, line)


def exec_start(unit: Path, instance: str, root: Path | None = None) -> list[str]:
    """The unit's ExecStart as systemd would run it for `instance`; with `root`, the
    package's paths in it point into that unpacked tree."""
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
    if root is not None:
        line = into_root(line, root)
    return shlex.split(line)


class Unit:
    """One instance of a template unit, started by systemctl or by its ExecStart line.
    With `root` (an unpacked package), always by its ExecStart line, run from that tree."""

    def __init__(self, template: str, instance: str, root: Path | None = None) -> None:
        self.name = template.replace("@.", f"@{instance}.")
        self.root = root
        self.path = (root or Path("/")) / "lib/systemd/system" / template
        self.instance = instance
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.root is None and systemd_is_init():
            print(f"{self.name}: started with systemctl", file=sys.stderr)
            run("systemctl", "start", self.name)
            return
        argv = exec_start(self.path, self.instance, self.root)
        print(f"{self.name}: running ExecStart: {argv}", file=sys.stderr)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> None:
        if self.proc is None:
            if self.root is None and systemd_is_init():
                run("systemctl", "stop", self.name, check=False)
            return
        terminate(self.proc)
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None


def run_instances(root: Path | None) -> None:
    """This test's serve and route instances, configured in (root)/etc/memfleet on free
    ports (the sample files name the standard ports, which a memcached here may hold),
    started from their units and spoken to; their files are removed afterwards."""
    etc = (root or Path("/")) / "etc/memfleet"
    serve_port, route_port, stats_port = free_port(), free_port(), free_port()
    sample = (etc / "serve-default.conf").read_text()
    (etc / f"serve-{INSTANCE}.conf").write_text(sample.replace("-p 11211", f"-p {serve_port}"))
    (etc / f"route-{INSTANCE}.yml").write_text(
        f"pkg:\n  listen: 127.0.0.1:{route_port}\n  servers:\n   - 127.0.0.1:{serve_port}:1\n"
    )
    (etc / f"route-{INSTANCE}.conf").write_text(
        f"# this test's router\n-c {etc}/route-{INSTANCE}.yml\n-s {stats_port}  # stats\n-a 127.0.0.1\n"
    )
    serve = Unit("memfleet-serve@.service", INSTANCE, root)
    route = Unit("memfleet-route@.service", INSTANCE, root)
    try:
        serve.start()
        wait_for_port(serve_port)
        route.start()
        wait_for_port(route_port)
        version = run(str((root or Path("/")) / "usr/bin/memfleet"), "--version").stdout.split()
        assert version[0] == "memfleet", version
        # Stored through the router, read straight from the server: both units work.
        with Conn(route_port) as c:
            assert c.request(b"set pkg:key 5 0 4\r\ndata\r\n") == b"STORED\r\n"
        with Conn(serve_port) as c:
            reply = c.request(b"version\r\n")  # memcached's version, then memfleet's
            assert re.fullmatch(
                rf"VERSION \S+-memfleet-{re.escape(version[1])}\r\n", reply.decode()
            ), reply
            got = c.request(b"get pkg:key\r\n", b"END\r\n")
            assert got == b"VALUE pkg:key 5 4\r\ndata\r\nEND\r\n"
            stats = c.request(b"stats\r\n", b"END\r\n")
            assert b"STAT limit_maxbytes 67108864\r\n" in stats  # -m 64 from the .conf
    finally:
        route.stop()
        serve.stop()
        for path in etc.glob(f"*-{INSTANCE}.*"):
            path.unlink()


def check_man_page(path: Path) -> None:
    page = run("zcat", str(path)).stdout
    assert ".TH memfleet-top" in page and "conf\\-file" in page, page[:200]


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


@pytest.fixture(scope="module")
def deb() -> Path:
    """The built .deb (scripts/build-deb installs nothing)."""
    built = run(str(ROOT / "scripts" / "build-deb"))
    path = Path(built.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.suffix == ".deb", built.stdout
    return path


def test_unpacked_package(deb: Path, tmp_path: Path) -> None:
    """What can be checked without installing: metadata, conffiles, files, the units."""
    root = tmp_path / "root"
    run("dpkg-deb", "-x", str(deb), str(root))
    for expected in PACKAGE_FILES:
        assert (root / expected.lstrip("/")).is_file(), f"{expected} not in the package"
    assert os.access(root / "usr/bin/memfleet", os.X_OK)
    check_man_page(root / "usr/share/man/man1/memfleet-top.1.gz")

    version = run(str(root / "usr/bin/memfleet"), "--version").stdout.split()[1]
    fields = {
        name: run("dpkg-deb", "-f", str(deb), name).stdout.strip()
        for name in ("Package", "Version", "Architecture", "Section", "Priority", "Depends")
    }
    assert fields["Package"] == "memfleet", fields
    assert fields["Version"] == version or fields["Version"].startswith(f"{version}-"), fields
    assert fields["Architecture"] == run("dpkg", "--print-architecture").stdout.strip(), fields
    assert (fields["Section"], fields["Priority"]) == ("net", "optional"), fields
    assert re.search(r"(^|, )libc6 ", fields["Depends"]), fields
    assert "memfleet serve" in run("dpkg-deb", "-I", str(deb)).stdout
    control = tmp_path / "control"
    run("dpkg-deb", "-e", str(deb), str(control))
    conffiles = (control / "conffiles").read_text().split()
    assert sorted(conffiles) == sorted(CONFFILES), conffiles

    run_instances(root)


@pytest.fixture
def package(deb: Path) -> Iterator[Path]:
    """The .deb, for installing; purges the package (and this test's instance files)
    afterwards."""
    may_install()
    try:
        yield deb
    finally:
        for path in Path("/etc/memfleet").glob(f"*-{INSTANCE}.*"):
            path.unlink()
        if installed() or run("dpkg-query", "-W", "memfleet", check=False).returncode == 0:
            run("dpkg", "--purge", "memfleet", check=False)


def test_package_installs_runs_and_purges_cleanly(package: Path) -> None:
    run("dpkg", "-i", str(package))
    assert installed()
    files = [Path(p) for p in run("dpkg", "-L", "memfleet").stdout.split()]
    for expected in PACKAGE_FILES:
        assert Path(expected) in files, f"{expected} not in the package"
    conffiles = run("dpkg-query", "-W", "-f=${Conffiles}", "memfleet").stdout
    for expected in CONFFILES:
        assert expected in conffiles, conffiles
    check_man_page(Path("/usr/share/man/man1/memfleet-top.1.gz"))
    assert run("/usr/bin/memfleet", "--version").stdout.startswith("memfleet ")

    run_instances(None)

    # dpkg -r removes the program and keeps the conffiles; --purge removes those too.
    run("dpkg", "-r", "memfleet")
    assert not Path("/usr/bin/memfleet").exists()
    assert Path("/etc/memfleet/serve-default.conf").exists()
    run("dpkg", "--purge", "memfleet")
    assert run("dpkg-query", "-W", "memfleet", check=False).returncode != 0
    left = [f for f in files if f.exists() and not f.is_dir()]
    assert not left, f"left behind: {left}"
    assert not Path("/etc/memfleet").exists(), list(Path("/etc/memfleet").iterdir())
