"""The demo's live queue view: pgq.queue_stats sampled every half second.

A Monitor has its own connection and a thread. Every SAMPLE_EVERY seconds,
for the whole run, the thread reads pgq.queue_stats and records one Sample per
queue: ready, scheduled, running, expired, dead, done_recent, and from those
the completions seen since the start and the completion rate. The rate comes
from done_recent deltas over the last RATE_WINDOW seconds rather than from
the scenario's own counts: done_recent is pgq's count, the one an operator
sees, and it also covers the jobs that in-database handlers complete inside
the server, which the scenario never touches.

On a terminal the latest samples are drawn as a small table pinned below the
scenario's output (common.Console.pin) and redrawn in place after each
sample; the scenario's lines scroll above it. When stdout is not a terminal
nothing is drawn. Either way, when a scene ends one line sums it up per
queue (completions, rate, deepest backlog, dead jobs), so the log keeps a
record once the live table is gone.

A scene can ask for series of its own, sampled with the queues: follow()
takes a query whose rows are (series, done, unfinished), e.g. the jobs done
and still unfinished per tenant of one queue, and returns a Track; note()
marks a moment in it (a refused import). Each track gets one line in the
live view and a panel in the chart.

The scenario calls start() with the first scene's label, scene() at each
boundary, and stop() at the end; chart.py draws `history`, `scenes` and
`tracks`.
"""

import threading
import time
from typing import NamedTuple

from common import BOLD, DIM, RESET, connect, out

SAMPLE_EVERY = 0.5      # seconds between two reads of pgq.queue_stats
RATE_WINDOW = 2.0       # seconds: completion rates are averaged over this much
TREND = 24              # samples in the live view's depth trend (12 s)
SPARKS = " ▁▂▃▄▅▆▇█"    # a depth of 0 draws nothing

# In creation order, the order the story introduces the queues.
STATS = """
SELECT s.queue, s.ready, s.scheduled, s.running, s.expired, s.dead, s.done_recent
  FROM pgq.queue_stats s JOIN pgq.queues q ON q.name = s.queue
 ORDER BY q.queue_id"""


class Sample(NamedTuple):
    """One queue at one moment; t in seconds since the monitor started."""
    t: float
    ready: int
    scheduled: int
    running: int
    expired: int
    dead: int
    done_recent: int
    completed: int      # completions seen since the monitor started
    rate: float         # completions per second over the last RATE_WINDOW

    @property
    def depth(self):
        return self.ready + self.running


class Scene(NamedTuple):
    t: float            # when it started, seconds since the monitor started
    label: str          # e.g. "2 signups"


class Track:
    """A scene's own series, sampled with pgq.queue_stats: see follow()."""

    def __init__(self, title, sql):
        self.title = title      # e.g. "tenant_jobs by tenant"
        self.sql = sql          # rows of (series, done, unfinished)
        self.lock = threading.Lock()  # samples and notes: the scene reads them too
        self.samples = {}       # series -> [(t, done, unfinished)], first seen first
        self.notes = []         # (t, text): moments the scene marked

    def record(self, t, rows):
        with self.lock:
            for series, done, unfinished in rows:
                self.samples.setdefault(series, []).append((t, done, unfinished))

    def note(self, t, text):
        with self.lock:
            self.notes.append((t, text))

    def copy(self):
        """(samples, notes), copied: safe to read while sampling goes on."""
        with self.lock:
            return {k: list(v) for k, v in self.samples.items()}, list(self.notes)

    def latest(self):
        """series -> (done, total) in the latest sample."""
        samples, _notes = self.copy()
        return {k: (v[-1][1], v[-1][1] + v[-1][2]) for k, v in samples.items()}


