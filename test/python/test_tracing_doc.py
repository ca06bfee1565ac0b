"""docs/tracing.md's SQL runs as written, in order, on a fresh installation,
and does what the page says: the setting traces the enqueue of its
transaction and ends with it; claim_traced and list_jobs show the trace."""
import os

import doc_sql
from test_concurrency import PgqTestCase

PAGE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "tracing.md")


class TracingDocTest(PgqTestCase):
    def test_the_block_runs_and_does_what_the_page_says(self):
        blocks, statements = doc_sql.statements(PAGE)
        self.assertEqual(blocks, 1)
        results = {}
        for statement in statements:
            cur = self.admin.execute(statement.replace("\n  ", "\n"))
            if cur.description is not None:
                row = cur.fetchone()
                for column, value in zip(cur.description, row or ()):
                    results[column.name] = value
        self.assertEqual(results["after_commit"], "")
        self.assertEqual(results["traceparent"],
                         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        self.assertEqual(results["tracestate"], "congo=t61rcWkgMzE")
        self.assertEqual(results["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736")
