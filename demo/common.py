"""Shared by the demo's scenes: console output, colours, connections, tables.

Console serialises the lines printed by many threads and stamps events with
the elapsed time; `out` is the one instance every scene prints through. On a
terminal it can keep a few lines pinned below the output (the live queue view
of live.py): every line printed goes above them. The colour constants are
empty when stdout is not a terminal (TERMINAL). connect() opens the autocommit
connections all scenes use; print_table() and query_table() print rows the way
psql does. Importing this module also checks that psycopg 3 is there, and says
how to get it if not.
"""

import json
import shutil
import sys
import threading
import time

try:
    import psycopg
    from psycopg import errors
except ImportError:
    sys.exit("psycopg 3 is missing: apt-get install python3-psycopg, and run this with "
             "/usr/bin/python3")

__all__ = ["BOLD", "DIM", "RED", "GREEN", "RESET", "TERMINAL", "Console", "out", "connect",
           "print_table", "query_table", "errors"]

TERMINAL = sys.stdout.isatty()
BOLD = "\033[1m" if TERMINAL else ""
DIM = "\033[2m" if TERMINAL else ""
RED = "\033[31m" if TERMINAL else ""
GREEN = "\033[32m" if TERMINAL else ""
RESET = "\033[0m" if TERMINAL else ""


class Console:
    """Serialises output lines from all threads, stamped with the elapsed time.

    On a terminal, pin() keeps a few lines at the bottom, below the output:
    each new line erases them, is printed, and draws them again, so the output
    scrolls above them and they stay in place. Pinned lines must fit the
    terminal's width (width() tells it): one that wrapped would take two rows
    and the erasing would miss one.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.pinned = []

    def heading(self, text):
        self._print(f"\n{BOLD}{text}{RESET}")

    def line(self, text=""):
        self._print(f"  {text}" if text else "")

    def event(self, who, text):
        elapsed = time.monotonic() - self.t0
        self._print(f"  {elapsed:5.1f}s  {who:<12} {text}")

    def restart_clock(self):
        self.t0 = time.monotonic()

    def pin(self, lines):
        """Replaces the pinned lines ([] removes them). Does nothing when
        stdout is not a terminal."""
        if not TERMINAL:
            return
        with self.lock:
            erase = self._erase_pinned()
            self.pinned = list(lines)
            sys.stdout.write(erase + self._draw_pinned())
            sys.stdout.flush()

    @staticmethod
    def width():
        return shutil.get_terminal_size((100, 24)).columns

    def _print(self, text):
        with self.lock:
            sys.stdout.write(self._erase_pinned() + text + "\n" + self._draw_pinned())
            sys.stdout.flush()

    def _erase_pinned(self):
        # Up to the first pinned row, then clear to the end of the screen.
        return f"\r\033[{len(self.pinned)}A\033[J" if self.pinned else ""

    def _draw_pinned(self):
        return "".join(line + RESET + "\n" for line in self.pinned)


out = Console()


def connect(dsn):
    return psycopg.connect(dsn, autocommit=True, application_name="pgq_demo")


# --- tables ----------------------------------------------------------------

def print_table(cur_rows, columns):
    def show(v):
        if v is None:
            return ""
        if isinstance(v, bool):
            return "t" if v else "f"
        if isinstance(v, (dict, list)):  # jsonb, shown as psql shows it
            return json.dumps(v, ensure_ascii=False)
        return str(v)

    rows = [[show(v) for v in row] for row in cur_rows]
    numeric = [bool(cur_rows) and all(isinstance(r[i], (int, float)) and not isinstance(r[i], bool)
                                      for r in cur_rows) for i in range(len(columns))]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]

    def fmt(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    out.line(fmt(columns))
    out.line("  ".join("-" * w for w in widths))
    for r in rows:
        out.line(fmt(r))
    if not rows:
        out.line("(no rows)")


def query_table(conn, sql, params=None):
    cur = conn.execute(sql, params)
    columns = [d.name for d in cur.description]
    print_table(cur.fetchall(), columns)

