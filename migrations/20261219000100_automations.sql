-- Automations: lifecycle mail in steps, each step once per person (DESIGN guarantee 14).
--
-- An automation's definition (`domain::automation::Definition` as JSON: trigger, re-entry
-- rule, goal, steps) is versioned; people are enrolled on the live version and finish on it
-- whatever is edited after. A version goes live only when an admin other than its editor
-- approves it (unless the org allows self-approval, and then it is marked).
create table automations (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    name text not null check (length(name) between 1 and 200),
    status text not null default 'draft' check (status in ('draft', 'active', 'paused', 'stopped')),
    -- The version people are enrolled on (null until one is approved) and the one being edited
    -- (equal to it when no edit waits for approval).
    live_version integer,
    draft_version integer not null default 1,
    -- The live version's trigger, kept here for the statements that enrol: a list join is
    -- matched by `trigger_list_id`, an event by `trigger_event`.
    trigger_kind text check (trigger_kind in ('list_joined', 'event', 'api', 'date')),
    trigger_list_id bigint,
    trigger_event text,
    reentry text check (reentry in ('once', 'per_trigger', 'after_leaving')),
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    unique (org_id, id),
    constraint automations_live check (status = 'draft' or (live_version is not null and trigger_kind is not null and reentry is not null))
);
create unique index automations_name on automations (org_id, lower(name));
create index automations_list_trigger on automations (org_id, trigger_list_id)
    where trigger_kind = 'list_joined' and status in ('active', 'paused');
create index automations_event_trigger on automations (org_id, trigger_event)
    where trigger_kind = 'event' and status in ('active', 'paused');
create trigger automations_updated_at before update on automations
    for each row execute function mailroom_set_updated_at();

create table automation_versions (
    org_id bigint not null,
    automation_id bigint not null,
    version integer not null,
    definition jsonb not null check (jsonb_typeof(definition) = 'object'),
    editor_id bigint not null,
    approver_id bigint,
    approved_at timestamptz,
    self_approved boolean not null default false,
    created_at timestamptz not null default now(),
    primary key (automation_id, version),
    foreign key (org_id, automation_id) references automations (org_id, id),
    foreign key (org_id, editor_id) references users (org_id, id),
    foreign key (org_id, approver_id) references users (org_id, id),
    constraint automation_versions_four_eyes check (approver_id is null or self_approved or approver_id <> editor_id)
);

