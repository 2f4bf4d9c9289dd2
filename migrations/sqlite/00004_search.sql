-- +goose Up
-- Transcript search (docs/search.md). search_text is an event's indexed
-- text, extracted by aspd (internal/search.Extract) and written by the
-- INSERT that appends the event: '' for event types that are not indexed,
-- NULL only for events written before this migration, which aspd fills in
-- (in batches, through events_search_pending) when it opens the store.
--
-- Two FTS5 indexes over it, external-content tables (the text is stored
-- once, in events; the indexes hold only their terms), kept in step by
-- the triggers below: events_words (unicode61, diacritics kept, so that a
-- word matches what PostgreSQL's simple configuration matches) for words
-- and phrases, events_trigram for substrings (partial words, e-mail
-- addresses, URLs, handles). Their rowids are events' rowids: after a
-- VACUUM, which may renumber them, rebuild both (docs/search.md).
ALTER TABLE events ADD COLUMN search_text TEXT;
CREATE INDEX events_search_pending ON events (session_id, sequence) WHERE search_text IS NULL;
CREATE VIRTUAL TABLE events_words USING fts5(search_text, content='events', tokenize='unicode61 remove_diacritics 0');
CREATE VIRTUAL TABLE events_trigram USING fts5(search_text, content='events', tokenize='trigram');

-- +goose StatementBegin
CREATE TRIGGER events_search_insert AFTER INSERT ON events WHEN new.search_text <> '' BEGIN
    INSERT INTO events_words (rowid, search_text) VALUES (new.rowid, new.search_text);
    INSERT INTO events_trigram (rowid, search_text) VALUES (new.rowid, new.search_text);
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER events_search_update AFTER UPDATE OF search_text ON events BEGIN
    INSERT INTO events_words (events_words, rowid, search_text) SELECT 'delete', old.rowid, old.search_text WHERE old.search_text <> '';
    INSERT INTO events_trigram (events_trigram, rowid, search_text) SELECT 'delete', old.rowid, old.search_text WHERE old.search_text <> '';
    INSERT INTO events_words (rowid, search_text) SELECT new.rowid, new.search_text WHERE new.search_text <> '';
    INSERT INTO events_trigram (rowid, search_text) SELECT new.rowid, new.search_text WHERE new.search_text <> '';
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER events_search_delete AFTER DELETE ON events WHEN old.search_text <> '' BEGIN
    INSERT INTO events_words (events_words, rowid, search_text) VALUES ('delete', old.rowid, old.search_text);
    INSERT INTO events_trigram (events_trigram, rowid, search_text) VALUES ('delete', old.rowid, old.search_text);
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER events_search_delete;
DROP TRIGGER events_search_update;
DROP TRIGGER events_search_insert;
DROP TABLE events_trigram;
DROP TABLE events_words;
DROP INDEX events_search_pending;
ALTER TABLE events DROP COLUMN search_text;
