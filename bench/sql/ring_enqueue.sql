SELECT pgq_ring.enqueue('bench', '{"k":1}');
