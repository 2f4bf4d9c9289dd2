-- +goose Up
-- Named operator tokens (docs/operators.md "Operator tokens"): each is
-- stored as the SHA-256 of its secret, like agent tokens, and carries a
-- scope: "read" (queries and the console) or "admin" (everything). The
-- bootstrap token (--admin-token) is not a row: it lives in aspd's
-- configuration and is named "bootstrap".
CREATE TABLE operator_tokens (
    name         TEXT PRIMARY KEY,
    scope        TEXT NOT NULL,
    token_hash   BLOB NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    rotated_at   INTEGER,
    last_used_at INTEGER
);

-- The audit log (docs/operators.md "Audit log"): one row per operator
-- change, written in the change's own transaction. detail is a JSON object
-- that never holds a secret. Paged newest first by id.
CREATE TABLE audit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    actor      TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL DEFAULT '',
    request_id TEXT NOT NULL DEFAULT '',
    detail     TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_action ON audit_log (action, id);
CREATE INDEX audit_log_target ON audit_log (target, id);

-- +goose Down
DROP TABLE audit_log;
DROP TABLE operator_tokens;
