-- Delivery engine, second step (expand only: older replicas keep working).

-- Round-robin claims walk the distinct (priority, org, campaign) groups of due mail with a loose
-- index scan, then take a fair share of each group.
create index deliveries_groups on deliveries (priority, org_id, (coalesce(campaign_id, 0)), next_attempt_at)
    where status = 'queued';
drop index if exists deliveries_claim;

-- Which process holds a `sending` row: a stopping process releases exactly its own claims.
alter table deliveries add column claimed_by text;

-- Every action a leader takes, with the epoch it held: the fence and the audit trail of
-- leadership (tests assert that epochs never overlap).
create table leader_log (
    id bigint generated always as identity primary key,
    name text not null,
    epoch bigint not null,
    holder text not null,
    action text not null,
    detail text,
    at timestamptz not null default now()
);
create index leader_log_at on leader_log (at);
