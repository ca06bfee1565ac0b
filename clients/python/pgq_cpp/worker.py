"""Worker: claims the jobs of one queue and runs a handler on each.

How it is built (one claimer, a pool of handler threads, a heartbeat):

- The **claimer** thread has a connection that runs nothing but
  ``pgq.claim(queue, batch, lease, wait => wait)``. The server holds that
  statement until a job of the queue is committed or ``wait`` ends, so an
  idle worker is one sleeping backend, and a commit wakes it at once: there
  is no polling here. It claims only while fewer than ``concurrency`` jobs
  are in hand, so the worker holds at most ``concurrency - 1 + batch`` jobs;
  with ``batch > 1`` the extra ones wait in line for a thread.
- ``concurrency`` **handler threads** (a ``ThreadPoolExecutor``) run the
  handler, then finish the job on the shared *control* connection:
  ``pgq.complete(id, attempt)``, or ``pgq.fail(id, attempt, error)`` when the
  handler raised. The attempt is the fencing token: a ``complete`` that
  returns false means the lease was lost to a newer claim, which is logged,
  not raised (the work was done; at-least-once delivery).
- The **heartbeat** thread wakes every ``lease / 3`` and, in one statement
  on the control connection, extends every job in hand (running or in line)
  to ``lease`` from now with ``pgq.extend(id, attempt, lease)``. A job keeps
  at least two thirds of its lease between beats, however long its handler
  runs, and a missed beat (a lost connection) still leaves it a third. A
  claim found gone (``extend`` returns NULL) is logged once and not extended
  again.
- ``stop()`` (or SIGTERM/SIGINT under ``run_forever``) ends claiming: it
  cancels a waiting claim (safe, since that connection runs nothing else and
  a cancelled claim takes nothing), gives the jobs still in line back with
  ``pgq.release(id, attempt)`` (their next claim carries the same attempt),
  and those of a claim that returned before the cancel reached it, and lets
  running handlers finish and finish their jobs.
- A lost connection is opened again on next use. A claim is retried with
  backoff (0.1 s doubling to 10 s) until it works or the worker stops; a
  complete, fail or release for up to one lease, after which the server
  takes the job back by itself; a heartbeat at its next beat. (A complete
  whose first try did commit before the connection went returns false when
  retried, and is logged like a lost lease.)
- Any other server error (``InsufficientPrivilege`` without the ``consume``
  right, ``UndefinedObject`` for an unknown queue, ...) stops the worker
  gracefully and is raised by ``join()``/``run()``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import FrameType
from typing import Any, TypeVar

import psycopg
from psycopg.rows import RowFactory, class_row, tuple_row

from .queue import Queue

_log = logging.getLogger(__name__)

_CLAIM = (
    "SELECT id, queue, payload, attempt, max_attempts, lease_until, enqueued_at, priority"
    "  FROM pgq.claim(%s, %s, %s, wait => %s)"
)
_EXTEND = (
    "SELECT j.id, pgq.extend(j.id, j.attempt, %s)"
    "  FROM ROWS FROM (pg_catalog.unnest(%s::bigint[]), pg_catalog.unnest(%s::integer[]))"
    "       AS j(id, attempt)"
)
_COMPLETE = "SELECT pgq.complete(%s, %s)"
_FAIL = "SELECT pgq.fail(%s, %s, %s)"
_RELEASE = "SELECT pgq.release(%s, %s)"

_FIRST_RETRY = 0.1  # seconds before the first retry after a lost connection
_MAX_RETRY = 10.0
_JOIN_STEP = 0.5  # join() re-cancels a claim that slipped past stop() this often

R = TypeVar("R")


@dataclass
class Job:
    """A claimed job, as ``pgq.claim`` returned it (``pgq.claimed_job``).

    ``(id, attempt)`` identifies this claim: the worker completes, fails,
    extends and releases the job with it. ``lease_until`` moves forward as
    the heartbeat extends the lease.
    """

    id: int
    queue: str
    payload: Any  # the decoded JSON: a dict for the usual object payload
    attempt: int  # claims of this job so far, this one included (from 1)
    max_attempts: int
    lease_until: datetime
    enqueued_at: datetime
    priority: int


Handler = Callable[[Job], object]


class _Session:
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


class Worker:
    """Runs ``handler(job)`` for the jobs of ``queue``, up to ``concurrency`` at once.

    conninfo: a libpq connection string; the role needs the ``consume``
        right on the queue (``pgq.grant(role, queue, 'consume')``).
    handler: called in a worker thread with a ``Job``; returning completes
        the job, raising an ``Exception`` fails it (retried with the queue's
        backoff, dead-lettered after ``max_attempts``). Handlers must be
        idempotent: delivery is at-least-once.
    concurrency: handler threads.
    batch: jobs taken per claim (see the module docstring).
    lease: asked for with every claim and extension (overrides the
        queue's); the heartbeat renews it every ``lease / 3``.
    wait: how long one claim sleeps in the server when nothing is ready
        (positive: the next claim follows at once).

    Two connections: one for claims, one shared by the handler threads and
    the heartbeat. ``start()``/``stop()``/``join()``, or ``run()``, or
    ``run_forever()``. A Worker runs once.
    """

    def __init__(
        self,
        conninfo: str,
        queue: str | Queue,
        handler: Handler,
        *,
        concurrency: int = 4,
        batch: int = 1,
        lease: timedelta = timedelta(minutes=2),
        wait: timedelta = timedelta(seconds=30),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if batch < 1:
            raise ValueError("batch must be at least 1")
        if lease <= timedelta(0):
            raise ValueError("lease must be positive")
        if wait <= timedelta(0):
            # A claim that never waits would return at once, again and again:
            # the worker would poll the server in a busy loop.
            raise ValueError("wait must be positive")
        self.queue = queue.name if isinstance(queue, Queue) else queue
        self._handler = handler
        self._concurrency = concurrency
        self._batch = batch
        self._lease = lease
        self._wait = wait
        self._claims = _Session(conninfo, f"pgq_cpp.py claim {self.queue}")
        self._control = _Session(conninfo, f"pgq_cpp.py control {self.queue}")
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix=f"pgq-{self.queue}")
        self._claimer = threading.Thread(target=self._main, name=f"pgq-claimer-{self.queue}")
        self._heartbeat = threading.Thread(target=self._beat, name=f"pgq-heartbeat-{self.queue}")
        # Guards everything below. Reentrant: stop() may run in a signal
        # handler on a thread that holds it.
        self._state = threading.Condition(threading.RLock())
        self._stopping = threading.Event()
        self._finished = threading.Event()  # every job given back or finished
        self._claiming = False
        self._in_hand: dict[Future[None], Job] = {}  # dispatched, handler not done
        self._leased: dict[int, Job] = {}  # the heartbeat's: not yet being finished
        self._error: BaseException | None = None

    # -- control ----------------------------------------------------------

    def start(self) -> None:
        """Starts claiming in background threads."""
        _log.info("worker of queue %r starting (concurrency %d)", self.queue, self._concurrency)
        self._heartbeat.start()
        self._claimer.start()

    def stop(self) -> None:
        """Asks the worker to stop; returns at once. Safe from any thread
        and from a signal handler. Running handlers finish; jobs in line are
        released."""
        with self._state:
            self._stopping.set()
            self._state.notify_all()
        self._interrupt_claim()

    def join(self, timeout: float | None = None) -> bool:
        """Waits for the worker to end; False if ``timeout`` seconds passed
        first. Raises the error that stopped the worker, if one did."""
        end = None if timeout is None else time.monotonic() + timeout
        while self._claimer.is_alive():
            # A stop() between the claimer's last look and its claim
            # reaching the server cancelled nothing: cancel again.
            self._interrupt_claim()
            step = _JOIN_STEP if end is None else min(_JOIN_STEP, end - time.monotonic())
            if step <= 0:
                return False
            self._claimer.join(step)
        if self._error is not None:
            raise self._error
        return True

    def run(self) -> None:
        """start() and join(): returns once stopped."""
        self.start()
        self.join()

    def run_forever(self) -> None:
        """run() until SIGTERM or SIGINT, which stop the worker gracefully.
        Call it from the main thread (Python delivers signals there)."""

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            _log.info("%s: stopping the worker of queue %r", name, self.queue)
            self.stop()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # -- claimer thread ---------------------------------------------------

    def _main(self) -> None:
        try:
            self._claim_until_stopped()
        except BaseException as exc:  # a server error other than a lost connection
            self._abort(exc)
        finally:
            self._release_waiting()
            self._pool.shutdown(wait=True)
            self._finished.set()
            self._heartbeat.join()
            self._claims.close()
            self._control.close()
            _log.info("worker of queue %r stopped", self.queue)

    def _claim_until_stopped(self) -> None:
        delay = _FIRST_RETRY
        while self._wait_for_room():
            try:
                jobs = self._claim()
            except psycopg.OperationalError as exc:
                if self._stopping.is_set():
                    return  # our cancel: the claim rolled back, took nothing
                _log.warning("claim failed (%s); retrying in %.1f s", exc, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, _MAX_RETRY)
                continue
            delay = _FIRST_RETRY
            for job in jobs:
                self._dispatch(job)

    def _wait_for_room(self) -> bool:
        with self._state:
            while len(self._in_hand) >= self._concurrency and not self._stopping.is_set():
                self._state.wait()
            return not self._stopping.is_set()

    def _claim(self) -> list[Job]:
        with self._state:
            if self._stopping.is_set():
                return []
            self._claiming = True
        try:
            params = (self.queue, self._batch, self._lease, self._wait)
            return self._claims.execute(_CLAIM, params, class_row(Job))
        finally:
            with self._state:
                self._claiming = False

    def _interrupt_claim(self) -> None:
        with self._state:
            claiming = self._claiming and self._stopping.is_set()
        if claiming:
            self._claims.cancel()

    def _dispatch(self, job: Job) -> None:
        with self._state:
            if not self._stopping.is_set():
                self._leased[job.id] = job
                future = self._pool.submit(self._run, job)
                self._in_hand[future] = job
                future.add_done_callback(self._forget)
                return
        # A claim that returned after stop() (its cancel came too late): the
        # job is given back untouched, like the ones in line.
        self._give_back(job)

    def _forget(self, future: Future[None]) -> None:
        with self._state:
            self._in_hand.pop(future, None)
            self._state.notify_all()
        if not future.cancelled() and future.exception() is not None:
            _log.error("handler thread ended by %r", future.exception())

    def _release_waiting(self) -> None:
        with self._state:
            waiting = list(self._in_hand.items())
        for future, job in waiting:
            if future.cancel():  # not started, and now never will be
                self._unlease(job)
                self._give_back(job)

    def _give_back(self, job: Job) -> None:
        if self._finish(job, "release", _RELEASE) is False:
            _log.warning("job %d: its claim was lost before release", job.id)

    # -- handler threads --------------------------------------------------

    def _run(self, job: Job) -> None:
        error: BaseException | None = None
        try:
            self._handler(job)
        except BaseException as exc:  # SystemExit too: the attempt failed all the same
            error = exc
        finally:
            self._unlease(job)  # the heartbeat leaves it alone from here on
        if error is None:
            if self._finish(job, "complete", _COMPLETE) is False:
                _log.warning(
                    "job %d attempt %d: lease lost to a newer claim; its completion was not"
                    " recorded (the work was done: handlers must be idempotent)",
                    job.id,
                    job.attempt,
                )
            return
        message = "".join(traceback.format_exception_only(type(error), error)).strip()
        outcome = self._finish(job, "fail", _FAIL, message) or "not recorded"
        _log.warning(
            "job %d attempt %d/%d failed (%s): %s",
            job.id,
            job.attempt,
            job.max_attempts,
            outcome,
            message,
            exc_info=error,
        )
        if not isinstance(error, Exception):
            raise error  # recorded; it still ends this handler thread's task

    def _unlease(self, job: Job) -> bool:
        """Ends the heartbeat of ``job``; whether it had one."""
        with self._state:
            if self._leased.get(job.id) is not job:
                return False
            del self._leased[job.id]
            return True

    def _finish(self, job: Job, verb: str, sql: str, *extra: Any) -> Any:
        """Runs complete/fail/release for ``job``; the function's result, or
        None if it could not be sent. A lost connection is retried for one
        lease: after that the server takes the job back by itself."""
        deadline = time.monotonic() + self._lease.total_seconds()
        delay = _FIRST_RETRY
        while True:
            try:
                return self._control.execute(sql, (job.id, job.attempt, *extra), tuple_row)[0][0]
            except psycopg.OperationalError as exc:
                if time.monotonic() + delay > deadline:
                    _log.error("job %d: could not %s it (%s); giving up", job.id, verb, exc)
                    return None
                _log.warning("job %d: %s failed (%s); retrying in %.1f s", job.id, verb, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, _MAX_RETRY)
            except psycopg.Error as exc:
                self._abort(exc)
                return None

    # -- heartbeat thread -------------------------------------------------

    def _beat(self) -> None:
        while not self._finished.wait(self._lease.total_seconds() / 3):
            with self._state:
                jobs = list(self._leased.values())
            if not jobs:
                continue
            params = (self._lease, [j.id for j in jobs], [j.attempt for j in jobs])
            try:
                rows = self._control.execute(_EXTEND, params, tuple_row)
            except psycopg.OperationalError as exc:
                _log.warning("heartbeat failed (%s); trying again at the next one", exc)
                continue
            except psycopg.Error as exc:
                self._abort(exc)
                continue
            leases: dict[int, datetime | None] = {row[0]: row[1] for row in rows}
            for job in jobs:
                lease_until = leases[job.id]
                if lease_until is not None:
                    job.lease_until = lease_until
                elif self._unlease(job):  # lost, not just finished: warn once
                    _log.warning(
                        "job %d attempt %d: lease no longer held (expired, or taken by a newer"
                        " claim)",
                        job.id,
                        job.attempt,
                    )

    # -- errors -----------------------------------------------------------

    def _abort(self, exc: BaseException) -> None:
        with self._state:
            if self._error is None:
                self._error = exc
        _log.error("worker of queue %r stops: %s", self.queue, exc)
        self.stop()
