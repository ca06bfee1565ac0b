"""Worker: claims the jobs of one queue, or of several, and runs a handler on each.

How it is built (one claimer, a pool of handler threads, a heartbeat):

- The **claimer** thread has a connection that runs nothing but
  ``pgq.claim_traced(queue, batch, lease, wait => wait)`` (with several
  queues, ``pgq.claim_traced(queues text[], ...)``: one claim takes the jobs
  of all of them by priority, then run_at, and each ``Job`` carries its
  ``queue``; ``claim_traced`` is ``pgq.claim`` with each job's trace
  context, and against a catalog before 3.1, which has none, the worker
  claims with ``pgq.claim``). The
  server holds that statement until a job of the queue (of any of them) is
  committed or ``wait`` ends, so an idle worker is one sleeping backend, and
  a commit wakes it at once: there is no polling here. It claims only while fewer than ``concurrency`` jobs
  are in hand, so the worker holds at most ``concurrency - 1 + batch`` jobs;
  with ``batch > 1`` the extra ones wait in line for a thread.
- ``concurrency`` **handler threads** (a ``ThreadPoolExecutor``) run the
  handler, then finish the job on the shared *control* connection:
  ``pgq.complete(id, attempt, result)`` with what the handler returned, or
  ``pgq.fail(id, attempt, error)`` when it raised. Two exceptions are not
  failures: ``Snooze`` becomes ``pgq.snooze(id, attempt, delay)``, and
  ``OutcomeUnknown`` leaves the job alone (no heartbeat, no complete, fail
  or release): its lease runs out and the server hands it out again. The
  attempt is the fencing token: a ``complete`` that returns false means the
  lease was lost to a newer claim, which is logged, not raised (the work
  was done; at-least-once delivery). ``job.progress(value)`` runs
  ``pgq.progress`` on the control connection too.
- The **heartbeat** thread wakes every ``lease / 3`` and, in one statement
  on the control connection, extends every job in hand (running or in line)
  to ``lease`` from now with ``pgq.extend(id, attempt, lease)``. A job keeps
  at least two thirds of its lease between beats, however long its handler
  runs, and a missed beat (a lost connection) still leaves it a third. A
  claim found gone (``extend`` returns NULL) is not extended again; the
  heartbeat asks ``pgq.job`` why. Cancelled (``pgq.cancel``): it sets the
  job's ``cancelled`` event, so a cancel reaches the handler within one
  beat, and the handler's end is not recorded (the server already put the
  job in dead-letter). Otherwise (expired, taken by a newer claim) it is
  logged once.
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
- With opentelemetry importable, each job runs in a CONSUMER span
  ``process <queue>``, child of the context the job was enqueued with
  (``pgq_cpp.tracing``), current while the handler runs: what the handler
  enqueues joins the trace.
- Any other server error (``InsufficientPrivilege`` without the ``consume``
  right, on every queue, ``UndefinedObject`` for an unknown queue, ...)
  stops the worker gracefully and is raised by ``join()``/``run()``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn, Union

import psycopg
from psycopg.rows import class_row, tuple_row
from psycopg.types.json import Jsonb

from . import tracing
from ._session import FIRST_RETRY, JOIN_STEP, MAX_RETRY, Session, run_until_signalled
from .queue import Queue

_log = logging.getLogger(__name__)

_JOB_COLUMNS = "id, queue, payload, attempt, max_attempts, lease_until, enqueued_at, priority"
# pgq.claim_traced (3.1): claim's columns, then each job's trace context.
_TRACED = (
    f"SELECT {_JOB_COLUMNS}, traceparent, tracestate, links"
    "  FROM pgq.claim_traced(%s, %s, %s, wait => %s)"
)
# Several queues: the array is a real text[] parameter (a Python list).
_TRACED_MANY = (
    f"SELECT {_JOB_COLUMNS}, traceparent, tracestate, links"
    "  FROM pgq.claim_traced(%s::text[], %s, %s, %s)"
)
# A catalog before 3.1 has no claim_traced: its jobs come without contexts.
_CLAIM = f"SELECT {_JOB_COLUMNS} FROM pgq.claim(%s, %s, %s, wait => %s)"
_CLAIM_MANY = f"SELECT {_JOB_COLUMNS} FROM pgq.claim(%s::text[], %s, %s, %s)"
_EXTEND = (
    "SELECT j.id, pgq.extend(j.id, j.attempt, %s)"
    "  FROM ROWS FROM (pg_catalog.unnest(%s::bigint[]), pg_catalog.unnest(%s::integer[]))"
    "       AS j(id, attempt)"
)
# Why the heartbeat lost a claim: no row, or 'cancelled', is a cancel.
_STATES = (
    "SELECT j.id, i.state"
    "  FROM pg_catalog.unnest(%s::bigint[]) AS j(id) LEFT JOIN LATERAL pgq.job(j.id) AS i ON true"
)
_COMPLETE = "SELECT pgq.complete(%s, %s)"
_COMPLETE_WITH_RESULT = "SELECT pgq.complete(%s, %s, %s::jsonb)"
_FAIL = "SELECT pgq.fail(%s, %s, %s)"
_RELEASE = "SELECT pgq.release(%s, %s)"
_SNOOZE = "SELECT pgq.snooze(%s, %s, %s::interval)"
_PROGRESS = "SELECT pgq.progress(%s, %s, %s)"


class Snooze(Exception):
    """Raised by a handler (or by ``job.snooze(delay)``): run the job again
    ``delay`` from now, without spending its attempt (``pgq.snooze``). For
    "not now" (a rate-limited API, a resource not ready), as opposed to a
    failure."""

    def __init__(self, delay: timedelta) -> None:
        # Checked here, in the handler: a bad delay fails the attempt like
        # any handler error, instead of reaching the server.
        if not isinstance(delay, timedelta):
            raise TypeError(f"snooze delay must be a timedelta, not {type(delay).__name__}")
        if delay < timedelta(0):
            raise ValueError("snooze delay must not be negative")
        super().__init__(delay)
        self.delay = delay

    def __str__(self) -> str:
        return f"snoozed for {self.delay}"


class OutcomeUnknown(Exception):
    """Raised by a handler that cannot know whether its effect happened (a
    timeout on a call that is not idempotent). The worker neither completes
    nor fails nor releases the job and stops extending its lease: the job
    runs again, as a new attempt, only once that lease has run out, which
    leaves the other side time to finish what it may be doing."""


@dataclass
class Job:
    """A claimed job, as ``pgq.claim_traced`` returned it (``pgq.traced_job``).

    ``(id, attempt)`` identifies this claim: the worker completes, fails,
    extends and releases the job with it. ``lease_until`` moves forward as
    the heartbeat extends the lease. ``cancelled`` is set when the job was
    cancelled (``pgq.cancel``) while claimed: a long handler should watch
    it (``job.cancelled.wait(timeout)`` or ``is_set()``) and stop.
    ``traceparent``/``tracestate`` are the W3C trace context it was
    enqueued with (None: untraced, or a server before 3.1), ``links`` the
    traceparents of its traced parents (``after``), ``[]`` for none.
    """

    id: int
    queue: str
    payload: Any  # the decoded JSON: a dict for the usual object payload
    attempt: int  # claims of this job so far, this one included (from 1)
    max_attempts: int
    lease_until: datetime
    enqueued_at: datetime
    priority: int
    traceparent: str | None = None  # version 00, as the server stores it
    tracestate: str | None = None
    links: list[str] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    # The worker's control connection, for progress(); set when dispatched.
    _control: Session | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.links is None:  # the server's NULL: no traced parents
            self.links = []

    def progress(self, value: Any) -> bool:
        """Records ``value`` (anything ``json.dumps`` takes) as the job's
        progress at once (``pgq.progress``), in place of the last one;
        ``pgq.job`` shows it. False when this claim no longer holds the job
        (its lease was lost, or it was cancelled). Server and connection
        errors are raised to the caller (psycopg errors)."""
        if self._control is None:
            raise RuntimeError("progress() needs a job its Worker handed to the handler")
        params = (self.id, self.attempt, Jsonb(value))
        return bool(self._control.execute(_PROGRESS, params, tuple_row)[0][0])

    def snooze(self, delay: timedelta) -> NoReturn:
        """Raises ``Snooze(delay)``: the worker puts the job back, due
        ``delay`` from now, without spending this attempt."""
        raise Snooze(delay)


Handler = Callable[[Job], object]

# A queue for the Worker: its name or a Queue.
QueueRef = Union[str, Queue]

# Queue names in thread names and application_name are cut to about this
# long (application_name keeps 63 bytes).
_LABEL_MAX = 32


def _queue_names(queue: QueueRef | Sequence[QueueRef]) -> tuple[str, ...]:
    """The names of ``queue``: one name or ``Queue``, or a list (tuple) of
    them. ValueError for none or a name given twice, before any connection."""
    if isinstance(queue, (str, Queue)):
        refs: list[Any] = [queue]
    elif isinstance(queue, Iterable):
        refs = list(queue)
    else:
        raise TypeError(f"a queue is a name or a Queue, not {type(queue).__name__}")
    names = tuple(ref.name if isinstance(ref, Queue) else ref for ref in refs)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"a queue is a name or a Queue, not {type(name).__name__}")
    if not names:
        raise ValueError("a worker needs at least one queue")
    twice = [name for i, name in enumerate(names) if name in names[:i]]
    if twice:
        raise ValueError(f"queue {twice[0]!r} is named more than once")
    return names


def _label(names: tuple[str, ...]) -> str:
    """The queues, short, for thread names and application_name: ``emails``,
    ``render,send``, or ``render+4 more`` when the list would be long."""
    joined = ",".join(names)
    if len(names) == 1 or len(joined) <= _LABEL_MAX:
        return joined
    return f"{names[0]}+{len(names) - 1} more"


def _encode_result(job: Job, result: object) -> str | None:
    """The handler's return value as JSON text; None for None, and for a
    value that is not JSON: the work was done, so the job is completed
    without a result (failing it would do the work again)."""
    if result is None:
        return None
    try:
        return json.dumps(result, allow_nan=False)  # NaN is not JSON: jsonb refuses it
    except (TypeError, ValueError) as exc:
        _log.warning(
            "job %d attempt %d: its result is not JSON (%s); completing it without one",
            job.id,
            job.attempt,
            exc,
        )
        return None


class Worker:
    """Runs ``handler(job)`` for the jobs of ``queue``, up to ``concurrency`` at once.

    conninfo: a libpq connection string; the role needs the ``consume``
        right on the queue (``pgq.grant(role, queue, 'consume')``), on each
        of them with several.
    queue: a queue's name or a ``Queue``, or a list (tuple) of them: one
        worker, one claim and one pool for several queues (server 1.2),
        jobs taken by priority, then run_at, across them; ``job.queue``
        tells where each came from. ``queues`` is the tuple of names,
        ``queue`` the name of a worker of one queue (None with several).
        A list of one is that queue.
    handler: called in a worker thread with a ``Job``; returning completes
        the job, with the returned value (JSON) as its result unless None;
        raising an ``Exception`` fails it (retried with the queue's backoff,
        dead-lettered after ``max_attempts``), except ``Snooze`` (run again
        later, attempt not spent) and ``OutcomeUnknown`` (left to its lease).
        Handlers must be idempotent: delivery is at-least-once.
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
        queue: QueueRef | Sequence[QueueRef],
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
        self.queues = _queue_names(queue)
        self.queue: str | None = self.queues[0] if len(self.queues) == 1 else None
        self._handler = handler
        self._concurrency = concurrency
        self._batch = batch
        self._lease = lease
        self._wait = wait
        # One queue: the claim of one queue (and a list of one is that queue).
        self._claim_sql = _TRACED if self.queue is not None else _TRACED_MANY
        self._claim_from: str | list[str] = (
            self.queue if self.queue is not None else list(self.queues)
        )
        self._what = (  # for the log
            f"queue {self.queue!r}"
            if self.queue is not None
            else "queues " + ", ".join(repr(name) for name in self.queues)
        )
        label = _label(self.queues)
        self._claims = Session(conninfo, f"pgq_cpp.py claim {label}")
        self._control = Session(conninfo, f"pgq_cpp.py control {label}")
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix=f"pgq-{label}")
        self._claimer = threading.Thread(target=self._main, name=f"pgq-claimer-{label}")
        self._heartbeat = threading.Thread(target=self._beat, name=f"pgq-heartbeat-{label}")
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
        _log.info("worker of %s starting (concurrency %d)", self._what, self._concurrency)
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
            step = JOIN_STEP if end is None else min(JOIN_STEP, end - time.monotonic())
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
        run_until_signalled(self.run, self.stop, f"the worker of {self._what}", _log)

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
            _log.info("worker of %s stopped", self._what)

    def _claim_until_stopped(self) -> None:
        delay = FIRST_RETRY
        while self._wait_for_room():
            try:
                jobs = self._claim()
            except psycopg.OperationalError as exc:
                if self._stopping.is_set():
                    return  # our cancel: the claim rolled back, took nothing
                _log.warning("claim failed (%s); retrying in %.1f s", exc, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, MAX_RETRY)
                continue
            delay = FIRST_RETRY
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
            params = (self._claim_from, self._batch, self._lease, self._wait)
            try:
                return self._claims.execute(self._claim_sql, params, class_row(Job))
            except psycopg.errors.UndefinedFunction:
                if self._claim_sql not in (_TRACED, _TRACED_MANY):
                    raise
                # A catalog before 3.1 (the claim failed at once, took nothing).
                _log.warning(
                    "worker of %s: the server has no pgq.claim_traced (pgq_cpp before 3.1);"
                    " claiming with pgq.claim, without trace contexts",
                    self._what,
                )
                self._claim_sql = _CLAIM if self._claim_sql == _TRACED else _CLAIM_MANY
                return self._claims.execute(self._claim_sql, params, class_row(Job))
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
                job._control = self._control
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
            # Not started, and now never will be; a cancelled one (the
            # heartbeat unleased it) is no longer ours to give back.
            if future.cancel() and self._unlease(job):
                self._give_back(job)

    def _give_back(self, job: Job) -> None:
        if self._finish(job, "release", _RELEASE) is False:
            _log.warning("job %d: its claim was lost before release", job.id)

    # -- handler threads --------------------------------------------------

    def _run(self, job: Job) -> None:
        attributes = {"messaging.message.id": str(job.id), "pgq.attempt": job.attempt}
        parent = (job.traceparent, job.tracestate)
        with tracing.process(job.queue, parent, job.links, attributes) as span:
            outcome, error = self._handle(job)
            span.finish(outcome, error if outcome in ("failed", "outcome_unknown") else None)
        if error is not None and not isinstance(error, Exception):
            raise error  # handled; it still ends this handler thread's task

    def _handle(self, job: Job) -> tuple[str, BaseException | None]:
        """Runs the handler and records how it ended: the outcome (a word
        for the span's ``pgq.outcome``) and what the handler raised."""
        if job.cancelled.is_set():
            _log.info(
                "job %d attempt %d: cancelled before its handler started", job.id, job.attempt
            )
            return "cancelled", None
        result: object = None
        error: BaseException | None = None
        try:
            result = self._handler(job)
        except BaseException as exc:  # SystemExit too: the attempt failed all the same
            error = exc
        finally:
            # The heartbeat leaves it alone from here on. INVARIANT: the
            # heartbeat sets job.cancelled only while the job is leased, in
            # the same critical section as its unlease, so the check below
            # sees every cancel that came before this point.
            self._unlease(job)
        if job.cancelled.is_set():
            # The server already ended the claim: complete would return
            # false and fail 'lost', so the end is only logged.
            ended = "returned" if error is None else f"raised {type(error).__name__}"
            _log.info(
                "job %d attempt %d: cancelled; its handler %s, which is not recorded",
                job.id,
                job.attempt,
                ended,
            )
            return "cancelled", error
        if isinstance(error, Snooze):
            self._snooze(job, error)
            return "snoozed", error
        if isinstance(error, OutcomeUnknown):
            _log.warning(
                "job %d attempt %d: outcome unknown (%s); neither completed nor failed, it runs"
                " again once its lease ends (%s)",
                job.id,
                job.attempt,
                error,
                job.lease_until.isoformat(timespec="seconds"),
            )
            return "outcome_unknown", error
        if error is None:
            self._complete(job, result)
            return "completed", None
        self._fail(job, error)
        return "failed", error

    def _complete(self, job: Job, result: object) -> None:
        done: Any = None
        encoded = _encode_result(job, result)
        if encoded is not None:
            try:
                done = self._send(job, "complete", _COMPLETE_WITH_RESULT, encoded)
            except (psycopg.DataError, psycopg.errors.ProgramLimitExceeded) as exc:
                # A result the server refuses (over pgq.max_payload_bytes:
                # 22001, or 54000 as for a payload; only the result can be
                # bad data here): the work was done, so it is recorded as
                # done (failing it would do the work again).
                _log.warning(
                    "job %d attempt %d: result refused (%s); completing it without one",
                    job.id,
                    job.attempt,
                    exc,
                )
                done = self._finish(job, "complete", _COMPLETE)
            except psycopg.Error as exc:
                self._abort(exc)
        else:
            done = self._finish(job, "complete", _COMPLETE)
        if done is False:
            _log.warning(
                "job %d attempt %d: lease lost to a newer claim; its completion was not"
                " recorded (the work was done: handlers must be idempotent)",
                job.id,
                job.attempt,
            )

    def _snooze(self, job: Job, snooze: Snooze) -> None:
        try:
            snoozed = self._send(job, "snooze", _SNOOZE, snooze.delay)
        except psycopg.DataError as exc:
            # A delay the server refuses (too far off): the handler's
            # mistake, recorded as its failure rather than stopping the
            # worker as a configuration error would.
            self._fail(job, exc)
            return
        except psycopg.Error as exc:
            self._abort(exc)
            return
        if snoozed is False:
            _log.warning(
                "job %d attempt %d: lease lost to a newer claim; its snooze was not recorded",
                job.id,
                job.attempt,
            )

    def _fail(self, job: Job, error: BaseException) -> None:
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

    def _unlease(self, job: Job) -> bool:
        """Ends the heartbeat of ``job``; whether it had one."""
        with self._state:
            if self._leased.get(job.id) is not job:
                return False
            del self._leased[job.id]
            return True

    def _finish(self, job: Job, verb: str, sql: str, *extra: Any) -> Any:
        """``_send``, where a server error stops the worker (None)."""
        try:
            return self._send(job, verb, sql, *extra)
        except psycopg.Error as exc:
            self._abort(exc)
            return None

    def _send(self, job: Job, verb: str, sql: str, *extra: Any) -> Any:
        """Runs complete/fail/release/snooze for ``job``; the function's
        result, or None if it could not be sent. A lost connection is
        retried for one lease: after that the server takes the job back by
        itself. Raises server errors."""
        deadline = time.monotonic() + self._lease.total_seconds()
        delay = FIRST_RETRY
        while True:
            try:
                return self._control.execute(sql, (job.id, job.attempt, *extra), tuple_row)[0][0]
            except psycopg.errors.ProgramLimitExceeded:
                raise  # an OperationalError, but about the statement, not the connection
            except psycopg.OperationalError as exc:
                if time.monotonic() + delay > deadline:
                    _log.error("job %d: could not %s it (%s); giving up", job.id, verb, exc)
                    return None
                _log.warning("job %d: %s failed (%s); retrying in %.1f s", job.id, verb, exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, MAX_RETRY)

    # -- heartbeat thread -------------------------------------------------

    def _beat(self) -> None:
        while not self._finished.wait(self._lease.total_seconds() / 3):
            with self._state:
                jobs = list(self._leased.values())
            if jobs:
                self._extend(jobs)

    def _extend(self, jobs: list[Job]) -> None:
        params = (self._lease, [j.id for j in jobs], [j.attempt for j in jobs])
        try:
            rows = self._control.execute(_EXTEND, params, tuple_row)
        except psycopg.OperationalError as exc:
            _log.warning("heartbeat failed (%s); trying again at the next one", exc)
            return
        except psycopg.Error as exc:
            self._abort(exc)
            return
        leases: dict[int, datetime | None] = {row[0]: row[1] for row in rows}
        gone = []
        for job in jobs:
            lease_until = leases[job.id]
            if lease_until is None:
                gone.append(job)
            else:
                job.lease_until = lease_until
        if gone:
            self._lost(gone)

    def _lost(self, jobs: list[Job]) -> None:
        """The claims ``extend`` found gone: cancels reach their handlers,
        other losses are logged once."""
        cancelled = self._cancelled(jobs)
        if cancelled is None:
            return  # still leased: the next beat asks again
        for job in jobs:
            with self._state:
                if not self._unlease(job):
                    continue  # its handler ended meanwhile: not lost, just finished
                if job.id in cancelled:
                    job.cancelled.set()
            if job.id in cancelled:
                _log.info("job %d attempt %d: cancelled; job.cancelled is set", job.id, job.attempt)
            else:
                _log.warning(
                    "job %d attempt %d: lease no longer held (expired, or taken by a newer"
                    " claim)",
                    job.id,
                    job.attempt,
                )

    def _cancelled(self, jobs: list[Job]) -> set[int] | None:
        """Which of ``jobs`` were cancelled; None when the server could not
        be asked."""
        try:
            rows = self._control.execute(_STATES, ([j.id for j in jobs],), tuple_row)
        except psycopg.errors.UndefinedFunction:
            return set()  # a server before 1.2: no pgq.job, and no cancel of a claimed job
        except psycopg.OperationalError as exc:
            _log.warning("heartbeat failed (%s); trying again at the next one", exc)
            return None
        except psycopg.Error as exc:
            self._abort(exc)
            return None
        # No row: the job left the history too (a purge, or done by a newer
        # claim on a queue that keeps no completed jobs). Taken as a cancel:
        # the handler's work is no longer wanted and its end could not be
        # recorded anyway.
        return {job_id for job_id, state in rows if state is None or state == "cancelled"}

    # -- errors -----------------------------------------------------------

    def _abort(self, exc: BaseException) -> None:
        with self._state:
            if self._error is None:
                self._error = exc
        _log.error("worker of %s stops: %s", self._what, exc)
        self.stop()
