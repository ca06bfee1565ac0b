"""job() and list_jobs(): pgq.job and pgq.list_jobs as JobInfo rows, and
paging newest first with before_id."""

from __future__ import annotations

import dataclasses

from psycopg.rows import dict_row

from pgq_cpp import JobInfo, Queue, job, list_jobs
from support import PgqTestCase

Q = Queue("q")


class JobsTest(PgqTestCase):
    def test_job_is_pgq_job_as_a_dataclass(self) -> None:
        job_id = Q.enqueue(self.admin, {"to": "ann@example.com"}, priority=2, group_key="g")
        self.assertEqual(self.scalar("SELECT id FROM pgq.claim('q', 1)"), job_id)
        info = job(self.admin, job_id)
        assert info is not None
        self.assertIsInstance(info, JobInfo)
        # Every column of pgq.job_info, under its own name.
        self.assertEqual(dataclasses.asdict(info), self.job_row(job_id))
        self.assertEqual(
            (info.queue, info.state, info.attempt, info.priority, info.group_key, info.payload),
            ("q", "running", 1, 2, "g", {"to": "ann@example.com"}),
        )
        self.assertIsNotNone(info.lease_until)
        self.assertIsNone(job(self.admin, job_id + 1000))
        # Through a cursor with the caller's own row factory, too.
        with self.admin.cursor(row_factory=dict_row) as cur:
            self.assertEqual(job(cur, job_id), info)

    def test_list_jobs_pages_newest_first(self) -> None:
        self.admin.execute("SELECT pgq.create_queue('other')")
        ids = Q.enqueue_many(self.admin, [{"n": n} for n in range(5)])
        Queue("other").enqueue(self.admin, {"not": "listed"})
        running = self.scalar("SELECT id FROM pgq.claim('q', 1)")
        self.assertEqual(running, ids[0])

        pages: list[list[int]] = []
        before_id = None
        while True:
            page = list_jobs(self.admin, "q", max=2, before_id=before_id)
            if not page:
                break
            pages.append([info.id for info in page])
            before_id = page[-1].id
        self.assertEqual(pages, [[ids[4], ids[3]], [ids[2], ids[1]], [ids[0]]])

        everything = list_jobs(self.admin, "q")  # max 100
        self.assertEqual([info.id for info in everything], ids[::-1])
        self.assertEqual([info.payload for info in everything], [{"n": n} for n in (4, 3, 2, 1, 0)])
        self.assertEqual([i.id for i in list_jobs(self.admin, "q", state="running")], [running])
        self.assertEqual([i.id for i in list_jobs(self.admin, "q", state="ready")], ids[:0:-1])
        self.assertEqual(list_jobs(self.admin, "q", state="dead"), [])
