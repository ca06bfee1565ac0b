
# In-database handlers on a ring queue (issue 33, ADR 0028): the handler workers claim the ring's jobs and
# complete them (each handled once, its row written in the handler's
# transaction), and a handler that raises fails its job, whose next attempt
# (from pgq.job_rows, after the backoff) is handled in its turn; nothing is left
# on the ring.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

my $node = pgq_node('ring_handler');
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{
CREATE EXTENSION pgq_cpp;
CREATE TABLE public.handled (job_id bigint NOT NULL, attempt int NOT NULL,
                             PRIMARY KEY (job_id, attempt));
CREATE FUNCTION public.handle(job pgq.claimed_job) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.handled VALUES (job.id, job.attempt);
    IF coalesce((job.payload->>'fail_first')::boolean, false) AND job.attempt = 1 THEN
        RAISE EXCEPTION 'boom for job %', job.id;
    END IF;
END
$$;
SELECT pgq.create_queue('rh', handler => 'public.handle(pgq.claimed_job)',
                        backoff_base => '0', backoff_max => '0');
});
is(sql("SELECT ring_id IS NOT NULL FROM pgq.queues WHERE name = 'rh'"), 't', 'the handler queue is on a ring');
sql(q{SELECT pgq.enqueue_many('rh', array_fill('{}'::jsonb, ARRAY[20]))});
my $failing = sql(q{SELECT pgq.enqueue('rh', '{"fail_first": true}')});

ok(wait_for($node, 'postgres', 'SELECT count(DISTINCT job_id) FROM public.handled', '21', $LONG),
	'the handler workers ran every job');
# The raise rolled back the handler's row of attempt 1 with the rest of its
# work; attempt 2 ran from pgq.job_rows.
is(sql("SELECT string_agg(attempt::text, ',' ORDER BY attempt) FROM public.handled
         WHERE job_id = $failing"), '2', 'the failing job ran again, as attempt 2');
is(sql("SELECT count(*) FROM public.handled WHERE job_id <> $failing AND attempt = 1"), '20',
	'the others once each, as attempt 1');
ok(wait_for($node, 'postgres',
		"SELECT (SELECT count(*) FROM pgq.ring_jobs) + (SELECT count(*) FROM pgq.job_rows)", '0', $LONG),
	'nothing is left on the ring or in pgq.job_rows');
is(sql("SELECT count(*) FROM pgq.dead_jobs"), '0', 'nothing died');
# (The ring turns after a minute: its rows are all still there.)
is(sql("SELECT count(DISTINCT id) FROM pgq.job_log WHERE kind = 'e'"), '21',
	'the 21 jobs were entries of the ring');

$node->stop;
done_testing();
