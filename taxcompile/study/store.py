"""The study's results: one SQLite file.

One row per seed of a run, keyed by ``Run.key(seed)`` (model hash, task, seed, protocol
version, supervised). The protocol the results were trained under is stored in the file
with its version; a file of another protocol is refused, never mixed. Every finished run is
committed in one transaction in WAL mode, so a study killed at any moment (SIGKILL
included) loses at most the runs still in flight, and a restart skips every run already
stored.

Only the driver writes (the engines return results to it); an advisory lock keeps two
studies from writing one file at once. What is read is checked: the tables' layout at
open, every row against ``schema`` (pydantic), so that damaged content is a located
``StudyError`` and the file is kept as it is. A new file is never made where a ``-wal`` or
``-shm`` of a deleted one lies (SQLite would replay it into the new file): those are
removed, or the file refused while another process still uses them. No torch here:
``study report`` reads the file."""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from .runs import StudyError

APPLICATION_ID = 0x54435354  # "TCST": PRAGMA application_id of a study file
SCHEMA_VERSION = 3  # PRAGMA user_version: the layout of the tables below
# the columns each layout added: a file of an older layout is read (``study report``; what
# it lacks is None) but never written (its protocol is another one anyway)
ADDED = {2: {"results": ("val_accuracy", "curve")}, 3: {"results": ("budget", "width")}}
# what an older layout's file holds (its protocol): read, never written
OLDER = {1: "protocol 1: one evaluation batch, no learning curves",
         2: "protocol 2: erasure of the top 3 positions, no step budgets or widths"}

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE results (
    key TEXT PRIMARY KEY,
    model_hash TEXT NOT NULL, task TEXT NOT NULL, seed INTEGER NOT NULL,
    protocol_version TEXT NOT NULL, supervised INTEGER NOT NULL,
    source TEXT NOT NULL, spec TEXT NOT NULL, model TEXT NOT NULL, profile TEXT NOT NULL,
    lr REAL, params INTEGER, steps INTEGER, steps_to_threshold INTEGER,
    seconds REAL, seconds_per_step REAL, accuracy REAL, final_loss REAL, val_accuracy REAL,
    row TEXT NOT NULL, attention TEXT NOT NULL, curve TEXT NOT NULL,
    engine TEXT NOT NULL, finished REAL NOT NULL, budget INTEGER, width INTEGER,
    UNIQUE (model_hash, task, seed, protocol_version, supervised)
);
CREATE TABLE skips (
    source TEXT NOT NULL, model TEXT NOT NULL, task TEXT, why TEXT NOT NULL,
    UNIQUE (source, model, task)
);
"""

# the SeedResult fields stored as columns, in SCHEMA's order
METRICS = ("lr", "params", "steps", "steps_to_threshold", "seconds", "seconds_per_step",
           "accuracy", "final_loss", "val_accuracy")


def _hint_other_db(path: Path) -> str:
    return f"choose another file with --db (e.g. --db {path.with_name(path.stem + '-2.db')})"


class Store:
    """An open study file. ``Store.create_or_open`` for ``study run``, ``Store.read`` for
    ``study report``."""

    def __init__(self, path: Path, conn: sqlite3.Connection, lock_fd: int | None = None):
        from pydantic import ValidationError

        from . import schema

        self.path, self.conn, self._lock_fd = path, conn, lock_fd
        self.removed: list[Path] = []  # the stale -wal/-shm that creating the file removed
        try:
            self.protocol: dict = schema.protocol(self._meta("protocol"))
        except ValidationError as e:
            raise _damaged(path, f"meta `protocol`: {schema.first_problem(e)}") from None

    # ---- opening --------------------------------------------------------------------------

    @classmethod
    def create_or_open(cls, path: str | Path, protocol: dict) -> Store:
        """The file at ``path`` for writing results of ``protocol`` (a dict with ``version``):
        created (atomically: a complete empty study or nothing) when missing; refused with a
        ``StudyError`` when it is read-only, not a study file, corrupt, in use by another
        study, or of another protocol."""
        path = Path(path)
        removed: list[Path] = []
        if not path.exists():
            removed = _create(path, protocol)
        elif path.is_dir():
            raise StudyError(f"{path} is a directory", "name the study file, e.g. "
                             f"--db {path / 'study.db'}")
        if not os.access(path, os.W_OK) or not os.access(path.parent or Path("."), os.W_OK):
            where = "the file" if not os.access(path, os.W_OK) else "its directory"
            raise StudyError(f"cannot write the study file {path}: {where} is read-only",
                             "make it writable, or " + _hint_other_db(path) +
                             "; `taxcompile study report` still reads it")
        conn = _connect(path, readonly=False)
        lock_fd = _lock(path)
        try:
            store = cls(path, conn, lock_fd)
            store._check(protocol)
        except BaseException:
            store_close(conn, lock_fd)
            raise
        store.removed = removed
        return store

    @classmethod
    def read(cls, path: str | Path) -> Store:
        """The file at ``path`` for reading (a read-only file is fine)."""
        path = Path(path)
        if not path.is_file():
            raise StudyError(f"no study file {path}", "run `taxcompile study run --db "
                             f"{path}` first" if not path.exists() else "name a study file")
        return cls(path, _connect(path, readonly=True))

    def _meta(self, key: str) -> str:
        with self._reading():
            got = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if got is None:
            raise StudyError(f"{self.path} is a SQLite file without a study's protocol",
                             _hint_other_db(self.path))
        return got[0]

    def _check(self, protocol: dict) -> None:
        mine, theirs = str(protocol["version"]), str(self.protocol.get("version"))
        if mine != theirs:
            raise StudyError(
                f"{self.path} holds results of study protocol {theirs}; this taxcompile "
                f"trains under protocol {mine}, and the two are never mixed",
                f"{_hint_other_db(self.path)}; report the old file with "
                f"`taxcompile study report {self.path}`")
        if protocol != self.protocol:
            raise StudyError(f"{self.path} holds results of other protocol settings "
                             f"({_differences(self.protocol, protocol)})",
                             f"{_hint_other_db(self.path)}, or run with the file's own "
                             "settings")

    def close(self) -> None:
        store_close(self.conn, self._lock_fd)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- results --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self):
        """SQLite's errors while reading as a ``StudyError`` naming the file."""
        try:
            yield
        except sqlite3.DatabaseError as e:
            raise _db_error(self.path, e) from None

    def done_keys(self) -> set[str]:
        with self._reading():
            return {k for (k,) in self.conn.execute("SELECT key FROM results")}

    def put(self, run, results, engine: str) -> int:
        """Store the seed results of one finished run in one transaction; returns how many
        rows were new (a key already stored is kept, never overwritten)."""
        now = time.time()
        import json

        rows = [(run.key(r.seed), run.model_hash(), run.task, int(r.seed),
                 str(self.protocol["version"]), int(run.supervised), run.source, run.spec,
                 run.model, run.profile, *(getattr(r, m) for m in METRICS),
                 json.dumps(r.row, sort_keys=True), json.dumps(r.attention, sort_keys=True),
                 json.dumps([list(p) for p in r.curve]), engine, now, r.budget, r.width)
                for r in results]
        if not rows:
            return 0
        marks = ", ".join("?" * len(rows[0]))
        try:
            with self.conn:  # one transaction: the run is stored whole or not at all
                before = self.conn.total_changes
                self.conn.executemany(f"INSERT OR IGNORE INTO results VALUES ({marks})", rows)
                return self.conn.total_changes - before
        except sqlite3.DatabaseError as e:
            raise _db_error(self.path, e) from None

    def put_skips(self, skips) -> None:
        try:
            with self.conn:
                # not INSERT OR IGNORE: UNIQUE lets NULL tasks (a model no task fits) repeat
                self.conn.executemany(
                    "INSERT INTO skips SELECT ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM skips "
                    "WHERE source = ? AND model = ? AND task IS ?)",
                    [(s.source, s.model, s.task, s.why, s.source, s.model, s.task)
                     for s in skips])
        except sqlite3.DatabaseError as e:
            raise _db_error(self.path, e) from None

    def _rows(self, table: str, query: str, check) -> list[dict]:
        """Every row of ``query`` checked by ``check`` (a ``schema`` function); the first
        one it refuses is a ``StudyError`` naming its rowid and field."""
        from pydantic import ValidationError

        from .schema import first_problem

        out = []
        with self._reading():
            cur = self.conn.execute(query)
            names = [c[0] for c in cur.description]
            for values in cur:
                d = dict(zip(names, values))
                rowid = d.pop("rowid")
                try:
                    out.append(check(d))
                except ValidationError as e:
                    raise _damaged(self.path, f"{table} row {rowid}: {first_problem(e)}") \
                        from None
        return out

    def results(self) -> list[dict]:
        """Every stored seed result as a dict (its JSON parsed), in a stable order (task,
        spec, model, supervised, seed)."""
        from .schema import result

        return self._rows("result", "SELECT rowid, * FROM results ORDER BY task, spec, "
                          "model, supervised, seed, key", result)

    def skips(self) -> list[dict]:
        from .schema import skip

        return self._rows("skip", "SELECT rowid, source, model, task, why FROM skips "
                          "ORDER BY source, model, task", skip)


