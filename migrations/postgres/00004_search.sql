-- +goose Up
-- Transcript search (docs/search.md). search_text is an event's indexed
-- text, extracted by aspd (internal/search.Extract) and written by the
-- INSERT that appends the event: '' for event types that are not indexed,
-- NULL only for events written before this migration, which aspd fills in
-- (in batches, through events_search_pending) when it opens the store.
-- search_words is the word index's input: the text's words as aspd splits
-- them, in a tsvector of the simple configuration (no stemming, no stop
-- words), queried with websearch_to_tsquery('simple', ...). The trigram
-- index finds what words cannot: partial words, e-mail addresses, URLs,
-- handles (ILIKE '%term%').
--
-- pg_trgm ships with PostgreSQL (contrib). Creating it needs the CREATE
-- privilege on the database (PostgreSQL 13+: pg_trgm is a trusted
-- extension); otherwise an operator creates it once beforehand.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
ALTER TABLE events ADD COLUMN search_text TEXT;
ALTER TABLE events ADD COLUMN search_words TSVECTOR;
CREATE INDEX events_search_pending ON events (session_id, sequence) WHERE search_text IS NULL;
CREATE INDEX events_search_words ON events USING GIN (search_words);
CREATE INDEX events_search_trigram ON events USING GIN (search_text gin_trgm_ops);

-- +goose Down
DROP INDEX events_search_trigram;
DROP INDEX events_search_words;
DROP INDEX events_search_pending;
ALTER TABLE events DROP COLUMN search_words;
ALTER TABLE events DROP COLUMN search_text;
