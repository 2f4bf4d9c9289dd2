-- +goose Up
-- The member cache's version (store/members.go): every write of a
-- session's participant rows moves it, so the message path can trust its
-- in-memory copy of the participants while the version it locks is the
-- one it cached, on one node or several.
ALTER TABLE sessions ADD COLUMN members_version BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE sessions DROP COLUMN members_version;
