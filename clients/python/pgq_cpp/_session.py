"""What the Worker and the StreamConsumer share: a connection that opens
itself again after a loss, the backoff of their retries, and stopping on
SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, TypeVar

import psycopg
from psycopg.rows import RowFactory

_log = logging.getLogger(__name__)

FIRST_RETRY = 0.1  # seconds before the first retry after a lost connection
MAX_RETRY = 10.0
JOIN_STEP = 0.5  # join() re-cancels a wait that slipped past stop() this often

R = TypeVar("R")


class Session:
    """An autocommit connection opened on first use and again after a loss.

    Threads take turns on it. A statement that loses the connection raises
    ``psycopg.OperationalError``; the next one connects again.
    """

    def __init__(self, conninfo: str, application_name: str) -> None:
        self._conninfo = conninfo
        self._application_name = application_name
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def execute(self, sql: str, params: Sequence[Any], rows: RowFactory[R]) -> list[R]:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self._conninfo, autocommit=True, application_name=self._application_name
                )
            conn = self._conn
            try:
                with conn.cursor(row_factory=rows) as cur:
                    cur.execute(sql, params)
                    return cur.fetchall()
            except psycopg.OperationalError:
                if conn.broken:
                    conn.close()
                raise

    def cancel(self) -> None:
        """Cancels the statement running now, if any; callable from any thread."""
        conn = self._conn
        if conn is not None and not conn.closed:
            try:
                conn.cancel()
            except psycopg.OperationalError as exc:  # server unreachable: nothing runs there
                _log.debug("cancel failed: %s", exc)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()


def run_until_signalled(
    run: Callable[[], None], stop: Callable[[], None], what: str, log: logging.Logger
) -> None:
    """``run()`` with SIGTERM and SIGINT calling ``stop()`` (logged to
    ``log`` as "SIGTERM: stopping <what>"); the previous handlers are put
    back when it returns. Call it from the main thread (Python delivers
    signals there)."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        log.info("%s: stopping %s", name, what)
        stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
