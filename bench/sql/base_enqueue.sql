INSERT INTO bench_jobs (queue, payload) VALUES ('bench', '{"k":1}') RETURNING id;
