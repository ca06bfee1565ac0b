SELECT pgq.enqueue('bench', '{"k":1}');
