-- +goose Up
-- Chorus webhooks (docs/chorus.md). One endpoint per agent: the connection
-- string and the signing secret are sealed with AES-GCM under the server's
-- Chorus key, so a dump of this table does not reveal them.
CREATE TABLE chorus_endpoints (
    handle          TEXT PRIMARY KEY,
    url_sealed      BYTEA NOT NULL,
    secret_sealed   BYTEA NOT NULL,
    created_at      BIGINT NOT NULL,
    failing         BOOLEAN NOT NULL DEFAULT FALSE,
    failing_since   BIGINT,
    last_success_at BIGINT,
    last_error      TEXT NOT NULL DEFAULT ''
);

-- How far the Chorus worker has gone in each of an agent's sessions: every
-- event up to seq was delivered (2xx), dead-lettered, or not eligible.
-- reset_at is the agent's own join that last restarted the pass at 1.
CREATE TABLE chorus_cursors (
    handle     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    reset_at   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (handle, session_id)
);

-- The outbox: one row per (agent, session, sequence) being or having been
-- delivered. id is the stable webhook-id. At most one pending row per
-- (handle, session_id): a session's next event waits for the previous one.
-- leased_until/leased_by let several nodes share the table.
CREATE TABLE chorus_deliveries (
    id              TEXT PRIMARY KEY,
    handle          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    sequence        BIGINT NOT NULL,
    event_type      TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_attempt_at BIGINT,
    last_status     INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT NOT NULL DEFAULT '',
    agent_status    TEXT NOT NULL DEFAULT '',
    agent_error     TEXT NOT NULL DEFAULT '',
    leased_until    BIGINT,
    leased_by       TEXT,
    created_at      BIGINT NOT NULL,
    finished_at     BIGINT,
    UNIQUE (handle, session_id, sequence)
);
CREATE INDEX chorus_deliveries_due ON chorus_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX chorus_deliveries_agent ON chorus_deliveries (handle, created_at);
CREATE INDEX chorus_deliveries_finished ON chorus_deliveries (finished_at) WHERE state <> 'pending';

-- Callback URLs: only the SHA-256 of the token is stored.
CREATE TABLE chorus_callbacks (
    token_hash  BYTEA PRIMARY KEY,
    handle      TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX chorus_callbacks_expires ON chorus_callbacks (expires_at);

-- Short-lived MCP tokens handed to webhook agents; hashed like agent tokens.
CREATE TABLE chorus_mcp_tokens (
    token_hash BYTEA PRIMARY KEY,
    handle     TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX chorus_mcp_tokens_handle ON chorus_mcp_tokens (handle);

-- +goose Down
DROP TABLE chorus_mcp_tokens;
DROP TABLE chorus_callbacks;
DROP TABLE chorus_deliveries;
DROP TABLE chorus_cursors;
DROP TABLE chorus_endpoints;
