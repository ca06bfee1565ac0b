SELECT id, attempt FROM pgq.claim('bench', 1) \gset
SELECT pgq.complete(:id, :attempt);
