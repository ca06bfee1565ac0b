SELECT array_agg(id) AS ids, array_agg(attempt) AS atts FROM pgq.claim('bench', :n) \gset
SELECT pgq.complete_many(:ids, :atts);