def _differences(there: dict, now: dict, prefix: str = "") -> str:
    """The settings that differ, as ``steps: 60 there, 600 now``."""
    out = []
    for k in sorted(set(there) | set(now)):
        a, b = there.get(k), now.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out.append(_differences(a, b, f"{prefix}{k}."))
        elif a != b:
            out.append(f"{prefix}{k}: {a!r} there, {b!r} now")
    return ", ".join(o for o in out if o)


def store_close(conn: sqlite3.Connection, lock_fd: int | None) -> None:
    conn.close()
    if lock_fd is not None:
        os.close(lock_fd)  # releases the advisory lock


def _damaged(path: Path, why: str) -> StudyError:
    return StudyError(f"{path} is damaged ({why}); it is kept as it is", _hint_other_db(path))


def _db_error(path: Path, e: sqlite3.DatabaseError) -> StudyError:
    text = str(e)
    if "readonly" in text or "read-only" in text:
        return StudyError(f"cannot write the study file {path}: it is read-only",
                          "make it writable, or " + _hint_other_db(path))
    if "locked" in text or "busy" in text:
        return StudyError(f"the study file {path} is locked by another process",
                          "wait for the other study to finish, or " + _hint_other_db(path))
    if "not a database" in text:
        return StudyError(f"{path} is not a study file (not a SQLite database)",
                          "it is kept as it is; " + _hint_other_db(path))
    if text.startswith("no such table: "):
        return _damaged(path, f"no table `{text.removeprefix('no such table: ')}`")
    return _damaged(path, text)


