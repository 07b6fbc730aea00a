-- The "narrow queue" variant: what is due lives in a narrow table of its own, a claim deletes
-- from it and writes one lease row per claim (the wide row is not touched until its outcome),
-- and a mark share-locks that one lease row instead of every delivery row. The wide row keeps
-- `queued` until the outcome; its attempt is bumped with the outcome, fenced by the claim's.
create table delivery_queue (
    job_id text primary key,
    priority smallint not null,
    org_id bigint not null,
    campaign_key bigint not null,
    next_attempt_at timestamptz not null
);
create index delivery_queue_groups on delivery_queue (priority, org_id, campaign_key, next_attempt_at);
create index delivery_queue_due on delivery_queue (next_attempt_at);
\ir claims.sql
-- The queue's own indexes replace these.
drop index deliveries_groups, deliveries_due, deliveries_lease;
