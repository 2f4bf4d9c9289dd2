-- bench/purge-seed.sql for the embedded store (bench/run.sh purge-sqlite):
-- one ended session of 100,000 events, indexed for search as aspd indexes
-- them (the FTS5 triggers fire), due for retention (1h) 45s from now.
BEGIN;
INSERT INTO sessions (id, topic, state, created_by, created_at, ended_at, last_seq)
VALUES ('sess_PURGEBENCH000000000000000', 'purge', 'ended', '@purge.bench', 0, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 3600000 + 45000, 100000);
INSERT INTO participants (session_id, handle, status, visible_through, last_change_seq, joined_at)
VALUES ('sess_PURGEBENCH000000000000000', '@purge.bench', 'joined', 9223372036854775807, 0, 0);
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 100000)
INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body, search_text)
SELECT 'sess_PURGEBENCH000000000000000', n, 'evt_PURGE' || printf('%017d', n), 'session.message', '@purge.bench', '', n,
       '{"type":"session.message","session_id":"sess_PURGEBENCH000000000000000","event_id":"evt_PURGE' || printf('%017d', n) ||
       '","sequence":' || n || ',"created_at":' || n || ',"payload":{"id":"msg_PURGE' || printf('%017d', n) ||
       '","session_id":"sess_PURGEBENCH000000000000000","sender":"@purge.bench","sequence":' || n ||
       ',"content":"an old message of about the size of a chat line, number ' || n || '","created_at":' || n || '}}',
       'an old message of about the size of a chat line, number ' || n
FROM g;
COMMIT;
