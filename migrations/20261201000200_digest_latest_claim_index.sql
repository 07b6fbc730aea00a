-- The digest claim reads each org's latest scheduled or skipped week (to record every week an
-- outage missed): one index probe per org per tick.
create index digest_sends_org_latest on digest_sends (org_id, scheduled_at desc) where kind <> 'manual';
