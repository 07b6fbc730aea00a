-- The leader reconciles a finished campaign's progress slots with count(*) once.
alter table campaigns add column progress_reconciled_at timestamptz;
-- The cancel sweep finds a cancelled campaign's queued deliveries without a scan.
create index campaigns_cancelled on campaigns (id) where status = 'cancelled';
