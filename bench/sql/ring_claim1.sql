SELECT id, attempt FROM pgq_ring.claim('bench', 1) \gset
SELECT pgq_ring.complete(:id, :attempt);
