-- Fencing lockd tokens in PostgreSQL (docs/fencing.md).
--
-- Install once per database:   psql "$DATABASE_URL" -f contrib/fencing/postgres.sql
--
-- lockd_fence(resource, token) records `token` as the highest seen for
-- `resource`, or raises SQLSTATE LK001 if a higher token was seen already.
-- Call it inside the writer's own transaction, before (or with) the write:
-- the fence row stays locked until that transaction ends, so the check and
-- the write commit together or fail together, and a stale holder's
-- transaction waits for the current holder's and then fails.
--
-- An UPDATE, from the shell (the token comes from `lockd exec`):
--
--   lockd exec acct -- sh -c 'psql "$DATABASE_URL" -v ON_ERROR_STOP=1 \
--       -v token="$LOCKD_FENCING_TOKEN" -f pay.sql'
--
--   -- pay.sql
--   BEGIN;
--   SELECT lockd_fence('acct', :'token');
--   UPDATE accounts SET balance = balance - 30 WHERE id = 'acct';
--   COMMIT;
--
-- An INSERT (the fence names the resource the row belongs to; here one
-- month's report, written by whoever holds the lock `report:2026-11`):
--
--   BEGIN;
--   SELECT lockd_fence('report:2026-11', :'token');
--   INSERT INTO reports (month, body) VALUES ('2026-11', :'body')
--     ON CONFLICT (month) DO UPDATE SET body = EXCLUDED.body;
--   COMMIT;
--
-- From a program: the same statements in one transaction, the token bound
-- as a parameter, as text (a u64 has no PostgreSQL integer type; never pass
-- it through a double):
--
--   BEGIN; SELECT lockd_fence($1, $2::text::numeric); UPDATE ...; COMMIT;
--
-- Tokens are u64 (lockd's are below 2^53, older stores' may be larger):
-- numeric(20, 0) holds every one exactly, where bigint stops at 2^63 - 1.
-- A token equal to the highest seen passes: one holder writes many times.

CREATE TABLE IF NOT EXISTS lockd_fence (
    resource   text PRIMARY KEY,
    token      numeric(20, 0) NOT NULL CHECK (token >= 1),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION lockd_fence(p_resource text, p_token numeric)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    highest numeric;
BEGIN
    IF p_resource IS NULL OR p_token IS NULL OR p_token < 1
       OR p_token > 18446744073709551615 OR p_token <> trunc(p_token) THEN
        RAISE EXCEPTION 'lockd_fence(%, %): the token must be a lockd fencing token, an integer from 1 to 2^64 - 1',
            quote_nullable(p_resource), quote_nullable(p_token)
            USING ERRCODE = '22023';
    END IF;
    -- Takes the fence row's lock until the caller's transaction ends; the
    -- WHERE is checked against the latest committed token.
    INSERT INTO lockd_fence AS f (resource, token)
    VALUES (p_resource, p_token)
    ON CONFLICT (resource) DO UPDATE
        SET token = EXCLUDED.token, updated_at = now()
        WHERE f.token <= EXCLUDED.token;
    IF NOT FOUND THEN
        SELECT f.token INTO highest FROM lockd_fence f WHERE f.resource = p_resource;
        RAISE EXCEPTION 'stale fencing token % for %: token % was already seen', p_token,
            quote_literal(p_resource), highest
            USING ERRCODE = 'LK001',
                  HINT = 'a newer holder of the lock has written since; this write is rejected and must not be retried with the same token';
    END IF;
END
$$;