def _connect(path: Path, readonly: bool) -> sqlite3.Connection:
    """A checked connection: a SQLite file that is not a study's, or a damaged one, is a
    ``StudyError`` and the file is left untouched."""
    uri = f"file:{path.resolve().as_posix()}?mode={'ro' if readonly else 'rw'}"
    conn = None
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=10)
        if readonly and not _readable(conn):
            # a WAL file in a read-only directory: SQLite cannot make its shared-memory
            # file there; read it as immutable (nobody can be writing it then)
            conn.close()
            conn = sqlite3.connect(uri + "&immutable=1", uri=True, timeout=10)
        app, = conn.execute("PRAGMA application_id").fetchone()
        if app != APPLICATION_ID:
            raise StudyError(f"{path} is not a taxcompile study file",
                             "it is kept as it is; " + _hint_other_db(path))
        schema, = conn.execute("PRAGMA user_version").fetchone()
        _check_layout_version(path, schema, readonly)
        bad = [r for (r,) in conn.execute("PRAGMA quick_check")]
        if bad != ["ok"]:
            raise _damaged(path, "; ".join(bad[:3]))
        why = _layout_problem(conn, schema)
        if why:
            raise _damaged(path, why)
        if not readonly:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        return conn
    except sqlite3.DatabaseError as e:
        if conn is not None:
            conn.close()
        raise _db_error(path, e) from None
    except BaseException:
        if conn is not None:
            conn.close()
        raise


