-- The binding hash over every bound fact of the action an approval request or an escalation is
-- for: the hash a permit backed by it carries (`bindingHash(org, bound_facts)`), the class's own
-- bound keys included. An evaluation with `reuse_approvals` finds the approval opened for exactly
-- its action, by the same requesting identity, through these indexes, in one query.
--
--   approval_requests.bound_facts_hash  set when evaluate opens the request.
--   escalations.bound_facts_hash        set when evaluate opens the escalation; NULL for
--                                       escalations created through the API (bound to no action).
--
-- Requests and escalations opened before this migration keep NULL: the hash is computed by the
-- authority, not by SQL. They still back a permit when named in `context.approvals` (their bound
-- facts are compared with the permit's there); they are only not found for reuse.

ALTER TABLE approval_requests ADD COLUMN bound_facts_hash text;
ALTER TABLE escalations ADD COLUMN bound_facts_hash text;

CREATE INDEX approval_requests_for_reuse ON approval_requests (org_id, bound_facts_hash, requested_by, created_at DESC)
  WHERE bound_facts_hash IS NOT NULL;
CREATE INDEX escalations_for_reuse ON escalations (org_id, bound_facts_hash, creator_identity, created_at DESC)
  WHERE bound_facts_hash IS NOT NULL;
