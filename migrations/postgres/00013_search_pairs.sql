-- +goose Up
-- Word pairs in the search index (docs/search.md, "Word pairs"). Every
-- event is also indexed under the pairs of its adjacent words, each the
-- last three characters of the first word and the first three of the
-- second ("widget release" gives 'get rel'), so that a phrase's
-- candidates are the events holding its pairs rather than every event
-- holding its words anywhere.
--
-- aspd writes an event's pairs into search_pairs (search.PairLexemes).
-- The index reads search_pairs or, where it is NULL (the events written
-- before this migration, and by an older aspd during a rolling upgrade),
-- computes them from search_words' positions (aspd_search_pairs), so no
-- event needs rewriting. Adding the column rewrites nothing.
--
-- The pairs are a fourth column of events_search, after the time keys,
-- the words and the trigrams, rather than an index of their own: a
-- second GIN index led by the time keys was smaller than events_search,
-- and the planner read a window's every event through it for a common
-- word (at ten million events, 208 ms for a window that events_search
-- answers in a few). Rebuilding events_search reads every event and, on a
-- store written before this migration, computes the pairs of each:
-- 118-177 s per million events on the 2-core test machine (63-84 s when
-- the events have their pairs; bench/search-build.sql), during which aspd (migrating before it
-- serves) does not answer.
-- +goose StatementBegin
CREATE FUNCTION aspd_search_pairs(words tsvector) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE COST 1000 AS $$
    SELECT array_to_tsvector(coalesce(array_agg(right(w, 3) || ' ' || left(n, 3)), '{}'))
    FROM (SELECT u.lexeme AS w, p, lead(u.lexeme) OVER (ORDER BY p) AS n, lead(p) OVER (ORDER BY p) AS np
          FROM unnest(words) u, unnest(u.positions) p) x
    WHERE np = p + 1
$$;
-- +goose StatementEnd
ALTER TABLE events ADD COLUMN search_pairs tsvector;
DROP INDEX events_search;
CREATE INDEX events_search ON events USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops,
    coalesce(search_pairs, aspd_search_pairs(search_words)));

-- +goose Down
DROP INDEX events_search;
CREATE INDEX events_search ON events USING GIN (aspd_search_keys(created_at), search_words, search_text gin_trgm_ops);
ALTER TABLE events DROP COLUMN search_pairs;
DROP FUNCTION aspd_search_pairs(tsvector);
