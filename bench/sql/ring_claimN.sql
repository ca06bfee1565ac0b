SELECT array_agg(id) AS ids, array_agg(attempt) AS atts FROM pgq_ring.claim('bench', :n) \gset
SELECT pgq_ring.complete_many(:ids, :atts);