-- One person's way through one version. `unique (automation_id, subscriber_id, occurrence)`
-- referees every trigger: the occurrence is '' for "once ever", and the trigger's own identity
-- (the event's key, the list join, the API caller's key) otherwise; "again after leaving" is
-- also at most one unfinished enrolment at a time (`exclusive`).
create table enrolments (
    id bigint generated always as identity primary key,
    org_id bigint not null,
    automation_id bigint not null,
    version integer not null,
    subscriber_id bigint not null,
    occurrence text not null check (length(occurrence) <= 300),
    exclusive boolean not null default false,
    state text not null default 'active' check (state in ('active', 'completed', 'exited', 'stopped')),
    exit_reason text check (exit_reason in ('goal', 'unsubscribed', 'erased', 'removed', 'branch', 'stopped', 'step')),
    -- The next step to take, and when.
    step integer not null default 0,
    due_at timestamptz not null,
    -- What the trigger said (an event's properties), for the mail's personalisation.
    context jsonb not null default '{}' check (jsonb_typeof(context) = 'object'),
    enrolled_at timestamptz not null,
    ended_at timestamptz,
    unique (org_id, id),
    unique (automation_id, subscriber_id, occurrence),
    foreign key (automation_id, version) references automation_versions (automation_id, version),
    foreign key (org_id, automation_id) references automations (org_id, id),
    foreign key (org_id, subscriber_id) references subscribers (org_id, id) on delete cascade,
    constraint enrolments_ended check ((state = 'active') = (ended_at is null)),
    constraint enrolments_exit_reason check ((state in ('exited', 'stopped')) = (exit_reason is not null))
);
create unique index enrolments_one_open on enrolments (automation_id, subscriber_id)
    where exclusive and state = 'active';
-- The step claimer's walk: what is due, oldest first.
create index enrolments_due on enrolments (due_at) where state = 'active';
-- Where people are, per automation; a person's enrolments.
create index enrolments_where on enrolments (automation_id, step) where state = 'active';
create index enrolments_subscriber on enrolments (org_id, subscriber_id);

-- Each step taken, once: `primary key (enrolment_id, step)` is the referee.
create table enrolment_steps (
    org_id bigint not null,
    automation_id bigint not null,
    enrolment_id bigint not null references enrolments (id) on delete cascade,
    step integer not null,
    outcome text not null check (outcome in ('sent', 'skipped', 'waited', 'branched', 'set', 'listed', 'unlisted', 'exited')),
    detail text not null default '' check (length(detail) <= 500),
    taken_at timestamptz not null,
    primary key (enrolment_id, step)
);
create index enrolment_steps_counts on enrolment_steps (automation_id, step, outcome);

-- Mail steps go through the delivery engine as their own kind, grouped for fairness by their
-- automation (a campaign's group is its id; an automation's is minus its id).
alter table deliveries add column automation_id bigint;
alter table deliveries add column enrolment_id bigint;
alter table deliveries drop constraint deliveries_kind_check;
alter table deliveries add constraint deliveries_kind_check
    check (kind in ('test', 'digest', 'campaign', 'invite', 'transactional', 'confirm', 'notice', 'automation'));
alter table deliveries add constraint deliveries_automation_refs
    check (kind <> 'automation' or (automation_id is not null and enrolment_id is not null and subscriber_id is not null));
alter table deliveries add constraint deliveries_automation
    foreign key (org_id, automation_id) references automations (org_id, id);
create index deliveries_automation on deliveries (automation_id, status) where automation_id is not null;
-- A subscriber's automations and a removal read an enrolment's messages.
create index deliveries_enrolment on deliveries (enrolment_id) where enrolment_id is not null;

create or replace function delivery_queue_inserted() returns trigger language plpgsql as $$
begin
    insert into delivery_queue (job_id, priority, org_id, campaign_key, next_attempt_at)
    select job_id, priority, org_id, coalesce(campaign_id, -automation_id, 0), next_attempt_at
    from new_rows where status = 'queued'
    on conflict (job_id) do nothing;
    return null;
end $$;

create or replace function delivery_queue_updated() returns trigger language plpgsql as $$
begin
    insert into delivery_queue (job_id, priority, org_id, campaign_key, next_attempt_at)
    select n.job_id, n.priority, n.org_id, coalesce(n.campaign_id, -n.automation_id, 0), n.next_attempt_at
    from new_rows n join old_rows o on o.job_id = n.job_id
    where n.status = 'queued' and (o.status <> 'queued' or o.attempt <> n.attempt)
    on conflict (job_id) do update set next_attempt_at = excluded.next_attempt_at;
    update delivery_queue q set next_attempt_at = n.next_attempt_at
    from new_rows n join old_rows o on o.job_id = n.job_id
    where q.job_id = n.job_id and n.status = 'queued' and o.status = 'queued'
      and o.attempt = n.attempt and o.next_attempt_at is distinct from n.next_attempt_at;
    return null;
end $$;

-- Joining a list enrols the person in every live automation that list triggers, in the
-- transaction of the join, whichever path made it (the dashboard, an import, the API, a
-- confirmed sign-up: a double opt-in joins the list only when confirmed). A paused automation
-- still enrols; its steps wait for the resume.
create function automations_list_joined() returns trigger language plpgsql as $$
begin
    insert into enrolments (org_id, automation_id, version, subscriber_id, occurrence, exclusive,
                            due_at, enrolled_at)
    select a.org_id, a.id, a.live_version, n.subscriber_id,
           case a.reentry when 'once' then ''
                else 'join:' || n.list_id || ':' || (extract(epoch from n.created_at) * 1000000)::bigint end,
           a.reentry = 'after_leaving', n.created_at, n.created_at
    from new_rows n
    join automations a on a.org_id = n.org_id and a.trigger_list_id = n.list_id
                      and a.trigger_kind = 'list_joined' and a.status in ('active', 'paused')
    -- Confirmed people only, as campaigns: a double opt-in's join comes with its confirmation.
    join subscribers s on s.org_id = n.org_id and s.id = n.subscriber_id
                      and s.status = 'confirmed' and s.erased_at is null
    order by a.id, n.subscriber_id
    -- A stop waits for this transaction, and sees what it enrolled.
    for key share of a
    on conflict do nothing;
    return null;
end $$;

create trigger list_members_enrol after insert on list_members
    referencing new table as new_rows
    for each statement execute function automations_list_joined();

-- The next instant at `hour` o'clock (on weekday `dow`, 0 = Sunday, when given) strictly after
-- `t`, in the zone `zone`. A local time that does not exist (a spring-forward gap) is read as
-- PostgreSQL reads it (the clock's time before the change, so 02:30 becomes 03:30); one that
-- exists twice (the fall-back hour) is its later occurrence.
create function mailroom_next_local(t timestamptz, zone text, dow integer, hour integer)
returns timestamptz language sql stable as $$
    select case when cand > lt then cand
                when dow is null then cand + interval '1 day'
                else cand + interval '7 days' end at time zone zone
    from (select lt,
                 date_trunc('day', lt)
                 + make_interval(days => case when dow is null then 0
                                              else (dow - extract(dow from lt)::integer + 7) % 7 end,
                                 hours => hour) as cand
          from (select t at time zone zone as lt) l) c
$$;

-- `zone` when PostgreSQL knows it, else `fallback` (a subscriber's time-zone attribute may
-- hold anything).
create function mailroom_zone_or(zone text, fallback text) returns text
language plpgsql stable as $$
begin
    if zone is null or zone = '' then
        return fallback;
    end if;
    perform now() at time zone zone;
    return zone;
exception when others then
    return fallback;
end $$;

-- Quiet hours: an automation's mail step that comes due between these local hours of the org
-- (`22-07`: from 22:00 to 07:00) waits until they end. Null: none.
alter table orgs add column quiet_hours text
    check (quiet_hours ~ '^([01][0-9]|2[0-3])-([01][0-9]|2[0-3])$'
           and split_part(quiet_hours, '-', 1) <> split_part(quiet_hours, '-', 2));

alter table api_tokens drop constraint api_tokens_scopes_check;
alter table api_tokens add constraint api_tokens_scopes_check check (
    cardinality(scopes) between 1 and 20
    and scopes <@ array['subscribers:read', 'subscribers:write', 'suppressions:read',
                        'suppressions:write', 'messages:send', 'campaigns:read',
                        'deliveries:read', 'events:write', 'segments:read',
                        'segments:write', 'automations:read', 'automations:write']::text[]);

-- Events out about automations: someone enrolled, finished every step, or left early (with
-- why), written by trigger in the transaction of the change, as every other event is.
alter table webhook_out_endpoints drop constraint webhook_out_endpoints_event_types_check;
alter table webhook_out_endpoints add constraint webhook_out_endpoints_event_types_check check (
    cardinality(event_types) between 1 and 20
    and event_types <@ array['message.delivered', 'message.failed', 'message.unknown',
                             'message.bounced', 'message.complained',
                             'subscriber.unsubscribed', 'subscriber.suppressed',
                             'subscriber.confirmed', 'subscriber.erased',
                             'campaign.sent', 'campaign.paused', 'link.clicked',
                             'automation.enrolled', 'automation.completed', 'automation.exited',
                             'webhook.test']::text[]);

create function webhook_enrolment(n enrolments, kind text, at timestamptz) returns jsonb
language sql stable as $$
    select jsonb_build_object(
        'org_id', n.org_id, 'type', kind, 'key', n.id,
        'timestamp', webhook_time(at),
        'data', jsonb_build_object('automation_id', n.automation_id, 'enrolment_id', n.id,
                                   'version', n.version, 'subscriber_id', n.subscriber_id,
                                   'step', n.step, 'reason', n.exit_reason))
$$;

create function webhook_enrolments_inserted() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    perform webhook_fan_out(coalesce(jsonb_agg(webhook_enrolment(n, 'automation.enrolled', n.enrolled_at)), '[]'))
    from new_rows n
    where exists (select 1 from webhook_out_endpoints e where e.org_id = n.org_id and e.enabled);
    return null;
end $$;
create trigger enrolments_webhooks_insert after insert on enrolments
    referencing new table as new_rows
    for each statement execute function webhook_enrolments_inserted();

create function webhook_enrolments_updated() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    perform webhook_fan_out(coalesce(jsonb_agg(webhook_enrolment(
        n, case when n.state = 'completed' then 'automation.completed' else 'automation.exited' end,
        n.ended_at)), '[]'))
    from new_rows n join old_rows o on o.id = n.id
    where o.state = 'active' and n.state <> 'active'
      and exists (select 1 from webhook_out_endpoints e where e.org_id = n.org_id and e.enabled);
    return null;
end $$;
create trigger enrolments_webhooks_update after update on enrolments
    referencing old table as old_rows new table as new_rows
    for each statement execute function webhook_enrolments_updated();

-- A message's events name the automation it came from.
create or replace function webhook_deliveries_updated() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    perform webhook_fan_out(coalesce(jsonb_agg(jsonb_build_object(
        'org_id', n.org_id, 'type', 'message.' || n.status,
        'key', n.job_id || ':' || n.attempt,
        'timestamp', webhook_time(coalesce(n.finished_at, n.updated_at)),
        'data', jsonb_build_object(
            'job_id', n.job_id,
            'kind', n.kind,
            'recipient', n.recipient,
            'attempt', n.attempt,
            'campaign_id', n.campaign_id,
            'automation_id', n.automation_id,
            'subscriber_id', n.subscriber_id,
            'transactional_message_id', n.tx_message_id,
            'reply', n.smtp_reply,
            'error', n.last_error))), '[]'))
    from new_rows n
    join old_rows o on o.job_id = n.job_id
    where n.status in ('delivered', 'failed', 'unknown') and n.status is distinct from o.status
      and exists (select 1 from webhook_out_endpoints e where e.org_id = n.org_id and e.enabled);
    return null;
end $$;
