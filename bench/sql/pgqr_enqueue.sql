-- Producer of the ring queue (bench/drain.sh pgqr, bench/bloat.py ring).
SELECT pgq.enqueue('bench_ring', '{"k":1}');
