-- What the word pairs cost on disk and in an index build (docs/benchmarks.md
-- "Word pairs (2026-11-27, fifth round)", docs/storage.md migration 13):
-- a million grown messages (bench/grow.sh fill, 10M events, migration 13
-- or later) copied into tables of their own; the pairs' average size; then
-- events_search built without the pairs, with them read from the column,
-- and with them computed from the words' positions (a store written before
-- migration 13), with psql's timing on. Loopback database only; it drops
-- what it makes. About 5 minutes on the 2-core test machine.
--
--   psql postgres://postgres@127.0.0.1:5432/aspd_grow -f bench/search-build.sql
\set ON_ERROR_STOP on
\timing on
SET maintenance_work_mem = '512MB';
DROP TABLE IF EXISTS sb_new, sb_old;
CREATE TABLE sb_new AS SELECT created_at, search_text, search_words, search_pairs FROM events
    WHERE created_at > 1795000000000 - 40::bigint * 2000000 AND created_at <= 1795000000000 - 40::bigint * 1000000;
CREATE TABLE sb_old AS SELECT created_at, search_text, search_words, NULL::tsvector AS search_pairs FROM sb_new;
SELECT count(*) AS events, avg(pg_column_size(search_pairs))::int AS pairs_bytes, avg(pg_column_size(search_words))::int AS words_bytes FROM sb_new;
\echo 'events_search without the pairs'
CREATE INDEX sb_three ON sb_new USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops);
DROP INDEX sb_three;
\echo 'events_search with the pairs from the column'
CREATE INDEX sb_four ON sb_new USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops,
    coalesce(search_pairs, aspd_search_pairs(search_words)));
\echo 'events_search with the pairs computed (a store written before migration 13)'
CREATE INDEX sb_computed ON sb_old USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops,
    coalesce(search_pairs, aspd_search_pairs(search_words)));
SELECT pg_relation_size('sb_four') AS with_pairs_bytes, pg_relation_size('sb_computed') AS computed_bytes;
DROP TABLE sb_new, sb_old;
