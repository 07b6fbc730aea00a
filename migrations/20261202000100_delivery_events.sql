-- What relays report after the SMTP conversation: bounces, complaints and unsubscribes, one row
-- per provider event. The unique key is the arbiter: a webhook delivered twice (they all retry)
-- inserts once, and only the insert that returned a row applies its effects.
create table delivery_events (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    source text not null check (source in ('generic', 'mailgun', 'postmark', 'sendgrid', 'ses')),
    provider_event_id text not null check (length(provider_event_id) between 1 and 300),
    kind text not null check (kind in ('hard_bounce', 'soft_bounce', 'complaint', 'unsubscribe')),
    -- Null: no delivery of the org matched (kept and shown as unmatched, never dropped).
    -- A purged campaign's deliveries go; the events stay (the evidence behind a suppression).
    job_id text references deliveries (job_id) on delete set null,
    matched_by text not null check (matched_by in ('message_id', 'recipient', 'none')),
    email_lower text not null,
    status text check (length(status) <= 32),
    diagnostic text check (length(diagnostic) <= 2000),
    -- What it did: suppressed the address, counted towards the soft-bounce rule, or nothing new.
    effect text not null check (effect in ('suppressed', 'counted', 'none')),
    occurred_at text check (length(occurred_at) <= 64), -- the provider's claim, shown as given
    received_at timestamptz not null default now(),
    unique (source, provider_event_id)
);
create index delivery_events_job on delivery_events (job_id) where job_id is not null;
create index delivery_events_org on delivery_events (org_id, received_at desc);
create index delivery_events_soft on delivery_events (org_id, email_lower, received_at)
    where kind = 'soft_bounce';

-- Where a relay posts an org's events: the id in the URL names the org and the source; the
-- secret is the provider's signing key (or, for Postmark, the shared secret in the URL).
create table webhook_endpoints (
    id text primary key check (id ~ '^[A-Za-z0-9_-]{16,64}$'),
    org_id bigint not null references orgs (id),
    source text not null check (source in ('generic', 'mailgun', 'postmark', 'sendgrid', 'ses')),
    secret text not null,
    -- SES through SNS: the URL that confirms the subscription, until the owner has opened it.
    subscribe_url text,
    created_at timestamptz not null default now(),
    revoked_at timestamptz
);
create index webhook_endpoints_org on webhook_endpoints (org_id);

-- Mailgun signs a timestamp and a token, not the body: a token is taken once.
create table webhook_nonces (
    source text not null,
    nonce text not null,
    body_sha256 bytea not null,
    seen_at timestamptz not null default now(),
    primary key (source, nonce)
);

-- The policy: soft bounces suppress after this many in this many days.
alter table orgs
    add column soft_bounce_threshold int not null default 3 check (soft_bounce_threshold between 1 and 100),
    add column soft_bounce_days int not null default 30 check (soft_bounce_days between 1 and 365);

alter table suppressions drop constraint suppressions_reason_check;
alter table suppressions add constraint suppressions_reason_check
    check (reason in ('unsubscribed', 'hard_bounce', 'soft_bounce', 'complaint', 'manual', 'import'));

-- The recipient fallback of event matching: the org's latest delivered message to an address.
create index deliveries_delivered_to on deliveries (org_id, email_lower, finished_at desc)
    where status = 'delivered';
