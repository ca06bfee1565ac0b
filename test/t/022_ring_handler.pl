
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

# Issue 35 (ADR 0030): a handler runs with its job's trace context set
# (pgq.trace_context, until its transaction ends), so what it reads of it
# is the job's and a job it enqueues joins the trace; an untraced job's
# handler sees none (nothing left over from the job before).
sql(q{
CREATE TABLE public.seen (job_id bigint PRIMARY KEY, context text);
CREATE FUNCTION public.relay(job pgq.claimed_job) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.seen VALUES (job.id, current_setting('pgq.trace_context'));
    IF job.payload ? 'follow' THEN
        PERFORM pgq.enqueue('followed', job.payload);
    END IF;
END
$$;
SELECT pgq.create_queue('followed');
SELECT pgq.create_queue('traced_h', handler => 'public.relay(pgq.claimed_job)');
});
my $tp = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
my $traced = sql("SELECT pgq.enqueue('traced_h', '{\"follow\": 1}', traceparent => '$tp', tracestate => 'k=v')");
ok(wait_for($node, 'postgres', "SELECT count(*) FROM public.seen WHERE job_id = $traced", '1', $LONG),
	'traced: the handler ran');
my $untraced = sql("SELECT pgq.enqueue('traced_h', '{}')");
ok(wait_for($node, 'postgres', "SELECT count(*) FROM public.seen WHERE job_id = $untraced", '1', $LONG),
	'untraced: the handler ran');
is(sql("SELECT context FROM public.seen WHERE job_id = $traced"), "$tp;k=v",
	'traced: the handler saw the job\'s trace context');
is(sql("SELECT context FROM public.seen WHERE job_id = $untraced"), '',
	'untraced: the handler saw none');
is(sql("SELECT trace_context FROM pgq.claim_traced('followed') c, pgq.job(c.id) j"), "$tp;k=v",
	'traced: the job its handler enqueued carries the same context');

$node->stop;
done_testing();
