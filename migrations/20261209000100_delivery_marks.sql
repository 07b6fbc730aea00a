-- "Body started" marks move off the deliveries row. Marking set body_started_at on the wide
-- row, a non-HOT update adding an entry to each of its indexes and a copy to the count
-- triggers' transition tables, for every message; a mark is now a narrow row keyed by the
-- attempt, written while the delivery row is share-locked and deleted with the attempt's
-- outcome (or when a reaper or a shutdown takes the claim back), so the table holds only the
-- attempts in flight.
create table delivery_marks (
    job_id text not null,
    attempt int not null,
    marked_at timestamptz not null default now(),
    primary key (job_id, attempt)
);

-- Attempts in flight during the upgrade keep their marks.
insert into delivery_marks (job_id, attempt, marked_at)
select job_id, attempt, body_started_at from deliveries
where status = 'sending' and body_started_at is not null;

alter table deliveries drop column body_started_at;
