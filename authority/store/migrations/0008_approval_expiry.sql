-- An approval request nobody decided in time is recorded as `expired` by the background sweep
-- (authority/approvals/expiry.ts), with an `approval.resolved` audit event, so the timeout is part
-- of the chain and not only computed on read. Reads still treat a pending request past
-- expires_at as expired before the sweep gets to it.

ALTER TABLE approval_requests DROP CONSTRAINT approval_requests_status_check;
ALTER TABLE approval_requests ADD CONSTRAINT approval_requests_status_check CHECK (status IN ('pending', 'approved', 'rejected', 'expired'));
CREATE INDEX approval_requests_due ON approval_requests (expires_at) WHERE status = 'pending';
