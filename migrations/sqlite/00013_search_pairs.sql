-- +goose Up
-- PostgreSQL's 00013 indexes the pairs of adjacent words, for phrases
-- (docs/search.md, "Word pairs"). SQLite's FTS5 tables hold positions and
-- answer phrases by themselves. This migration keeps the two dialects'
-- version numbers in step.
SELECT 1;

-- +goose Down
SELECT 1;
