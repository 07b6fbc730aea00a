-- Deliveries counted by kind and status for /metrics, kept by statement-level triggers so a
-- scrape never counts the deliveries table. Every statement that changes deliveries appends
-- its net change as new rows (an insert never waits on another writer's lock, so concurrent
-- workers cannot contend or deadlock here); the leader folds the rows into one per (kind,
-- status) each pass, so a scrape sums a handful of rows whatever the table holds.
create table delivery_counts (
    id bigint generated always as identity primary key,
    kind text not null,
    status text not null,
    n bigint not null
);

create function delivery_counts_inserted() returns trigger language plpgsql as $$
begin
    insert into delivery_counts (kind, status, n)
    select kind, status, count(*) from new_rows group by kind, status;
    return null;
end $$;

create function delivery_counts_updated() returns trigger language plpgsql as $$
begin
    insert into delivery_counts (kind, status, n)
    select kind, status, sum(d) from (
        select kind, status, 1 as d from new_rows
        union all
        select kind, status, -1 from old_rows
    ) changes
    group by kind, status
    having sum(d) <> 0;
    return null;
end $$;

create function delivery_counts_deleted() returns trigger language plpgsql as $$
begin
    insert into delivery_counts (kind, status, n)
    select kind, status, -count(*) from old_rows group by kind, status;
    return null;
end $$;

-- Writers of an older binary must not slip rows between the backfill and the triggers.
lock table deliveries in share row exclusive mode;

create trigger deliveries_counted_insert after insert on deliveries
    referencing new table as new_rows
    for each statement execute function delivery_counts_inserted();
create trigger deliveries_counted_update after update on deliveries
    referencing old table as old_rows new table as new_rows
    for each statement execute function delivery_counts_updated();
create trigger deliveries_counted_delete after delete on deliveries
    referencing old table as old_rows
    for each statement execute function delivery_counts_deleted();

insert into delivery_counts (kind, status, n)
select kind, status, count(*) from deliveries group by kind, status;

-- The age of the oldest due queued delivery is its first entry (the claim's index leads with
-- priority and org, so it cannot answer that without reading every queued row).
create index deliveries_due on deliveries (next_attempt_at) where status = 'queued';
