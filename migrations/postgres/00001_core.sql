-- +goose Up
-- Agents. token_hash is SHA-256 of the bearer token; the token itself is never stored.
CREATE TABLE agents (
    handle         TEXT PRIMARY KEY,
    owner          TEXT NOT NULL,
    inbound_policy TEXT NOT NULL CHECK (inbound_policy IN ('allowlist', 'open')),
    token_hash     BYTEA UNIQUE,
    roles          TEXT NOT NULL DEFAULT '[]',
    created_at     BIGINT NOT NULL,
    deleted_at     BIGINT
);
CREATE INDEX agents_owner ON agents (owner);

CREATE TABLE allowlist_entries (
    handle TEXT NOT NULL REFERENCES agents (handle) ON DELETE CASCADE,
    entry  TEXT NOT NULL,
    PRIMARY KEY (handle, entry)
);

CREATE TABLE blocks (
    blocker    TEXT NOT NULL REFERENCES agents (handle) ON DELETE CASCADE,
    blocked    TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (blocker, blocked)
);
CREATE INDEX blocks_blocked ON blocks (blocked);

-- Sessions. last_seq is the per-session event counter, bumped under the row
-- lock in the transaction that appends the events: gap-free by construction.
CREATE TABLE sessions (
    id         TEXT PRIMARY KEY,
    topic      TEXT NOT NULL DEFAULT '',
    state      TEXT NOT NULL CHECK (state IN ('active', 'ended')),
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    ended_at   BIGINT,
    last_seq   BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX sessions_created_at ON sessions (created_at);

-- Participants. visible_through is the replay horizon: the highest sequence
-- whose events the participant may read (9223372036854775807 while joined).
-- last_change_seq is the sequence of the last event that changed its status.
CREATE TABLE participants (
    session_id      TEXT NOT NULL REFERENCES sessions (id),
    handle          TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('invited', 'joined', 'left')),
    visible_through BIGINT NOT NULL DEFAULT 0,
    last_change_seq BIGINT NOT NULL DEFAULT 0,
    disconnected    BOOLEAN NOT NULL DEFAULT FALSE,
    invited_at      BIGINT,
    joined_at       BIGINT,
    left_at         BIGINT,
    PRIMARY KEY (session_id, handle)
);
CREATE INDEX participants_handle ON participants (handle, status);

-- The durable log: every event in its wire shape (body), plus the few
-- columns eligibility needs: subject (the agent an event is about) and
-- audience (agents below their horizon who still see this event).
CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    sequence   BIGINT NOT NULL,
    event_id   TEXT NOT NULL UNIQUE,
    type       TEXT NOT NULL,
    subject    TEXT NOT NULL DEFAULT '',
    audience   TEXT NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, sequence)
);
CREATE INDEX events_created_at ON events (created_at);

-- Idempotency: one row per (session, sender, key) for messages and per
-- (creator, key) for session creation, written in the insert's transaction.
CREATE TABLE message_keys (
    session_id   TEXT NOT NULL,
    sender       TEXT NOT NULL,
    key          TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    sequence     BIGINT NOT NULL,
    PRIMARY KEY (session_id, sender, key)
);

CREATE TABLE session_keys (
    creator      TEXT NOT NULL,
    key          TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    sequence     BIGINT,
    PRIMARY KEY (creator, key)
);

-- Delivery cursors: the highest sequence of each session delivered to the agent.
CREATE TABLE cursors (
    handle     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    PRIMARY KEY (handle, session_id)
);

-- Presence, for the grace window: online agents have offline_since NULL.
CREATE TABLE presence (
    handle        TEXT PRIMARY KEY,
    online        BOOLEAN NOT NULL,
    offline_since BIGINT
);

-- +goose Down
DROP TABLE presence;
DROP TABLE cursors;
DROP TABLE session_keys;
DROP TABLE message_keys;
DROP TABLE events;
DROP TABLE participants;
DROP TABLE sessions;
DROP TABLE blocks;
DROP TABLE allowlist_entries;
DROP TABLE agents;
