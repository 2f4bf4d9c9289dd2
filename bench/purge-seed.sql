-- One ended session of :events events, due for retention (1h) 45s from now
-- (bench/run.sh purge, docs/benchmarks.md "Retention purge under load"):
-- sessions the load itself ends are due only in an hour.
-- Written straight into aspd's tables, as aspd writes them: the load test
-- measures the purge, not how fast this log was filled.
BEGIN;
INSERT INTO sessions (id, topic, state, created_by, created_at, ended_at, last_seq)
VALUES ('sess_PURGEBENCH000000000000000', 'purge', 'ended', '@purge.bench', 0,
        (extract(epoch from now()) * 1000)::bigint - 3600000 + 45000, :events);
INSERT INTO participants (session_id, handle, status, visible_through, last_change_seq, joined_at)
VALUES ('sess_PURGEBENCH000000000000000', '@purge.bench', 'joined', 9223372036854775807, 0, 0);
INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body, search_text, search_words)
SELECT 'sess_PURGEBENCH000000000000000', g, 'evt_PURGE' || lpad(g::text, 17, '0'), 'session.message', '@purge.bench', '', g,
       '{"type":"session.message","session_id":"sess_PURGEBENCH000000000000000","event_id":"evt_PURGE' || lpad(g::text, 17, '0') ||
       '","sequence":' || g || ',"created_at":' || g || ',"payload":{"id":"msg_PURGE' || lpad(g::text, 17, '0') ||
       '","session_id":"sess_PURGEBENCH000000000000000","sender":"@purge.bench","sequence":' || g ||
       ',"content":"an old message of about the size of a chat line, number ' || g || '","created_at":' || g || '}}',
       'an old message of about the size of a chat line, number ' || g,
       to_tsvector('simple', 'an old message of about the size of a chat line number ' || g)
FROM generate_series(1, :events) g;
COMMIT;
