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

-- Events out about segments: someone entered or left a saved segment. Learnt as the trigger
-- above learns it, by comparing scans, for the segments of orgs with an endpoint that asked:
-- `segment_members` is the last scan's answer, per segment (the segment as it is now: a new
-- version's differences are entries and exits too). The first scan, or one after a day
-- without any, only notes who matches.
alter table webhook_out_endpoints drop constraint webhook_out_endpoints_event_types_check;
alter table webhook_out_endpoints add constraint webhook_out_endpoints_event_types_check check (
    cardinality(event_types) between 1 and 20
    and event_types <@ array['message.delivered', 'message.failed', 'message.unknown',
                             'message.bounced', 'message.complained',
                             'subscriber.unsubscribed', 'subscriber.suppressed',
                             'subscriber.confirmed', 'subscriber.erased',
                             'campaign.sent', 'campaign.paused', 'link.clicked',
                             'automation.enrolled', 'automation.completed', 'automation.exited',
                             'segment.entered', 'segment.left',
                             'webhook.test']::text[]);

create table segment_scans (
    segment_id bigint primary key references segments (id),
    org_id bigint not null,
    generation bigint not null default 0,
    scanned_at timestamptz
);

create table segment_members (
    segment_id bigint not null references segment_scans (segment_id),
    org_id bigint not null,
    subscriber_id bigint not null,
    primary key (segment_id, subscriber_id),
    foreign key (org_id, subscriber_id) references subscribers (org_id, id) on delete cascade
);

-- Clicks and opens of automation mail, recorded as campaign mail's are: against the automation
-- whose step sent it (a click's event names it).
alter table link_clicks add column automation_id bigint,
    add foreign key (org_id, automation_id) references automations (org_id, id) on delete cascade;
alter table message_opens add column automation_id bigint,
    add foreign key (org_id, automation_id) references automations (org_id, id) on delete cascade;

create or replace function webhook_clicks_inserted() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    perform webhook_fan_out(coalesce(jsonb_agg(jsonb_build_object(
        'org_id', n.org_id, 'type', 'link.clicked', 'key', 'click:' || n.id,
        'timestamp', webhook_time(n.clicked_at),
        'data', jsonb_build_object('url', n.url, 'job_id', n.job_id,
                                   'campaign_id', n.campaign_id,
                                   'automation_id', n.automation_id,
                                   'subscriber_id', n.subscriber_id))), '[]'))
    from new_rows n where not n.scanner;
    return null;
end $$;
