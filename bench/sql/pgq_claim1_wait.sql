-- claim1 with a wait (what the clients and pgq-worker send): each attempt
-- runs in a subtransaction (issue 16: an empty one is rolled back before the
-- claim sleeps); on a queue with jobs the first attempt takes one.
SELECT id, attempt FROM pgq.claim('bench', 1, wait => '1 s') \gset
SELECT pgq.complete(:id, :attempt);
