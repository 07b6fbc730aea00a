-- Transactional mail sent through the API (POST /api/v1/messages): templates an org edits in
-- the dashboard, every save a new version; and each request's message, keyed by the caller's
-- Idempotency-Key. The key is the delivery's job id (tx:<org>:<key>), so a retried request
-- finds the message it queued and never queues a second.
create table tx_templates (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    -- What API requests name it by: lowercase letters, digits, '-' and '_'.
    name text not null check (name ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    current_version int not null default 1 check (current_version >= 1),
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    unique (org_id, name),
    unique (org_id, id)
);
create trigger tx_templates_updated_at before update on tx_templates
    for each row execute function mailroom_set_updated_at();

-- Versions are never changed: a message names the version it was made from.
create table tx_template_versions (
    org_id bigint not null,
    template_id bigint not null,
    version int not null check (version >= 1),
    subject text not null check (length(subject) between 1 and 998),
    body_text text not null check (length(body_text) <= 200000),
    body_html text check (length(body_html) <= 500000), -- null: the message is text only
    -- A sample of the data requests send, for the preview.
    sample_data jsonb not null default '{}',
    author_id bigint,
    created_at timestamptz not null default now(),
    primary key (template_id, version),
    foreign key (org_id, template_id) references tx_templates (org_id, id),
    foreign key (org_id, author_id) references users (org_id, id)
);

-- One row per accepted request. The message is rendered when the request is accepted (a
-- template that does not render is the caller's 422, not a failed delivery later) and kept,
-- like a digest's content, so every attempt sends the same bytes.
create table tx_messages (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    idempotency_key text not null check (length(idempotency_key) between 1 and 200),
    -- SHA-256 of the request as received (canonical JSON): the same key with another payload
    -- is refused.
    request_hash bytea not null check (length(request_hash) = 32),
    template_id bigint not null,
    template_version int not null,
    recipient text not null,
    email_lower text not null,
    data jsonb not null default '{}',
    subject text not null,
    body_text text not null,
    body_html text,
    api_token_id bigint references api_tokens (id),
    created_at timestamptz not null default now(),
    unique (org_id, idempotency_key),
    unique (org_id, id),
    foreign key (template_id, template_version) references tx_template_versions (template_id, version)
);
create index tx_messages_email on tx_messages (org_id, email_lower);

alter table deliveries add column tx_message_id bigint;
alter table deliveries add constraint deliveries_tx_message
    foreign key (org_id, tx_message_id) references tx_messages (org_id, id);
alter table deliveries drop constraint deliveries_kind_check;
alter table deliveries add constraint deliveries_kind_check
    check (kind in ('test', 'digest', 'campaign', 'invite', 'transactional'));
alter table deliveries add constraint deliveries_transactional_refs
    check (kind <> 'transactional' or tx_message_id is not null);

-- Transactional mail goes between digests and campaigns: test and account mail 0, digests 1,
-- transactional 2, campaigns 3. Only rows that can still be claimed carry meaning.
alter table deliveries drop constraint deliveries_priority_check;
alter table deliveries add constraint deliveries_priority_check check (priority between 0 and 3);
update deliveries set priority = 3
where kind = 'campaign' and priority = 2 and status in ('queued', 'failed', 'unknown');