class Monitor:
    """Samples pgq.queue_stats in a thread; see the module docstring."""

    def __init__(self, dsn, on_error):
        self.dsn = dsn
        self.on_error = on_error    # on_error(who, exception): fails the demo
        self.lock = threading.Lock()  # the connection, history and current
        self.history = {}           # queue -> [Sample], queues in creation order
        self.current = []           # the queues in the latest sample
        self.scenes = []
        self.tracks = []            # [Track], in the order the scenes asked for them
        self.samples = 0
        self.failed = False
        self.stopping = threading.Event()
        self.conn = None
        self.thread = None
        self.t0 = time.monotonic()

    # --- what the scenario calls ----------------------------------------------

    def start(self, label):
        self.conn = connect(self.dsn)
        self.t0 = time.monotonic()
        self.scenes.append(Scene(0.0, label))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def scene(self, label):
        """Ends the current scene with a fresh sample and its summary line,
        and starts the next one."""
        self._try_sample()
        self._summarize()
        self.scenes.append(Scene(self.elapsed(), label))
        self._draw()

    def follow(self, title, sql):
        """Samples sql with every sample from now on; returns the Track."""
        track = Track(title, sql)
        with self.lock:
            self.tracks.append(track)
        self._try_sample()
        return track

    def note(self, track, text):
        """Marks this moment in track (the chart draws it)."""
        track.note(self.elapsed(), text)

    def stop(self):
        """Takes a last sample, sums up the last scene and removes the view.
        Safe to call twice, and after a failed start()."""
        if self.stopping.is_set() or self.thread is None:
            out.pin([])
            return
        self.stopping.set()
        self.thread.join(timeout=5)
        self._try_sample()
        out.pin([])
        self._summarize()
        self.conn.close()

    def elapsed(self):
        return time.monotonic() - self.t0

    # --- sampling ---------------------------------------------------------------

    def _run(self):
        next_at = time.monotonic()
        while self._try_sample():
            self._draw()
            next_at = max(next_at + SAMPLE_EVERY, time.monotonic())
            if self.stopping.wait(next_at - time.monotonic()):
                return

    def _try_sample(self):
        """Samples; on an error tells on_error once and samples no more."""
        if self.failed:
            return False
        try:
            self._sample()
            return True
        except Exception as exc:  # noqa: BLE001 - reported, fails the demo
            self.failed = True
            out.pin([])
            self.on_error("monitor", exc)
            return False

    def _sample(self):
        with self.lock:
            rows = self.conn.execute(STATS).fetchall()
            t = self.elapsed()
            for queue, *counts in rows:
                self._record(queue, t, *counts)
            self.current = [r[0] for r in rows]
            for track in self.tracks:
                track.record(t, self.conn.execute(track.sql).fetchall())
            self.samples += 1

    def _record(self, queue, t, ready, scheduled, running, expired, dead, done_recent):
        series = self.history.setdefault(queue, [])
        if series:
            # A queue dropped and created again starts from 0: not negative.
            completed = series[-1].completed + max(0, done_recent - series[-1].done_recent)
        else:
            # A queue created during the run: everything it finished counts.
            completed = 0 if self.samples == 0 else done_recent
        since = next((s for s in reversed(series) if s.t <= t - RATE_WINDOW),
                     series[0] if series else None)
        rate = (completed - since.completed) / (t - since.t) if since and t > since.t else 0.0
        series.append(Sample(t, ready, scheduled, running, expired, dead, done_recent,
                             completed, rate))

    # --- the scene summary --------------------------------------------------------

    def _summarize(self):
        """One line for the scene that is ending, printed in both modes."""
        scene = self.scenes[-1]
        end = self.elapsed()
        with self.lock:
            parts = [p for p in (self._queue_summary(q, s, scene.t, end - scene.t)
                                 for q, s in self.history.items()) if p]
        what = "; ".join(parts) if parts else "no queue activity"
        if self.failed:
            what = "not sampled to the end: the monitor failed (above)"
        out.line(f"{DIM}pgq.queue_stats, scene {scene.label} ({end - scene.t:.1f} s): "
                 f"{what}{RESET}")

    @staticmethod
    def _queue_summary(queue, series, start, seconds):
        inside = [s for s in series if s.t >= start]
        if not inside:
            return None
        before = next((s for s in reversed(series) if s.t < start), None)
        done = inside[-1].completed - (before.completed if before else 0)
        dead = inside[-1].dead - (before or inside[0]).dead
        deepest = max(s.depth for s in inside)
        if not (done or dead or deepest):
            return None
        rate = done / seconds if seconds > 0 else 0.0
        return (f"{queue}: {done} done ({rate:.1f}/s), max depth {deepest}"
                + (f", {dead} dead" if dead else ""))

    # --- the live view --------------------------------------------------------------

    def _draw(self):
        """Pins the view below the output (a no-op when not a terminal)."""
        if self.failed or self.stopping.is_set():
            return
        with self.lock:
            lines = self._view(out.width() - 3)
        out.pin(["  " + line for line in lines])

    def _view(self, width):
        label = self.scenes[-1].label if self.scenes else ""
        title = (f"── live: pgq.queue_stats every {SAMPLE_EVERY} s · scene {label} · "
                 f"{self.elapsed():.1f} s ")
        title += "─" * max(0, width - len(title))
        head = (f"{'queue':<14}{'ready':>7}{'running':>9}{'dead':>6}{'done':>7}{'jobs/s':>8}"
                f"  depth (ready+running), last {TREND * SAMPLE_EVERY:.0f} s")
        lines = [f"{DIM}{title[:width]}{RESET}", f"{BOLD}{head[:width]}{RESET}"]
        for queue in self.current:
            series = self.history[queue]
            s = series[-1]
            row = (f"{queue[:13]:<14}{s.ready:>7}{s.running:>9}{s.dead:>6}{s.done_recent:>7}"
                   f"{s.rate:>8.1f}  {trend(series[-TREND:])}")
            lines.append(row[:width])
        if not self.current:
            lines.append("(no queues yet)")
        for track in self.tracks:
            done = "  ".join(f"{k} {d}/{n}" for k, (d, n) in track.latest().items())
            lines.append(f"{track.title}, done: {done}"[:width])
        return lines


def trend(samples):
    """The depths as a sparkline, scaled to the deepest one shown."""
    top = max(s.depth for s in samples)
    if top == 0:
        return ""
    steps = len(SPARKS) - 1
    return "".join(SPARKS[0 if s.depth == 0 else max(1, round(s.depth * steps / top))]
                   for s in samples)
