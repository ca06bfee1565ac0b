UPDATE ceiling SET v = v + 1 WHERE id = :client_id;
