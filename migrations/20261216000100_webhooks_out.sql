-- Events out: an org's webhook endpoints, and one row per (endpoint, event) written by trigger in
-- the transaction that makes the change it reports, so no committed change goes unreported when
-- a process dies after its commit. The row's id is deterministic (the same change reported twice
-- is the same row) and is the `webhook-id` of every attempt.

create table webhook_out_endpoints (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    url text not null check (length(url) between 10 and 2000),
    event_types text[] not null check (
        cardinality(event_types) between 1 and 20
        and event_types <@ array['message.delivered', 'message.failed', 'message.unknown',
                                 'message.bounced', 'message.complained', 'webhook.test']::text[]),
    -- `whsec_` and the base64 of 32 random bytes. During a rotation the previous secret signs
    -- too, until `previous_secret_until`.
    secret text not null check (secret like 'whsec\_%'),
    previous_secret text check (previous_secret like 'whsec\_%'),
    previous_secret_until timestamptz,
    enabled boolean not null default true,
    disabled_reason text check (length(disabled_reason) <= 300),
    -- The first failed attempt since the last success: a day of failures disables the endpoint.
    failing_since timestamptz,
    max_in_flight int not null default 4 check (max_in_flight between 1 and 64),
    created_by bigint references users (id),
    created_at timestamptz not null default now(),
    unique (org_id, id),
    check ((previous_secret is null) = (previous_secret_until is null))
);
create index webhook_out_endpoints_org on webhook_out_endpoints (org_id, id);

create table webhook_out_messages (
    -- 'msg_' || md5(endpoint, event key): the `webhook-id` header, the same on every attempt.
    id text primary key,
    org_id bigint not null,
    endpoint_id bigint not null,
    event_type text not null,
    payload jsonb not null,
    status text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
    attempts int not null default 0,
    next_attempt_at timestamptz not null default now(),
    -- Held by a worker until then; a dead worker's row is due again once it passes.
    lease_until timestamptz,
    holder text,
    created_at timestamptz not null default now(),
    -- Retries stop three days after this: the event, or the owner's replay.
    retrying_since timestamptz not null default now(),
    finished_at timestamptz,
    foreign key (org_id, endpoint_id) references webhook_out_endpoints (org_id, id) on delete cascade
);
create index webhook_out_messages_due on webhook_out_messages (next_attempt_at) where status = 'pending';
create index webhook_out_messages_endpoint on webhook_out_messages (endpoint_id, next_attempt_at) where status = 'pending';
create index webhook_out_messages_recent on webhook_out_messages (endpoint_id, created_at desc);

-- Every attempt, for the endpoint's page: status, latency and the start of the answer.
create table webhook_out_attempts (
    id bigint generated always as identity primary key,
    org_id bigint not null,
    endpoint_id bigint not null,
    message_id text not null references webhook_out_messages (id) on delete cascade,
    attempt int not null,
    at timestamptz not null,
    http_status int,
    latency_ms int not null,
    error text check (length(error) <= 500),
    response text check (length(response) <= 1000),
    foreign key (org_id, endpoint_id) references webhook_out_endpoints (org_id, id) on delete cascade
);
create index webhook_out_attempts_endpoint on webhook_out_attempts (endpoint_id, id desc);
create index webhook_out_attempts_message on webhook_out_attempts (message_id);

create function webhook_time(t timestamptz) returns text language sql stable as $$
    select to_char(t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- A delivery reaching delivered, failed or unknown. Most orgs have no endpoint: the first test
-- keeps the delivery engine's statements from paying for more than one index probe.
create function webhook_deliveries_updated() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    insert into webhook_out_messages (id, org_id, endpoint_id, event_type, payload)
    select 'msg_' || md5(e.id || ':' || t.type || ':' || n.job_id || ':' || n.attempt),
           n.org_id, e.id, t.type,
           jsonb_build_object(
               'type', t.type,
               'timestamp', webhook_time(coalesce(n.finished_at, n.updated_at)),
               'data', jsonb_strip_nulls(jsonb_build_object(
                   'job_id', n.job_id,
                   'kind', n.kind,
                   'recipient', n.recipient,
                   'attempt', n.attempt,
                   'campaign_id', n.campaign_id,
                   'subscriber_id', n.subscriber_id,
                   'transactional_message_id', n.tx_message_id,
                   'reply', n.smtp_reply,
                   'error', n.last_error)))
    from new_rows n
    join old_rows o on o.job_id = n.job_id
    cross join lateral (select 'message.' || n.status as type) t
    join webhook_out_endpoints e on e.org_id = n.org_id and e.enabled and t.type = any (e.event_types)
    where n.status in ('delivered', 'failed', 'unknown') and n.status is distinct from o.status
    on conflict (id) do nothing;
    return null;
end $$;
create trigger deliveries_webhooks after update on deliveries
    referencing old table as old_rows new table as new_rows
    for each statement execute function webhook_deliveries_updated();

-- A relay's report of a bounce or a complaint (each recorded once, so each reported once). At
-- commit, so the event says what the report finally did (its effect is settled after the
-- insert, in the same transaction).
create function webhook_feedback_inserted() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    insert into webhook_out_messages (id, org_id, endpoint_id, event_type, payload)
    select 'msg_' || md5(e.id || ':' || t.type || ':event:' || n.id),
           n.org_id, e.id, t.type,
           jsonb_build_object(
               'type', t.type,
               'timestamp', webhook_time(n.received_at),
               'data', jsonb_strip_nulls(jsonb_build_object(
                   'job_id', n.job_id,
                   'kind', d.kind,
                   'recipient', d.recipient,
                   'campaign_id', d.campaign_id,
                   'subscriber_id', d.subscriber_id,
                   'transactional_message_id', d.tx_message_id,
                   'bounce', case n.kind when 'hard_bounce' then 'hard' when 'soft_bounce' then 'soft' end,
                   'source', n.source,
                   'status', n.status,
                   'diagnostic', n.diagnostic,
                   'suppressed', n.effect = 'suppressed')))
    from delivery_events n
    cross join lateral (
        select case when n.kind in ('hard_bounce', 'soft_bounce') then 'message.bounced'
                    when n.kind = 'complaint' then 'message.complained' end as type) t
    left join deliveries d on d.job_id = n.job_id
    join webhook_out_endpoints e on e.org_id = n.org_id and e.enabled and t.type = any (e.event_types)
    where n.id = new.id and t.type is not null
    on conflict (id) do nothing;
    return null;
end $$;
create constraint trigger delivery_events_webhooks after insert on delivery_events
    deferrable initially deferred
    for each row execute function webhook_feedback_inserted();
