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
                                 'message.bounced', 'message.complained',
                                 'subscriber.unsubscribed', 'subscriber.suppressed',
                                 'subscriber.confirmed', 'subscriber.erased',
                                 'campaign.sent', 'campaign.paused', 'webhook.test']::text[]),
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
create index webhook_out_messages_endpoint on webhook_out_messages (endpoint_id, next_attempt_at) where status = 'pending';
-- What an endpoint has in flight (its room under max_in_flight): only the leased rows.
create index webhook_out_messages_leased on webhook_out_messages (endpoint_id, lease_until)
    where status = 'pending' and lease_until is not null;
create index webhook_out_messages_recent on webhook_out_messages (endpoint_id, created_at desc);
-- Retention: settled events by age.
create index webhook_out_messages_settled on webhook_out_messages (finished_at) where status <> 'pending';
-- An erasure reads the org's events for the address.
create index webhook_out_messages_org on webhook_out_messages (org_id);

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

-- One row per (endpoint, event) for the org's enabled endpoints that asked for `type`: the
-- shared tail of the triggers below. `events` holds (org_id, type, key, timestamp, data).
create function webhook_fan_out(events jsonb) returns void language sql as $$
    insert into webhook_out_messages (id, org_id, endpoint_id, event_type, payload)
    select 'msg_' || md5(e.id || ':' || (x.ev ->> 'type') || ':' || (x.ev ->> 'key')),
           (x.ev ->> 'org_id')::bigint, e.id, x.ev ->> 'type',
           jsonb_build_object('type', x.ev ->> 'type', 'timestamp', x.ev ->> 'timestamp',
                              'data', jsonb_strip_nulls(x.ev -> 'data'))
    from jsonb_array_elements(events) as x(ev)
    join webhook_out_endpoints e
      on e.org_id = (x.ev ->> 'org_id')::bigint and e.enabled
     and (x.ev ->> 'type') = any (e.event_types)
    on conflict (id) do nothing
$$;

-- A delivery reaching delivered, failed or unknown (each attempt's outcome once). Most orgs have
-- no endpoint: the first test keeps the delivery engine's statements from paying more than one
-- probe when no org has one, and the second builds events only for the orgs that do.
create function webhook_deliveries_updated() returns trigger language plpgsql as $$
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
            'subscriber_id', n.subscriber_id,
            'transactional_message_id', n.tx_message_id,
            'reply', n.smtp_reply,
            'error', n.last_error))), '[]'))
    from new_rows n
    join old_rows o on o.job_id = n.job_id
    where n.status in ('delivered', 'failed', 'unknown') and n.status is distinct from o.status
      -- Only the rows of orgs with an endpoint are built into events.
      and exists (select 1 from webhook_out_endpoints e where e.org_id = n.org_id and e.enabled);
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
    perform webhook_fan_out(coalesce(jsonb_agg(jsonb_build_object(
        'org_id', n.org_id,
        'type', case when n.kind = 'complaint' then 'message.complained' else 'message.bounced' end,
        'key', 'event:' || n.id,
        'timestamp', webhook_time(n.received_at),
        'data', jsonb_build_object(
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
            'suppressed', n.effect = 'suppressed'))), '[]'))
    from delivery_events n
    left join deliveries d on d.job_id = n.job_id
    where n.id = new.id and n.kind in ('hard_bounce', 'soft_bounce', 'complaint');
    return null;
end $$;
create constraint trigger delivery_events_webhooks after insert on delivery_events
    deferrable initially deferred
    for each row execute function webhook_feedback_inserted();

-- An address suppressed: an unsubscribe, or a bounce, complaint, import or an admin's entry.
create function webhook_suppressions_inserted() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    perform webhook_fan_out(coalesce(jsonb_agg(jsonb_build_object(
        'org_id', n.org_id,
        'type', case n.reason when 'unsubscribed' then 'subscriber.unsubscribed'
                              else 'subscriber.suppressed' end,
        'key', n.email_lower || ':' || extract(epoch from n.created_at),
        'timestamp', webhook_time(n.created_at),
        'data', jsonb_build_object('email', n.email_lower, 'reason', n.reason,
                                   'source', nullif(n.source, '')))), '[]'))
    from new_rows n;
    return null;
end $$;
create trigger suppressions_webhooks after insert on suppressions
    referencing new table as new_rows
    for each statement execute function webhook_suppressions_inserted();

-- A subscriber confirmed (double opt-in) or erased. An erased subscriber's event names only
-- the id: the address is gone.
create function webhook_subscribers_updated() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    perform webhook_fan_out(coalesce(jsonb_agg(x.event), '[]'))
    from (
        select jsonb_build_object(
            'org_id', n.org_id, 'type', 'subscriber.confirmed', 'key', n.id,
            'timestamp', webhook_time(coalesce(n.confirmed_at, n.updated_at)),
            'data', jsonb_build_object('subscriber_id', n.id, 'email', n.email,
                                       'external_id', n.external_id)) as event
        from new_rows n join old_rows o on o.id = n.id
        where n.status = 'confirmed' and o.status = 'unconfirmed' and n.erased_at is null
        union all
        select jsonb_build_object(
            'org_id', n.org_id, 'type', 'subscriber.erased', 'key', n.id,
            'timestamp', webhook_time(n.erased_at),
            'data', jsonb_build_object('subscriber_id', n.id))
        from new_rows n join old_rows o on o.id = n.id
        where n.erased_at is not null and o.erased_at is null
    ) x;
    return null;
end $$;
create trigger subscribers_webhooks after update on subscribers
    referencing old table as old_rows new table as new_rows
    for each statement execute function webhook_subscribers_updated();

-- A campaign finished sending, or paused (by an admin, or by itself at a bounce limit).
create function webhook_campaigns_updated() returns trigger language plpgsql as $$
begin
    if not exists (select 1 from webhook_out_endpoints where enabled) then
        return null;
    end if;
    perform webhook_fan_out(coalesce(jsonb_agg(jsonb_build_object(
        'org_id', n.org_id, 'type', 'campaign.' || n.status,
        'key', n.id || ':' || extract(epoch from n.updated_at),
        'timestamp', webhook_time(n.updated_at),
        'data', jsonb_build_object('campaign_id', n.id, 'name', n.name))), '[]'))
    from new_rows n join old_rows o on o.id = n.id
    where n.status in ('sent', 'paused') and n.status is distinct from o.status;
    return null;
end $$;
create trigger campaigns_webhooks after update on campaigns
    referencing old table as old_rows new table as new_rows
    for each statement execute function webhook_campaigns_updated();
