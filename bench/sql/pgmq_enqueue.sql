-- One message per transaction into pgmq (bench/drain.sh with PGMQ_SQL).
SELECT pgmq.send('bench', '{"k":1}');
