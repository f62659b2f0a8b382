-- The actors an API key may speak for (authority/api-keys/actors.ts): exact actor ids, prefixes
-- ending in `*` (`agent:*`), or `*` alone. Evaluate, its stream, the AuthZEN evaluations and
-- action search, and escalation creation refuse (403) an actor the key's list does not match.
-- NULL is any actor: every key made before this migration keeps doing what it did.

ALTER TABLE api_keys ADD COLUMN allowed_actors text[];
