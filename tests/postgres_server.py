"""A throwaway PostgreSQL server for the tests: one per session, gone when the session ends.

The `postgres_dsn` fixture initializes a cluster in a fresh temporary folder (trust
authentication, no fsync: nothing in it outlives the run), starts it listening on a Unix socket
in that folder and on a free TCP port of 127.0.0.1 only, creates a database and yields its DSN.
The server binaries are a test requirement, not an option: when `initdb` cannot be found the
fixture fails and says to run `make install`, which installs them.

PostgreSQL refuses to run as root, so as root (CI) the cluster belongs to the `postgres` user
that Debian's package creates, and `initdb`/`pg_ctl` run as that user through `runuser`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

SUPERUSER = "postgres"
DATABASE = "gridrail_test"
_INITDB_OPTIONS = ("--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C")
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


def find_bin_dir() -> Path | None:
    """The folder holding `initdb` and `pg_ctl`: from PATH, else Debian's newest versioned
    folder (Debian does not put them on PATH)."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """One PostgreSQL cluster in `root` (data in `root/data`, socket and log beside it)."""

    def __init__(self, bin_dir: Path, root: Path, port: int):
        self.bin_dir = bin_dir
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = port
        self.as_postgres = os.geteuid() == 0

    def dsn(self, dbname: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={dbname}"

    def run(self, tool: str, *args: str) -> None:
        """Run one server tool, as the `postgres` user when we are root; fail the test with the
        tool's output (and the server log) if it fails."""
        command = [str(self.bin_dir / tool), *args]
        if self.as_postgres:
            command = ["runuser", "-u", SUPERUSER, "--", *command]
        done = subprocess.run(command, cwd=self.root, capture_output=True, text=True)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            pytest.fail(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}{log}")

    def init(self) -> None:
        if self.as_postgres:
            _require_postgres_user()
            shutil.chown(self.root, SUPERUSER, SUPERUSER)
        self.run("initdb", "-D", str(self.data), "-U", SUPERUSER, *_INITDB_OPTIONS)
        settings = {
            **_SETTINGS,
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def start(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        self.run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")


def _require_postgres_user() -> None:
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        pytest.fail(
            f"PostgreSQL refuses to run as root and there is no {SUPERUSER!r} user to run it as; "
            "run `make install` (Debian's postgresql package creates the user)"
        )


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    """A fresh cluster, started, in a temporary folder the server's user may enter; stopped
    and removed afterwards."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.fail(
            "PostgreSQL server binaries (initdb, pg_ctl) are not on PATH nor under "
            "/usr/lib/postgresql/*/bin; run `make install` (it installs Debian's postgresql)"
        )
    root = Path(tempfile.mkdtemp(prefix="gridrail-pg-"))
    cluster = Cluster(bin_dir, root, free_port())
    try:
        cluster.init()
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """DSN of an empty database on a server that lives for the test session."""
    import psycopg  # here, not at the top: conftest imports this module for every test

    with running_cluster() as cluster:
        with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")
        yield cluster.dsn(DATABASE)


@pytest.fixture(scope="session")
def postgres_hr_schema(postgres_dsn: str):
    """examples/hr.sql loaded into its own PostgreSQL schema, read back from the catalog."""
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS hr_example CASCADE")
        conn.execute("CREATE SCHEMA hr_example")
        conn.execute("SET search_path TO hr_example")
        lines = (
            (Path(__file__).resolve().parent.parent / "examples" / "hr.sql")
            .read_text()
            .splitlines()
        )
        script = "\n".join(line for line in lines if not line.startswith("--"))
        for statement in script.split(";"):
            if statement.strip():
                conn.execute(statement)
    from gridrail.policy.schema import Schema

    return Schema.from_postgres(postgres_dsn, schema="hr_example")


@pytest.fixture
def audit_store_dsn(postgres_dsn: str) -> Iterator[str]:
    """DSN of a fresh, empty database on the session's server (an audit store of its own),
    dropped after the test."""
    import uuid

    import psycopg

    name = f"audit_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield postgres_dsn.replace(f"dbname={DATABASE}", f"dbname={name}")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def throwaway_schema(
    dsn: str, schema: str, statements: Iterable[str], roles: Sequence[str] = ()
) -> Iterator[None]:
    """`schema` made afresh on `dsn`'s server by `statements` (run with it on the search path;
    `roles`, a test's own, dropped first if a run before left them); on the way out the schema
    is dropped, and so are the judging roles (`gridrail_*`) and `roles`: each one's grants,
    then the role."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        for role in roles:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        for statement in statements:
            conn.execute(statement)
    try:
        yield
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            found = conn.execute(
                "SELECT rolname FROM pg_roles"
                " WHERE rolname LIKE 'gridrail\\_%%' OR rolname = ANY(%s)",
                (list(roles),),
            )
            for (name,) in found.fetchall():
                conn.execute(f'DROP OWNED BY "{name}"')  # its grants, then the role
                conn.execute(f'DROP ROLE "{name}"')
