-- Two costs of every evaluation's write, found in a profile of Postgres under the evaluate
-- benchmark (docs/architecture.md, "The evaluation's write in Postgres"):
--
-- 1. The chain's hashes were checked with a regular expression, `~ '^[0-9a-f]{64}$'`. Its four
--    matches per evaluation (each event's hash and previous hash) took about 7 % of Postgres's
--    CPU. The same rule without a regular expression: 64 characters, all of them lower-case hex
--    digits (`ltrim` strips every leading character of the set; nothing may be left).
--
--    NOT VALID: the rows already stored were held to the same rule by the constraint each one
--    replaces, and checking them again would scan the audit log under the exclusive lock this
--    migration holds, while every replica's evaluations wait. New and updated rows are checked.
--
-- 2. plpgsql planned the statements of countersign_store_evaluations again on every call (custom
--    plans for each batch's values: about 7 % of Postgres's CPU). Their plans do not depend on a
--    batch's contents (a batch is read from its JSON, and every lookup is by key), so the
--    function uses the generic plan each statement caches on its first call.

ALTER TABLE audit_events
  DROP CONSTRAINT audit_events_hash_check,
  DROP CONSTRAINT audit_events_previous_hash_check,
  ADD CONSTRAINT audit_events_hash_check CHECK (length(hash) = 64 AND ltrim(hash, '0123456789abcdef') = '') NOT VALID,
  ADD CONSTRAINT audit_events_previous_hash_check CHECK (length(previous_hash) = 64 AND ltrim(previous_hash, '0123456789abcdef') = '') NOT VALID;

ALTER TABLE audit_chain_heads
  DROP CONSTRAINT audit_chain_heads_head_hash_check,
  ADD CONSTRAINT audit_chain_heads_head_hash_check CHECK (length(head_hash) = 64 AND ltrim(head_hash, '0123456789abcdef') = '') NOT VALID;

ALTER TABLE audit_checkpoints
  DROP CONSTRAINT audit_checkpoints_head_hash_check,
  ADD CONSTRAINT audit_checkpoints_head_hash_check CHECK (length(head_hash) = 64 AND ltrim(head_hash, '0123456789abcdef') = '') NOT VALID;

ALTER FUNCTION countersign_store_evaluations(jsonb, jsonb, jsonb, timestamptz, text) SET plan_cache_mode = force_generic_plan;
