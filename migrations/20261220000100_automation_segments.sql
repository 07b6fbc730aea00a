-- Automations triggered by entering a saved segment.
--
-- A segment is a condition, not an event: who "entered" it is learnt by comparing who matches
-- it now with who matched it at the last scan. `automation_segment_members` is that last
-- scan's answer, per automation; a scan adds the people who match now and did not (they
-- entered: they are enrolled in the same transaction) and drops those who no longer match (so
-- a later match is an entry again). The first scan of a segment version only notes who
-- matches: switching an automation on enrols nobody who already matched.
alter table automations drop constraint automations_trigger_kind_check;
alter table automations add constraint automations_trigger_kind_check
    check (trigger_kind in ('list_joined', 'event', 'api', 'date', 'segment_entered'));
-- The live version's segment, for the statements that look automations up by segment.
alter table automations add column trigger_segment_id bigint;
create index automations_segment_trigger on automations (org_id, trigger_segment_id)
    where trigger_kind = 'segment_entered' and status in ('active', 'paused');

-- The state of one automation's segment scans: which segment version the members below were
-- computed for (a scan of another version starts again, silently), and how many scans have
-- entered people (each scan's number is the occurrence of the entries it found). Its row is
-- locked by the scan (`for update skip locked`): one replica scans an automation at a time.
create table automation_segment_scans (
    automation_id bigint primary key references automations (id),
    org_id bigint not null,
    segment_id bigint,
    segment_version integer,
    generation bigint not null default 0,
    scanned_at timestamptz
);

create table automation_segment_members (
    automation_id bigint not null references automation_segment_scans (automation_id),
    org_id bigint not null,
    subscriber_id bigint not null,
    primary key (automation_id, subscriber_id),
    foreign key (org_id, subscriber_id) references subscribers (org_id, id) on delete cascade
);

-- A step the database refused for one person ends their enrolment (`failed`), so the others in
-- their batch go on.
alter table enrolments drop constraint enrolments_exit_reason_check;
alter table enrolments add constraint enrolments_exit_reason_check
    check (exit_reason in ('goal', 'unsubscribed', 'erased', 'removed', 'branch', 'stopped', 'step', 'failed'));
