SELECT count(*) FROM pgq_ring.enqueue_many('bench', array_fill('{"k":1}'::jsonb, ARRAY[100]));
