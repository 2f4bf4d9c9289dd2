DROP TABLE IF EXISTS bench_events;
DROP SEQUENCE IF EXISTS bench_seq;
CREATE SEQUENCE bench_seq;
CREATE TABLE bench_events (session_id TEXT NOT NULL, sequence BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, sequence));
