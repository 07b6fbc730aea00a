-- Body-start marks are written one row per group commit (the marks of every connection that
-- reached the same write), not one row per message: inserting and later deleting a row per
-- message was most of a mark's database cost. The view keeps the per-attempt shape for readers.
create table delivery_mark_groups (
    id bigint generated always as identity primary key,
    job_ids text[] not null,
    attempts int[] not null,
    marked_at timestamptz not null default now(),
    check (cardinality(job_ids) = cardinality(attempts) and cardinality(job_ids) > 0)
);

-- Attempts in flight during the upgrade keep their marks.
insert into delivery_mark_groups (job_ids, attempts, marked_at)
select array[job_id], array[attempt], marked_at from delivery_marks;

drop table delivery_marks;

create view delivery_marks as
select m.id as group_id, x.job_id, x.attempt, m.marked_at
from delivery_mark_groups m
cross join lateral unnest(m.job_ids, m.attempts) as x(job_id, attempt);
