-- +goose Up
-- Time keys in the search index (docs/search.md, "Time windows"). Every
-- event is indexed under six keys, one per window size: its created_at
-- (epoch ms) shifted right by 16, 20, 24, 28, 32 and 36 bits (about a
-- minute, 17 minutes, 4.7 hours, 3.1 days, 50 days and 2.2 years), the
-- window size's number (0-5) in the top byte. A search asks the index for
-- "this term's hits within this window" (keys @> ARRAY[k]), and GIN
-- intersects the term's posting lists with the window's, so that the
-- newest hits of a common word cost the events of a window, not every hit
-- in the log. store/search.go (searchKey) computes the same keys. The keys
-- are the index's first column: GIN checks a scan's keys in column order,
-- and a window's key, checked first, lets the term's posting lists skip
-- to the window (checked last, a term without hits read its lists whole
-- in every window: an e-mail address at ten million events, 320 ms).
--
-- One GIN index over the keys, the word vector and the trigrams replaces
-- the two search indexes: each predicate of a search is answered together
-- with a window's key in one index scan. Building it reads every event:
-- about 25 s per million events on the 2-core test machine, during which
-- aspd (migrating before it serves) does not answer.
-- +goose StatementBegin
CREATE FUNCTION aspd_search_keys(created_at BIGINT) RETURNS BIGINT[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY[created_at >> 16,
        (1::BIGINT << 56) | (created_at >> 20),
        (2::BIGINT << 56) | (created_at >> 24),
        (3::BIGINT << 56) | (created_at >> 28),
        (4::BIGINT << 56) | (created_at >> 32),
        (5::BIGINT << 56) | (created_at >> 36)]
$$;
-- +goose StatementEnd
CREATE INDEX events_search ON events USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops);
DROP INDEX events_search_words;
DROP INDEX events_search_trigram;

-- +goose Down
CREATE INDEX events_search_words ON events USING GIN (search_words);
CREATE INDEX events_search_trigram ON events USING GIN (search_text gin_trgm_ops);
DROP INDEX events_search;
DROP FUNCTION aspd_search_keys(BIGINT);
