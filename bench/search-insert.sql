-- What the search index costs PostgreSQL per inserted message, by index
-- layout (docs/benchmarks.md "Word pairs (2026-11-27, fifth round)"):
-- 50,000 messages copied from a grown store (bench/grow.sh fill, at
-- migration 13 or later) into fresh tables, one INSERT ... SELECT per
-- table, twice, with psql's timing on. Then the same with one-token
-- messages (aspbench's). Loopback database only; it drops what it makes.
--
--   psql postgres://postgres@127.0.0.1:5432/aspd_grow -f bench/search-insert.sql
\set ON_ERROR_STOP on
\timing on
DROP TABLE IF EXISTS si_src, si_three, si_four, si_apart, si_hashed;
CREATE TABLE si_src AS SELECT created_at, search_text, search_words, search_pairs,
        ARRAY(SELECT DISTINCT hashtext(x) & 65535 FROM unnest(tsvector_to_array(search_pairs)) x) AS hashed
    FROM events WHERE created_at > 1795000000000 - 40::bigint * 1100000 AND created_at <= 1795000000000 - 40::bigint * 1000000
        AND search_words IS NOT NULL LIMIT 50000;
CREATE TABLE si_three (LIKE si_src);
CREATE INDEX ON si_three USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops);
CREATE TABLE si_four (LIKE si_src);
CREATE INDEX ON si_four USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops,
    coalesce(search_pairs, aspd_search_pairs(search_words)));
CREATE TABLE si_apart (LIKE si_src);
CREATE INDEX ON si_apart USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops);
CREATE INDEX ON si_apart USING GIN (search_pairs);
CREATE TABLE si_hashed (LIKE si_src);
CREATE INDEX ON si_hashed USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops, hashed);
\echo 'grown messages: without pairs, pairs as a fourth column, pairs apart, pairs hashed (twice)'
INSERT INTO si_three SELECT * FROM si_src;
INSERT INTO si_four SELECT * FROM si_src;
INSERT INTO si_apart SELECT * FROM si_src;
INSERT INTO si_hashed SELECT * FROM si_src;
INSERT INTO si_three SELECT * FROM si_src;
INSERT INTO si_four SELECT * FROM si_src;
INSERT INTO si_apart SELECT * FROM si_src;
INSERT INTO si_hashed SELECT * FROM si_src;
TRUNCATE si_three, si_four;
\echo 'one-token messages: without pairs, pairs as a fourth column (twice)'
INSERT INTO si_three SELECT created_at, 'l4uh9x', to_tsvector('simple', 'l4uh9x'), ''::tsvector, '{}' FROM si_src;
INSERT INTO si_four SELECT created_at, 'l4uh9x', to_tsvector('simple', 'l4uh9x'), ''::tsvector, '{}' FROM si_src;
INSERT INTO si_three SELECT created_at, 'l4uh9x', to_tsvector('simple', 'l4uh9x'), ''::tsvector, '{}' FROM si_src;
INSERT INTO si_four SELECT created_at, 'l4uh9x', to_tsvector('simple', 'l4uh9x'), ''::tsvector, '{}' FROM si_src;
DROP TABLE si_src, si_three, si_four, si_apart, si_hashed;
