-- PgQ's rotation in place of pgqd's maintenance (bench/streams.sh size):
-- step 1 truncates the next event table once the rotation period has passed
-- and no consumer is still on it; step 2, in a transaction of its own,
-- records that the rotation is visible. Then sleep :period_ms ms (pgqd runs
-- them every maint_period, 120 s by default).
SELECT pgq.maint_rotate_tables_step1('bench');
SELECT pgq.maint_rotate_tables_step2();
\sleep :period_ms ms
