"""Shared by the demo's scenes: console output, colours, connections, tables.

Console serialises the lines printed by many threads and stamps events with
the elapsed time; `out` is the one instance every scene prints through. The
colour constants are empty when stdout is not a terminal. connect() opens the
autocommit connections all scenes use; print_table() and query_table() print
rows the way psql does. Importing this module also checks that psycopg 3 is
there, and says how to get it if not.
"""

import sys
import threading
import time

try:
    import psycopg
    from psycopg import errors
except ImportError:
    sys.exit("psycopg 3 is missing: apt-get install python3-psycopg, and run this with "
             "/usr/bin/python3")

__all__ = ["BOLD", "DIM", "RED", "GREEN", "RESET", "Console", "out", "connect",
           "print_table", "query_table", "errors"]

BOLD = "\033[1m" if sys.stdout.isatty() else ""
DIM = "\033[2m" if sys.stdout.isatty() else ""
RED = "\033[31m" if sys.stdout.isatty() else ""
GREEN = "\033[32m" if sys.stdout.isatty() else ""
RESET = "\033[0m" if sys.stdout.isatty() else ""


class Console:
    """Serialises output lines from all threads, stamped with the elapsed time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    def heading(self, text):
        with self.lock:
            print(f"\n{BOLD}{text}{RESET}", flush=True)

    def line(self, text=""):
        with self.lock:
            print(f"  {text}" if text else "", flush=True)

    def event(self, who, text):
        elapsed = time.monotonic() - self.t0
        with self.lock:
            print(f"  {elapsed:5.1f}s  {who:<12} {text}", flush=True)

    def restart_clock(self):
        self.t0 = time.monotonic()


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

