-- Grows an aspd PostgreSQL store by the events g = :from .. :to - 1
-- (bench/grow.sh runs it; docs/benchmarks.md "Growth: 1M and 10M events").
-- The rows are the ones aspd itself writes (store/sessiontx.go): the
-- event's wire body, byte for byte in aspd's compact JSON shape, its
-- subject, and the search columns (search_text as search.Extract gives it
-- for a plain-string content, search_words as to_tsvector('simple', the
-- text's lower-case words), search_pairs their word pairs, as
-- search.PairLexemes gives them). Sessions of 100 events (2 session.invited,
-- 2 session.joined, 96 session.message), 100 sessions active at a time,
-- among 1,000 agents @grow.a0 .. @grow.a999. Time runs backwards with g
-- (event g is 40 ms older than g - 1, the newest ends an hour before the
-- fill), so that a later, larger fill adds older history under the same
-- sessions' numbering and the bench's own traffic stays the newest.
--
-- Text: 8-31 words per message, 70% from a list of common English words
-- picked log-uniformly (so "the" is in most messages and the last of the
-- list in few), 30% from 8,000 syllable words (each in about 0.1% of the
-- messages at any size); 5% of messages hold an e-mail address, 3% a URL,
-- 5% a handle; "quokka" is in one message of 50,000 (the rare term);
-- "kubernetes" in none.
--
-- The secondary indexes of events are dropped before the insert and
-- rebuilt after it from their own definitions (pg_indexes), which is how
-- the migration builds them on a store that already has rows.
\set ON_ERROR_STOP on
SET synchronous_commit = off;
SET maintenance_work_mem = '512MB';

CREATE TEMP TABLE grow_indexes AS
    SELECT indexname, indexdef FROM pg_indexes i
    WHERE tablename = 'events' AND NOT EXISTS (
        SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname);
SELECT format('DROP INDEX %I', indexname) FROM grow_indexes \gexec

INSERT INTO agents (handle, owner, inbound_policy, created_at)
SELECT '@grow.a' || n, 'grow', 'open', 1700000000000 FROM generate_series(0, 999) n
ON CONFLICT DO NOTHING;

CREATE TEMP TABLE grow_vocab AS SELECT string_to_array(
    'the to and a of in is for that it on we with this be you are as have not will at can from by '
    'release widget deploy invoice refund build test review report customer order team plan update '
    'please thanks need today tomorrow friday meeting notes draft ticket issue fix bug change version '
    'server client data agent session message status check ready done broken blocked queue budget '
    'schedule contract payment shipment warehouse forecast quarter roadmap incident latency', ' ') AS words,
    string_to_array('ka lo mi ne ru ta vo se pa di go li mu re so fa ni be tu ze', ' ') AS syl;
-- A pool of 100,000 message texts, each message takes one (by g), so that
-- the fill costs string concatenation per row, not random text.
CREATE TEMP TABLE grow_texts AS SELECT t, (
        SELECT string_agg(CASE WHEN random() < 0.7
                THEN v.words[floor(exp(random() * ln(array_length(v.words, 1) + 1)))::int]
                ELSE (SELECT v.syl[1 + r % 20] || v.syl[1 + r / 20 % 20] || v.syl[1 + r / 400]
                      FROM (SELECT floor(random() * 8000)::int + 0 * k AS r) x)
            END, ' ')
        FROM generate_series(1, 8 + (t * 7919) % 24) k, grow_vocab v) AS txt
    FROM generate_series(0, 99999) t;
ALTER TABLE grow_texts ADD PRIMARY KEY (t);

INSERT INTO sessions (id, topic, state, created_by, created_at, last_seq)
SELECT 'sess_' || lpad(s::text, 26, '0'), 'grown session ' || s, 'active', '@grow.a' || ((s * 3) % 1000),
       1795000000000 - ((s / 100) * 10000 + 9900 + s % 100) * 40, 100
FROM generate_series(:from / 100, :to / 100 - 1) s;

INSERT INTO participants (session_id, handle, status, visible_through, last_change_seq, invited_at, joined_at)
SELECT 'sess_' || lpad(s::text, 26, '0'), '@grow.a' || ((s * 3 + m) % 1000), 'joined', 9223372036854775807,
       CASE m WHEN 0 THEN 0 ELSE 2 + m END,
       CASE m WHEN 0 THEN NULL ELSE 1795000000000 - ((s / 100) * 10000 + 9900 + s % 100) * 40 END,
       1795000000000 - ((s / 100) * 10000 + 9900 + s % 100) * 40
FROM generate_series(:from / 100, :to / 100 - 1) s, generate_series(0, 2) m;

-- One row per event: g's session, sequence, time, members and text.
INSERT INTO events (session_id, sequence, event_id, type, subject, audience, created_at, body, search_text, search_words, search_pairs)
SELECT sid, q, eid, typ, subj, '', ts, body, txt, w, coalesce(aspd_search_pairs(w), '')
FROM (SELECT *, to_tsvector('simple', NULLIF(lower(regexp_replace(txt, '[^[:alnum:]]+', ' ', 'g')), '')) AS w FROM (
    SELECT sid, q, eid, typ, subj, ts, txt,
        '{"type":"' || typ || '","session_id":"' || sid || '","event_id":"' || eid || '","sequence":' || q ||
        ',"created_at":' || ts || ',"payload":' || CASE typ
            WHEN 'session.invited' THEN '{"invitee":"' || subj || '","by":"' || m0 || '","topic":"grown session ' || s || '"}'
            WHEN 'session.joined' THEN '{"agent":"' || subj || '"}'
            ELSE '{"id":"msg_' || lpad(g::text, 26, '0') || '","session_id":"' || sid || '","sender":"' || subj ||
                '","sequence":' || q || ',"content":' || to_json(txt)::text || ',"created_at":' || ts || '}'
        END || '}' AS body
    FROM (
        SELECT g, s, q, sid, eid, ts, m0,
            CASE WHEN q <= 2 THEN 'session.invited' WHEN q <= 4 THEN 'session.joined' ELSE 'session.message' END AS typ,
            CASE WHEN q <= 4 THEN '@grow.a' || ((s * 3 + 1 + (q - 1) % 2) % 1000) ELSE '@grow.a' || ((s * 3 + q % 3) % 1000) END AS subj,
            CASE WHEN q <= 4 THEN '' ELSE (SELECT txt FROM grow_texts WHERE t = (g * 7919) % 100000)
              || CASE WHEN g % 20 = 3 THEN ' write to user' || (g * 31 % 5000) || '@example.com' ELSE '' END
              || CASE WHEN g % 33 = 5 THEN ' see https://tickets.example.org/issue/' || (g * 17 % 100000) ELSE '' END
              || CASE WHEN g % 20 = 11 THEN ' ask @acme.agent' || (g * 13 % 1000) ELSE '' END
              || CASE WHEN g % 50000 = 777 THEN ' the quokka report' ELSE '' END
            END AS txt
        FROM (
            SELECT g, g / 10000 * 100 + g % 100 AS s, 100 - (g % 10000) / 100 AS q,
                'sess_' || lpad((g / 10000 * 100 + g % 100)::text, 26, '0') AS sid,
                'evt_' || lpad(g::text, 26, '0') AS eid,
                1795000000000 - g * 40 AS ts,
                '@grow.a' || (((g / 10000 * 100 + g % 100) * 3) % 1000) AS m0
            FROM generate_series(:from::bigint, :to::bigint - 1) g
        ) k0
    ) k1
) k2) k3
ORDER BY ts;

SELECT indexdef FROM grow_indexes \gexec
ANALYZE events;
ANALYZE sessions;
ANALYZE participants;
