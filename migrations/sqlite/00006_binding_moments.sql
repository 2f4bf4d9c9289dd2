-- +goose Up
-- Binding moments (docs/decisions.md). One row per envelope carried in a
-- session message, keyed by that message's id, written in the transaction
-- that appends the message; its resolution is written onto the row in the
-- transaction that appends the resolution message. "outcome IS NULL" is
-- open: the resolving UPDATE requires it, so the first resolution wins.
CREATE TABLE binding_moments (
    moment_id     TEXT PRIMARY KEY,
    session_id    TEXT NOT NULL REFERENCES sessions (id),
    sequence      BIGINT NOT NULL,
    emitter       TEXT NOT NULL,
    resolver      TEXT,
    option_count  INTEGER NOT NULL,
    free_text     INTEGER NOT NULL,
    dialogue      INTEGER NOT NULL,
    envelope      TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    outcome       TEXT CHECK (outcome IN ('selected', 'answered', 'referred_back')),
    option_idx    INTEGER,
    answer        TEXT,
    objection     TEXT,
    resolved_by   TEXT,
    resolution_id TEXT,
    resolution_seq BIGINT,
    resolved_at   BIGINT
);
-- pending_decisions: the open moments of the caller's sessions.
CREATE INDEX binding_moments_open ON binding_moments (session_id) WHERE outcome IS NULL;

-- +goose Down
DROP TABLE binding_moments;
