"""A throwaway PostgreSQL 15 (Debian's packages) for tests: its own data directory, a free
port, its unix socket in the temporary directory, wal_level=logical. Driven with psql."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

PASSWORD = "s3cret"


def pg_bindir() -> Path:
    """The newest /usr/lib/postgresql/N/bin, where Debian puts initdb and postgres."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    if not found:
        raise RuntimeError("PostgreSQL is not installed (run scripts/setup)")
    return Path(found[-1]).parent


def _as_postgres() -> dict[str, object]:
    """PostgreSQL refuses to run as root: as root, the process becomes the `postgres` user
    (directly, not through runuser, so signals reach the postmaster itself)."""
    if os.geteuid() == 0:
        return {"user": "postgres", "group": "postgres", "extra_groups": []}
    return {}


class Postgres:
    """initdb + postgres in a temporary directory; `sql()` and `script()` run psql."""

    def __init__(self, port: int) -> None:
        self._setup(port)
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if os.geteuid() == 0:
            os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
        subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                f"--pwfile={pwfile}",
                "--no-sync",
            ],
            cwd=self.dir,
            **_as_postgres(),  # type: ignore[call-overload]
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _setup(self, port: int) -> None:
        self.port = port
        self.bindir = pg_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="memfleet-pg-"))
        self.data = self.dir / "data"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "postgres.log"
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    @property
    def dsn(self) -> str:
        """TCP with a password, as a real deployment connects."""
        return f"host=127.0.0.1 port={self.port} user=postgres password={PASSWORD} dbname=postgres"

    def start(self) -> Postgres:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(  # type: ignore[call-overload]
                [
                    str(self.bindir / "postgres"),
                    "-D",
                    str(self.data),
                    "-c",
                    f"port={self.port}",
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    f"unix_socket_directories={self.dir}",
                    "-c",
                    "wal_level=logical",
                    "-c",
                    "max_wal_senders=10",
                    "-c",
                    "max_replication_slots=10",
                    # A test database need not survive a power cut; the machine is shared.
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                ],
                cwd=self.dir,
                **_as_postgres(),
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = subprocess.run(self._psql("SELECT 1"), capture_output=True, check=False)
            if r.returncode == 0:
                return self
            if self.proc.poll() is not None:
                raise RuntimeError("postgres exited: " + self.log.read_text()[-2000:])
            time.sleep(0.1)
        raise TimeoutError("postgres did not start: " + self.log.read_text()[-2000:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # SIGINT is PostgreSQL's fast shutdown.
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # Immediate shutdown: the postmaster still takes its children down.
                self.proc.send_signal(signal.SIGQUIT)
                self.proc.wait()
        self.proc = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _psql(self, sql: str | None = None, database: str = "postgres") -> list[str]:
        argv = [
            str(self.bindir / "psql"),
            "-h",
            str(self.dir),
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            database,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
        ]
        if sql is not None:
            argv += ["-c", sql]
        return argv

    def sql(self, sql: str, database: str = "postgres") -> list[list[str]]:
        """Runs one statement in `database`; the rows, each as a list of text fields."""
        r = subprocess.run(self._psql(sql, database), capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"psql: {r.stderr.strip()}")
        return [line.split("|") for line in r.stdout.splitlines() if line]

    def script(self, text: str, database: str = "postgres") -> None:
        """Runs a script (many statements and transactions) through one psql, as the
        superuser, connected to `database`."""
        r = subprocess.run(
            self._psql(database=database), input=text, capture_output=True, text=True, check=False
        )
        if r.returncode != 0:
            raise RuntimeError(f"psql: {r.stderr.strip()}")

    def script_async(self, text: str) -> subprocess.Popen[str]:
        """Starts a script in the background; the caller waits on the returned process."""
        p = subprocess.Popen(
            self._psql(),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert p.stdin is not None
        p.stdin.write(text)
        p.stdin.close()
        return p


class Standby(Postgres):
    """A streaming standby of `primary` (hot standby, read-only): `pg_basebackup -R` from the
    primary's unix socket into its own data directory, started on its own port. The standby
    connects back over the socket, which the primary's initdb trusts."""

    def __init__(self, primary: Postgres, port: int) -> None:
        self._setup(port)
        subprocess.run(
            [
                str(self.bindir / "pg_basebackup"),
                "-h",
                str(primary.dir),
                "-p",
                str(primary.port),
                "-U",
                "postgres",
                "-D",
                str(self.data),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
            cwd=self.dir,
            **_as_postgres(),  # type: ignore[call-overload]
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def replay_lsn(self) -> str:
        return self.sql("SELECT pg_last_wal_replay_lsn()")[0][0]

    def pause_replay(self) -> None:
        self.sql("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self.sql("SELECT pg_wal_replay_resume()")
