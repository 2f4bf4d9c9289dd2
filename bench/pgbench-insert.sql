-- One durable one-row INSERT per transaction: the PostgreSQL ceiling aspd's
-- append path is compared with (docs/benchmarks.md).
INSERT INTO bench_events (session_id, sequence, body) VALUES ('s' || :client_id, nextval('bench_seq'), repeat('x', 300));
