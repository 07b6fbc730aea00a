-- The sending SaaS's own events about its people, and its own ids for them.
--
-- A subscriber may carry the SaaS's id for them, unique per org where set: events and API
-- calls may name them by it. An erasure clears it with the rest of their data.
alter table subscribers add column external_id text
    check (external_id is null or length(external_id) between 1 and 200);
create unique index subscribers_external_id on subscribers (org_id, external_id)
    where external_id is not null;

-- How long an org keeps events (by when they happened); a leader job deletes older ones.
alter table orgs add column event_retention_days integer not null default 400
    check (event_retention_days between 1 and 3650);

-- One row per event the SaaS posted. The caller's event id (`key`) is the identity:
-- `unique (org_id, key)` referees retries and races, so the same event posted any number of
-- times, at once or a day apart, is one row. Deleting a subscriber deletes their events.
create table events (
    org_id bigint not null references orgs (id),
    id bigint generated always as identity,
    key text not null check (length(key) between 1 and 200),
    subscriber_id bigint not null,
    name text not null check (length(name) between 1 and 100),
    properties jsonb not null default '{}' check (jsonb_typeof(properties) = 'object'),
    occurred_at timestamptz not null,
    received_at timestamptz not null default now(),
    primary key (org_id, id),
    unique (org_id, key),
    foreign key (org_id, subscriber_id) references subscribers (org_id, id) on delete cascade
);
-- Segments ask "did this person do X (how often, since when)"; the timeline reads the same.
create index events_subscriber on events (org_id, subscriber_id, name, occurred_at);
-- Retention deletes by age.
create index events_age on events (org_id, occurred_at);

alter table api_tokens drop constraint api_tokens_scopes_check;
alter table api_tokens add constraint api_tokens_scopes_check check (
    cardinality(scopes) between 1 and 20
    and scopes <@ array['subscribers:read', 'subscribers:write', 'suppressions:read',
                        'suppressions:write', 'messages:send', 'campaigns:read',
                        'deliveries:read', 'events:write', 'segments:read',
                        'segments:write']::text[]);
