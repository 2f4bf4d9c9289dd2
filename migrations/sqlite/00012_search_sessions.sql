-- +goose Up
-- PostgreSQL's 00012 indexes a session's events by time, for searches
-- with a participant filter (docs/search.md, "A participant's events").
-- SQLite's search reads its FTS5 tables' hits and needs none. This
-- migration keeps the two dialects' version numbers in step.
SELECT 1;

-- +goose Down
SELECT 1;
