-- Claims stop rewriting the wide `deliveries` row. What is due lives in a narrow table of its
-- own: a claim deletes its rows from it and writes one claim row (holder, lease, the attempts
-- as arrays), so the wide row, with its many indexes, is written once per attempt, with the
-- outcome. Until then it stays `queued` at the previous attempt number; it is in flight when it
-- is `queued` but not in the queue, and the claim row holding its next attempt is its lease.
--
-- A row enters the queue by trigger whenever it is inserted `queued`, or updated into `queued`
-- or to a new attempt (a retry after a temporary failure, a give-back, an admin's retry); a
-- change of its due time follows it there. It leaves the queue only by a claim, or by the few
-- statements that finish a queued row without claiming it (cancel, erasure, the demo seed),
-- which delete it themselves: a trigger probing the queue for every outcome would cost each
-- message.

-- Writers of an older binary must not slip a claim in between the conversion and the new rules.
lock table deliveries in share row exclusive mode;

create table delivery_queue (
    job_id text primary key,
    priority smallint not null,
    org_id bigint not null,
    campaign_key bigint not null,
    next_attempt_at timestamptz not null
);
-- The claim's fair walk: the distinct (priority, org, campaign) groups, then each one's due rows.
create index delivery_queue_groups on delivery_queue (priority, org_id, campaign_key, next_attempt_at);
-- The age of the oldest due row, for /metrics.
create index delivery_queue_due on delivery_queue (next_attempt_at);

create table delivery_claims (
    id bigint generated always as identity primary key,
    holder text not null,
    lease_until timestamptz not null,
    job_ids text[] not null,
    attempts int[] not null,
    check (cardinality(job_ids) = cardinality(attempts) and cardinality(job_ids) > 0)
);
create index delivery_claims_lease on delivery_claims (lease_until);
create index delivery_claims_holder on delivery_claims (holder);

create function delivery_queue_inserted() returns trigger language plpgsql as $$
begin
    insert into delivery_queue (job_id, priority, org_id, campaign_key, next_attempt_at)
    select job_id, priority, org_id, coalesce(campaign_id, 0), next_attempt_at
    from new_rows where status = 'queued'
    on conflict (job_id) do nothing;
    return null;
end $$;

create function delivery_queue_updated() returns trigger language plpgsql as $$
begin
    insert into delivery_queue (job_id, priority, org_id, campaign_key, next_attempt_at)
    select n.job_id, n.priority, n.org_id, coalesce(n.campaign_id, 0), n.next_attempt_at
    from new_rows n join old_rows o on o.job_id = n.job_id
    where n.status = 'queued' and (o.status <> 'queued' or o.attempt <> n.attempt)
    on conflict (job_id) do update set next_attempt_at = excluded.next_attempt_at;
    -- A queued row whose due time changed (by hand) keeps its place in the queue in step. Never
    -- an insert here: a row in flight is `queued` too, and must not re-enter the queue.
    update delivery_queue q set next_attempt_at = n.next_attempt_at
    from new_rows n join old_rows o on o.job_id = n.job_id
    where q.job_id = n.job_id and n.status = 'queued' and o.status = 'queued'
      and o.attempt = n.attempt and o.next_attempt_at is distinct from n.next_attempt_at;
    return null;
end $$;

create function delivery_queue_deleted() returns trigger language plpgsql as $$
begin
    delete from delivery_queue q using old_rows o where q.job_id = o.job_id;
    return null;
end $$;

create trigger deliveries_queue_insert after insert on deliveries
    referencing new table as new_rows
    for each statement execute function delivery_queue_inserted();
create trigger deliveries_queue_update after update on deliveries
    referencing old table as old_rows new table as new_rows
    for each statement execute function delivery_queue_updated();
create trigger deliveries_queue_delete after delete on deliveries
    referencing old table as old_rows
    for each statement execute function delivery_queue_deleted();

-- Attempts in flight during the upgrade are taken back as a reaper would: a marked one
-- becomes `unknown`, the others go back to the queue (their attempt number stays burned, so
-- an older process's late write can never match a new claim), counted in the progress slots.
with marked as (
    select d.job_id from deliveries d
    join delivery_marks m on m.job_id = d.job_id and m.attempt = d.attempt
    where d.status = 'sending'
),
changed as (
    update deliveries d
    set status = case when d.job_id in (select job_id from marked) then 'unknown' else 'queued' end,
        last_error = case when d.job_id in (select job_id from marked)
                          then 'upgrade while the body was in flight' else 'requeued at upgrade' end,
        finished_at = case when d.job_id in (select job_id from marked) then now() end,
        updated_at = now()
    where d.status = 'sending'
    returning d.org_id, d.campaign_id, d.status
)
insert into progress_slots as p (org_id, campaign_id, slot, unknown)
select org_id, campaign_id, 0, count(*) from changed
where campaign_id is not null and status = 'unknown'
group by org_id, campaign_id
on conflict (campaign_id, slot) do update set unknown = p.unknown + excluded.unknown;

insert into delivery_queue (job_id, priority, org_id, campaign_key, next_attempt_at)
select job_id, priority, org_id, coalesce(campaign_id, 0), next_attempt_at
from deliveries where status = 'queued'
on conflict (job_id) do nothing;

-- No row is ever `sending` again (the Deliveries page derives it): an older binary's claim
-- fails here instead of racing this one's. Not validated: the conversion above, under this
-- migration's lock, left none, and a scan of the whole table would only prove that again.
alter table deliveries add constraint deliveries_never_written_sending check (status <> 'sending') not valid;
alter table deliveries drop column claimed_by, drop column lease_until;
drop index if exists deliveries_groups;
drop index if exists deliveries_due;
