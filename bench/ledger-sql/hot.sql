-- The "HOT claim" variant: no index names a column the claim changes (status, attempt,
-- claimed_by, lease_until, updated_at), so the claim can be a heap-only update; the open rows
-- are found by `finished_at is null`, finished states by an `outcome` column set with the
-- outcome, and leases live in a narrow table, one row per claim. Fill factor 50 leaves each
-- page room for its rows' claimed versions.
drop index deliveries_groups, deliveries_due, deliveries_lease, deliveries_campaign,
           deliveries_delivered_to, deliveries_needing_attention;
alter table deliveries add column outcome text;
create index deliveries_groups on deliveries (priority, org_id, coalesce(campaign_id, 0), next_attempt_at)
    where finished_at is null;
create index deliveries_due on deliveries (next_attempt_at) where finished_at is null;
create index deliveries_campaign on deliveries (campaign_id, outcome) where campaign_id is not null;
create index deliveries_delivered_to on deliveries (org_id, email_lower, finished_at desc)
    where outcome = 'delivered';
create index deliveries_needing_attention on deliveries (org_id, finished_at)
    where outcome in ('failed', 'unknown');
alter table deliveries set (fillfactor = 50);
\ir claims.sql
