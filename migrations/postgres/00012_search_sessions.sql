-- +goose Up
-- The events of a session by time (docs/search.md, "A participant's
-- events"). A search with a participant filter reads the newest events of
-- the participant's sessions first, each session's through this index
-- (newest first, without reading the rows), and fetches only the events
-- it needs: for a word common in the log but rarer in those sessions, a
-- few thousand events instead of every event of the participant's
-- sessions (at ten million events, 300 sessions and 30,000 events, read
-- at 3-4 us each). sequence breaks the ties of a batch, whose events
-- share one created_at. events_pkey (session_id, sequence) cannot serve:
-- created_at need not grow with sequence (nodes' clocks differ). About
-- 60 MB per million events, and about 6 s per million events to build,
-- during which aspd (migrating before it serves) does not answer.
CREATE INDEX events_session_time ON events (session_id, created_at, sequence);

-- +goose Down
DROP INDEX events_session_time;
