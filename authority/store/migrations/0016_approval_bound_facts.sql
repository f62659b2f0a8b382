-- The bound facts of the action an approval request or an escalation is for, kept with it:
-- `action_type`, `actor_id`, whichever of `environment`, `target`, `amount_usd`, `account_code`
-- the action had, and the keys its action class binds. Approvers read them with the approval
-- (approvals:read), without the audit log. Only the bound facts are kept, never the rest of the
-- evaluation's context, which may hold anything its caller sent.
--
--   approval_requests.bound_facts  always set.
--   escalations.bound_facts        set for escalations opened by evaluate (those with a binding
--                                  hash); NULL for escalations created through the API, which
--                                  are bound to no action.
--
-- Requests and escalations opened before this migration take theirs from their evaluation's
-- `evaluation.decided` audit event, which names the bound facts and holds the context.

ALTER TABLE approval_requests ADD COLUMN bound_facts jsonb;
ALTER TABLE escalations ADD COLUMN bound_facts jsonb;

-- One row per evaluation behind an existing request or escalation, with its bound facts in the
-- form the binding gives them (a target is bound as its type and id only).
CREATE TEMP TABLE held_evaluation_facts ON COMMIT DROP AS
SELECT e.org_id,
       e.resource_id AS evaluation_id,
       (SELECT jsonb_object_agg(fact.name, fact.value)
          FROM (SELECT name,
                       CASE name
                         WHEN 'action_type' THEN d -> 'action_type'
                         WHEN 'actor_id' THEN d -> 'actor_id'
                         WHEN 'target' THEN jsonb_build_object('type', d #> '{context,target,type}', 'id', d #> '{context,target,id}')
                         ELSE d -> 'context' -> name
                       END AS value
                  FROM jsonb_array_elements_text(
                         CASE WHEN jsonb_typeof(d -> 'bound_facts') = 'array' THEN d -> 'bound_facts'
                              ELSE '["action_type", "actor_id", "environment", "target", "amount_usd", "account_code"]'::jsonb
                         END) AS name) AS fact
         WHERE fact.value IS NOT NULL AND (fact.name <> 'target' OR d #> '{context,target}' IS NOT NULL)) AS facts
  FROM audit_events e
  CROSS JOIN LATERAL (SELECT e.payload -> 'details' AS d) AS payload
 WHERE e.type = 'evaluation.decided'
   AND (e.org_id, e.resource_id) IN (
         SELECT org_id, evaluation_id::text FROM approval_requests
         UNION
         SELECT org_id, metadata ->> 'evaluation_id' FROM escalations WHERE binding_hash IS NOT NULL);

UPDATE approval_requests r SET bound_facts = f.facts
  FROM held_evaluation_facts f
 WHERE f.org_id = r.org_id AND f.evaluation_id = r.evaluation_id::text;
-- An evaluation is recorded with its request, so none should be missing; if one is, the request
-- still says what the approval row itself knows.
UPDATE approval_requests SET bound_facts = jsonb_build_object('action_type', action_type, 'actor_id', actor_id)
 WHERE bound_facts IS NULL;
ALTER TABLE approval_requests ALTER COLUMN bound_facts SET NOT NULL;

UPDATE escalations x SET bound_facts = f.facts
  FROM held_evaluation_facts f
 WHERE x.binding_hash IS NOT NULL AND f.org_id = x.org_id AND f.evaluation_id = x.metadata ->> 'evaluation_id';
UPDATE escalations SET bound_facts = jsonb_build_object('action_type', proposed_action -> 'action_type', 'actor_id', agent_id)
 WHERE binding_hash IS NOT NULL AND bound_facts IS NULL;
ALTER TABLE escalations ADD CONSTRAINT escalations_bound_facts_with_binding CHECK ((binding_hash IS NULL) = (bound_facts IS NULL));