@functools.lru_cache(maxsize=1)
def _layout() -> dict[str, list[str]]:
    """table -> its columns, as ``SCHEMA`` makes them."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(SCHEMA)
        return _tables(mem)
    finally:
        mem.close()


def _tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    names = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: [c[1] for c in conn.execute(f'PRAGMA table_info("{t}")')] for t in names}


def _check_layout_version(path: Path, schema: int, readonly: bool) -> None:
    """A file of this layout is read; one of an older layout (``OLDER``) is read but not
    written; any other is refused."""
    if schema == SCHEMA_VERSION or (readonly and 1 <= schema < SCHEMA_VERSION):
        return
    if 1 <= schema < SCHEMA_VERSION:
        raise StudyError(f"{path} is a study file of layout {schema} ({OLDER[schema]}); "
                         f"this taxcompile writes layout {SCHEMA_VERSION} only",
                         f"{_hint_other_db(path)}; `taxcompile study report {path}` "
                         "still reads it")
    raise StudyError(f"{path} is a study file of layout {schema}; this taxcompile reads "
                     f"layouts 1 to {SCHEMA_VERSION}", _hint_other_db(path))


def _layout_problem(conn: sqlite3.Connection, schema: int = SCHEMA_VERSION) -> str | None:
    """What of ``SCHEMA``'s tables and columns (those of layout ``schema``) the file
    lacks (None: nothing)."""
    have = _tables(conn)
    later = {(t, c) for v, added in ADDED.items() if v > schema
             for t, cs in added.items() for c in cs}
    for table, columns in _layout().items():
        if table not in have:
            return f"no table `{table}`"
        missing = [c for c in columns if c not in have[table] and (table, c) not in later]
        if missing:
            return f"table `{table}` has no column `{missing[0]}`"
    return None


def _readable(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("PRAGMA application_id").fetchone()
        return True
    except sqlite3.OperationalError as e:
        return "readonly" not in str(e) and "unable to open" not in str(e)


# SQLite's lock byte that every connection to a WAL database holds (shared) in its -shm
# file while it is open (os_unix.c: UNIX_SHM_DMS = (22 + 8) * 4 + 8)
SHM_DMS_BYTE = 128


def _shm_in_use(shm: Path) -> bool:
    """Whether a live connection holds ``shm``'s lock byte (a POSIX record lock: released
    by the kernel when its process dies, SIGKILL included)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: assume it may be
        return True
    try:
        fd = os.open(shm, os.O_RDWR)
    except OSError:
        return True  # cannot tell: leave it alone
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, SHM_DMS_BYTE)
        return False
    finally:
        os.close(fd)


def _remove_stale(path: Path) -> list[Path]:
    """Remove the ``-wal``, ``-shm`` and ``-journal`` that a deleted study file at
    ``path`` left (a kill leaves the first two); SQLite would replay them into the new
    file, and the deleted file's runs would come back. Refused while a live process
    still has them open (a file deleted under a running study): that one keeps them."""
    found = [Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal")
             if os.path.lexists(f"{path}{s}")]
    shm = Path(f"{path}-shm")
    if shm in found and _shm_in_use(shm):
        raise StudyError(f"there is no study file {path}, but {shm} is in use by another "
                         "process (was the file deleted while a study ran?)",
                         "wait for that process to end, or " + _hint_other_db(path))
    for p in found:
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StudyError(f"cannot remove {p}, left by a deleted study file {path}: "
                             f"{e.strerror or e}", "remove it, or " + _hint_other_db(path)) \
                from None
    return found


def _create(path: Path, protocol: dict) -> list[Path]:
    """A new, complete study file at ``path``: written beside it and linked into place, so
    an error leaves nothing behind. Returns the stale siblings it removed first."""
    import json

    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise StudyError(f"cannot create the study file {path}: no directory {directory}",
                         "create the directory first, or choose another --db")
    removed = _remove_stale(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise StudyError(f"cannot create the study file {path}: {e.strerror or e}",
                         "choose a writable place with --db") from None
    os.close(fd)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as any new file (mkstemp makes it private)
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(SCHEMA)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            with conn:
                conn.execute("INSERT INTO meta VALUES ('protocol', ?)",
                             (json.dumps(protocol, sort_keys=True),))
        finally:
            conn.close()
        # a link, not a rename: a file another study created meanwhile is never replaced
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return removed


def _lock(path: Path) -> int | None:
    """An exclusive advisory lock on the study file for this process's lifetime (released
    by the kernel when it dies, SIGKILL included): two studies never run the same runs
    into one file at once."""
    try:
        import fcntl
    except ImportError:  # not POSIX: SQLite's own locking still keeps the file whole
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise StudyError(f"another study is writing {path}",
                         "wait for it to finish, or " + _hint_other_db(path)) from None
    return fd
