-- Mailroom schema, whole design (DESIGN.md). Org-owned tables carry org_id; children reference
-- parents by (org_id, id) so rows of two organisations can never be joined by a forgotten check.

-- Time zones are validated against PostgreSQL's own list (the one the digest SQL uses). A trigger,
-- not a CHECK: the list changes with tzdata, and CHECK constraints must be immutable.
create function mailroom_valid_timezone(tz text) returns boolean
language sql stable as $$ select exists (select 1 from pg_timezone_names where name = tz) $$;

create function mailroom_check_org_timezone() returns trigger
language plpgsql as $$
begin
    if not mailroom_valid_timezone(new.timezone) then
        raise exception 'unknown time zone %', new.timezone
            using errcode = 'check_violation', constraint = 'orgs_timezone_check';
    end if;
    return new;
end $$;

create function mailroom_set_updated_at() returns trigger
language plpgsql as $$ begin new.updated_at = now(); return new; end $$;

create table orgs (
    id bigint generated always as identity primary key,
    name text not null check (length(name) between 1 and 200),
    slug text not null unique check (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    timezone text not null default 'UTC',
    digest_weekday smallint not null default 1 check (digest_weekday between 1 and 7), -- ISO: 1 = Monday
    digest_hour smallint not null default 9 check (digest_hour between 0 and 23),
    from_name text not null,
    from_address text not null,
    reply_to text,
    return_path text,
    allow_self_approval boolean not null default false,
    created_at timestamptz not null default now()
);
create trigger orgs_timezone before insert or update of timezone on orgs
    for each row execute function mailroom_check_org_timezone();

create table users (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    email text not null,
    email_lower text not null unique, -- login is by address, so one account per address
    name text not null,
    role text not null check (role in ('owner', 'admin', 'viewer')),
    password_hash text not null,
    weekly_digest boolean not null default true,
    disabled boolean not null default false,
    created_at timestamptz not null default now(),
    unique (org_id, id)
);

create table sessions (
    token_hash bytea primary key, -- sha-256 of the cookie value; the value itself is never stored
    org_id bigint not null,
    user_id bigint not null,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null,
    foreign key (org_id, user_id) references users (org_id, id) on delete cascade
);
create index sessions_expiry on sessions (expires_at);
create index sessions_user on sessions (org_id, user_id);

-- Generated once and shared by every replica (session key, unsubscribe HMAC keys …).
create table secrets (
    name text not null,
    version int not null default 1,
    value bytea not null,
    created_at timestamptz not null default now(),
    primary key (name, version)
);

create table subscribers (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    email text not null,
    email_lower text not null, -- EmailAddress::lower(); case variants may coexist, sends dedupe by it
    name text not null default '',
    -- Opt-outs are not a status: they are rows in suppressions, the one source of truth.
    status text not null default 'confirmed' check (status in ('unconfirmed', 'confirmed', 'blocklisted')),
    attributes jsonb not null default '{}',
    erased_at timestamptz,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    unique (org_id, id),
    unique (org_id, email)
);
create index subscribers_org_email_lower on subscribers (org_id, email_lower);
create trigger subscribers_updated_at before update on subscribers
    for each row execute function mailroom_set_updated_at();

create table lists (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    name text not null check (length(name) between 1 and 200),
    created_at timestamptz not null default now(),
    unique (org_id, id),
    unique (org_id, name)
);

create table list_members (
    org_id bigint not null,
    list_id bigint not null,
    subscriber_id bigint not null,
    created_at timestamptz not null default now(),
    primary key (list_id, subscriber_id),
    foreign key (org_id, list_id) references lists (org_id, id) on delete cascade,
    foreign key (org_id, subscriber_id) references subscribers (org_id, id) on delete cascade
);
create index list_members_subscriber on list_members (subscriber_id);

-- The one source of truth for every opt-out.
create table suppressions (
    org_id bigint not null references orgs (id),
    email_lower text not null,
    reason text not null check (reason in ('unsubscribed', 'hard_bounce', 'complaint', 'manual', 'import')),
    source text not null default '',
    created_at timestamptz not null default now(),
    primary key (org_id, email_lower)
);

create table campaigns (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    name text not null check (length(name) between 1 and 200),
    subject text not null default '',
    body text not null default '',
    body_format text not null default 'markdown' check (body_format in ('markdown', 'html')),
    status text not null default 'draft'
        check (status in ('draft', 'submitted', 'approved', 'sending', 'paused', 'sent', 'cancelled')),
    content_version int not null default 1,
    author_id bigint not null,
    last_editor_id bigint not null,
    approver_id bigint,
    approved_version int,
    self_approved boolean not null default false,
    rejection_reason text,
    scheduled_for timestamptz,
    submitted_at timestamptz,
    approved_at timestamptz,
    started_at timestamptz,
    materialized_at timestamptz, -- set in the start transaction once sends exist: 0 recipients ≠ not yet built
    recipients_total bigint,
    finished_at timestamptz,
    deleted_at timestamptz,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    unique (org_id, id),
    foreign key (org_id, author_id) references users (org_id, id),
    foreign key (org_id, last_editor_id) references users (org_id, id),
    foreign key (org_id, approver_id) references users (org_id, id),
    constraint campaigns_scheduled_once_approved check (status not in ('approved', 'sending', 'paused', 'sent') or scheduled_for is not null),
    constraint campaigns_approval_recorded check (status not in ('approved', 'sending', 'paused', 'sent')
           or (approver_id is not null and approved_at is not null and approved_version is not null)),
    -- four eyes, unless the org allowed self-approval (and then it is marked)
    constraint campaigns_four_eyes check (approver_id is null or self_approved or (approver_id <> author_id and approver_id <> last_editor_id)),
    constraint campaigns_soft_delete_states check (deleted_at is null or status in ('draft', 'sent', 'cancelled'))
);
create index campaigns_due on campaigns (scheduled_for) where status = 'approved';
create index campaigns_sending on campaigns (id) where status = 'sending';
create trigger campaigns_updated_at before update on campaigns
    for each row execute function mailroom_set_updated_at();

create table campaign_lists (
    org_id bigint not null,
    campaign_id bigint not null,
    list_id bigint not null,
    primary key (campaign_id, list_id),
    foreign key (org_id, campaign_id) references campaigns (org_id, id) on delete cascade,
    foreign key (org_id, list_id) references lists (org_id, id)
);

-- One row per recipient of a campaign: the real queue of the campaign worker.
create table sends (
    id bigint generated always as identity primary key,
    org_id bigint not null,
    campaign_id bigint not null,
    subscriber_id bigint not null,
    email_lower text not null,
    job_id text not null unique, -- 'campaign:<cid>:<sid>', never random
    status text not null default 'queued' check (status in ('queued', 'handed_off', 'suppressed', 'cancelled')),
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    unique (campaign_id, subscriber_id),
    unique (campaign_id, email_lower), -- the address, not only the subscriber, is deduplicated
    foreign key (org_id, campaign_id) references campaigns (org_id, id),
    foreign key (org_id, subscriber_id) references subscribers (org_id, id)
);
create index sends_claim on sends (campaign_id, id) where status = 'queued';

-- The arbiter of "at most one scheduled digest per org per week" is the unique key.
create table digest_sends (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    week_key text not null check (week_key ~ '^([0-9]{4}-W[0-9]{2}|manual-[0-9]+)$'),
    kind text not null check (kind in ('scheduled', 'manual', 'skipped')),
    covers_week text not null check (covers_week ~ '^[0-9]{4}-W[0-9]{2}$'),
    triggered_by bigint,
    only_me boolean not null default false,
    scheduled_at timestamptz not null,
    period_start timestamptz not null,
    period_end timestamptz not null,
    subject text,
    content_html text,
    content_text text,
    recipient_count int not null default 0,
    created_at timestamptz not null default now(),
    unique (org_id, week_key),
    unique (org_id, id),
    foreign key (org_id, triggered_by) references users (org_id, id),
    constraint digest_sends_manual_key check ((kind = 'manual') = (week_key like 'manual-%'))
);

-- The delivery queue: one row per message, keyed by its deterministic job id. Carries typed
-- references, not bodies; one renderer per kind builds the message at send time.
create table deliveries (
    job_id text primary key,
    org_id bigint not null references orgs (id),
    kind text not null check (kind in ('test', 'digest', 'campaign')),
    priority smallint not null check (priority between 0 and 2), -- test 0 > digest 1 > campaign 2
    recipient text not null,
    email_lower text not null, -- EmailAddress::lower() of recipient, for the suppression re-check
    campaign_id bigint,
    content_version int,
    subscriber_id bigint,
    digest_send_id bigint,
    user_id bigint,
    status text not null default 'queued'
        check (status in ('queued', 'sending', 'delivered', 'failed', 'unknown', 'suppressed', 'cancelled')),
    attempt int not null default 0,
    next_attempt_at timestamptz not null default now(),
    lease_until timestamptz,
    body_started_at timestamptz, -- set before the body is written: decides requeue vs unknown after a crash
    last_error text,
    smtp_reply text,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    finished_at timestamptz,
    foreign key (org_id, campaign_id) references campaigns (org_id, id),
    foreign key (org_id, subscriber_id) references subscribers (org_id, id),
    foreign key (org_id, digest_send_id) references digest_sends (org_id, id),
    foreign key (org_id, user_id) references users (org_id, id),
    constraint deliveries_campaign_refs check (kind <> 'campaign' or (campaign_id is not null and content_version is not null and subscriber_id is not null)),
    constraint deliveries_digest_refs check (kind <> 'digest' or (digest_send_id is not null and user_id is not null))
);
create index deliveries_claim on deliveries (priority, next_attempt_at) where status = 'queued';
create index deliveries_lease on deliveries (lease_until) where status = 'sending';
create index deliveries_campaign on deliveries (campaign_id, status) where campaign_id is not null;
create index deliveries_digest on deliveries (digest_send_id) where digest_send_id is not null;

-- Progress counters, spread over a few slots per campaign (no single hot row), summed on read.
create table progress_slots (
    org_id bigint not null,
    campaign_id bigint not null,
    slot smallint not null check (slot between 0 and 15),
    queued bigint not null default 0,
    handed_off bigint not null default 0,
    delivered bigint not null default 0,
    failed bigint not null default 0,
    unknown bigint not null default 0,
    suppressed bigint not null default 0,
    cancelled bigint not null default 0,
    primary key (campaign_id, slot),
    foreign key (org_id, campaign_id) references campaigns (org_id, id) on delete cascade
);

-- Leadership: a lease timed by the database clock; epoch is the fencing token.
create table leader_lease (
    name text primary key,
    holder text not null,
    epoch bigint not null,
    expires_at timestamptz not null
);

-- Global token bucket per SMTP server, refilled by database time.
create table rate_buckets (
    server text primary key,
    tokens double precision not null,
    capacity double precision not null check (capacity > 0),
    refill_per_second double precision not null check (refill_per_second > 0),
    refilled_at timestamptz not null default now()
);

create table audit_log (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    actor_id bigint,
    action text not null,
    object_type text not null,
    object_id text,
    before jsonb,
    after jsonb,
    created_at timestamptz not null default now(),
    foreign key (org_id, actor_id) references users (org_id, id)
);
create index audit_log_org_time on audit_log (org_id, created_at desc);

-- Every running worker host beats here; the dashboard and operators see who is alive.
create table worker_heartbeats (
    process_id text primary key,
    hostname text not null,
    pid int not null,
    mode text not null check (mode in ('serve', 'worker')),
    version text not null,
    started_at timestamptz not null default now(),
    beat_at timestamptz not null default now()
);
