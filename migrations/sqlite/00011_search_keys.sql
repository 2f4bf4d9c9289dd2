-- +goose Up
-- PostgreSQL's 00011 adds time keys to its search index (docs/search.md,
-- "Time windows"). SQLite's FTS5 tables need none: their hits are in rowid
-- order, which is the order the events were written in. This migration
-- keeps the two dialects' version numbers in step.
SELECT 1;

-- +goose Down
SELECT 1;
