"""The README's psql session is what a newcomer types first: it must run as
written on a fresh installation and do what its comments say."""
import os
import re

from test_concurrency import PgqTestCase

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


class ReadmeTest(PgqTestCase):
    def test_the_psql_session_runs_as_written(self):
        with open(README, encoding="utf-8") as f:
            text = f.read()
        section = text.split("## Five minutes in psql", 1)[1]
        session = re.search(r"```sql\n(.*?)```", section, re.S).group(1)
        self.assertIn("CREATE EXTENSION pgq_cpp;", session)
        self.admin.execute("DROP EXTENSION pgq_cpp")  # the session installs it
        self.admin.execute("CREATE TABLE users (id serial PRIMARY KEY, email text)")
        self.admin.execute(session)
        self.assertEqual(self.scalar("SELECT count(*) FROM users"), 1)
        # Its job was claimed and completed once; the calls after the
        # complete found their claim gone and changed nothing.
        self.assertEqual(self.admin.execute(
            "SELECT ready, running, dead, done_recent FROM pgq.queue_stats WHERE queue = 'emails'"
        ).fetchone(), (0, 0, 0, 1))
