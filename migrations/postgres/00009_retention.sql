-- +goose Up
-- Retention (docs/operators.md, "Redaction and retention"): the sweeper
-- looks for sessions ended before a cutoff, oldest first. Redaction needs
-- no column: the tombstone is in the event's body (store/redact.go).
CREATE INDEX sessions_ended_at ON sessions (ended_at) WHERE state = 'ended';

-- +goose Down
DROP INDEX sessions_ended_at;
