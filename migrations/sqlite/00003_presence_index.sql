-- +goose Up
-- The grace sweeper looks up agents offline since before a cutoff every
-- second; only offline agents in their grace window have offline_since set.
CREATE INDEX presence_offline_since ON presence (offline_since) WHERE offline_since IS NOT NULL;

-- +goose Down
DROP INDEX presence_offline_since;
