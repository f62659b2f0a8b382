-- Human approvals (authority/approvals/).
--
--   approval_requests  opened by an evaluation that decided `hold`, bound to the action's binding
--                      hash; resolved (approve / reject) by someone with approvals:write. `expired`
--                      is not stored: a pending request past expires_at is expired.
--   approval_uses      the permit each approval (an approval request or an escalation) backed. Its
--                      primary key is what makes an approval good for one permit only.

CREATE TABLE approval_requests (
  id             uuid PRIMARY KEY,
  org_id         uuid NOT NULL REFERENCES organizations (id),
  -- Written in the same transaction as its evaluation, which is inserted first or after.
  evaluation_id  uuid NOT NULL REFERENCES evaluations (id) DEFERRABLE INITIALLY DEFERRED,
  request_id     text NOT NULL,
  action_type    text NOT NULL,
  actor_id       text NOT NULL,
  binding_hash   text NOT NULL,
  risk_score     double precision NOT NULL,
  reason_codes   text[] NOT NULL,
  status         text NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
  expires_at     timestamptz NOT NULL,
  created_at     timestamptz NOT NULL,
  resolved_at    timestamptz,
  -- Who resolved it: the user id of a user token, or api_key:<id>.
  resolved_by    text,
  note           text
);
CREATE INDEX approval_requests_by_org_time ON approval_requests (org_id, created_at DESC, id DESC);

CREATE TABLE approval_uses (
  approval_id    text PRIMARY KEY,
  kind           text NOT NULL CHECK (kind IN ('approval', 'escalation')),
  org_id         uuid NOT NULL REFERENCES organizations (id),
  permit_id      text NOT NULL REFERENCES permits (id) DEFERRABLE INITIALLY DEFERRED,
  evaluation_id  uuid NOT NULL,
  used_at        timestamptz NOT NULL
);
