-- +goose Up
-- Word pairs in a search index of their own (docs/search.md, "Word
-- pairs"). Every event is indexed under the pairs of its adjacent words,
-- each the last three characters of the first word and the first three of
-- the second ("widget release" gives 'get rel'), with its time keys, so
-- that a phrase's candidates are the events holding its pairs rather
-- than every event holding its words anywhere.
--
-- aspd writes an event's pairs into search_pairs (search.PairLexemes).
-- The index reads search_pairs or, where it is NULL (the events written
-- before this migration, and by an older aspd during a rolling upgrade),
-- computes them from search_words' positions (aspd_search_pairs), so no
-- event needs rewriting. Adding the column rewrites nothing; building the
-- index reads every event and computes the pairs of each: about 40 s per
-- million events on the 2-core test machine, during which aspd (migrating
-- before it serves) does not answer.
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
CREATE INDEX events_search_pairs ON events USING GIN (aspd_search_keys(created_at), coalesce(search_pairs, aspd_search_pairs(search_words)));

-- +goose Down
DROP INDEX events_search_pairs;
ALTER TABLE events DROP COLUMN search_pairs;
DROP FUNCTION aspd_search_pairs(tsvector);
