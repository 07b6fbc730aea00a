-- Public sign-up with double opt-in. Each list has a sign-up page at /s/<signup_key> (a random
-- key, so lists cannot be enumerated); a submission creates an unconfirmed subscriber and a
-- pending sign-up, and queues one confirmation mail (job confirm:<org>:<sign-up id>); the
-- signed link in it confirms once.
alter table lists add column signup_key text;
update lists set signup_key = replace(gen_random_uuid()::text, '-', '') where signup_key is null;
alter table lists alter column signup_key set default replace(gen_random_uuid()::text, '-', '');
alter table lists alter column signup_key set not null;
alter table lists add constraint lists_signup_key unique (signup_key);

-- How and when each subscriber opted in, and confirmed: the evidence operators need (GDPR).
alter table subscribers add column optin_source text
    check (optin_source in ('dashboard', 'import', 'api', 'signup'));
alter table subscribers add column optin_ip text check (length(optin_ip) <= 64);
alter table subscribers add column optin_at timestamptz;
alter table subscribers add column confirmed_at timestamptz;
alter table subscribers add column confirmed_ip text check (length(confirmed_ip) <= 64);

create table signups (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    list_id bigint not null,
    subscriber_id bigint not null,
    source text not null check (source in ('signup', 'api')),
    ip text check (length(ip) <= 64),
    created_at timestamptz not null default now(),
    confirmed_at timestamptz,
    confirmed_ip text check (length(confirmed_ip) <= 64),
    unique (org_id, id),
    foreign key (org_id, list_id) references lists (org_id, id) on delete cascade,
    foreign key (org_id, subscriber_id) references subscribers (org_id, id) on delete cascade
);
-- One pending confirmation per list and subscriber: a double submit queues one mail.
create unique index signups_pending on signups (list_id, subscriber_id) where confirmed_at is null;
create index signups_subscriber on signups (org_id, subscriber_id);

-- Proof-of-work challenges already used: each is accepted once.
create table pow_spent (
    challenge text primary key check (length(challenge) <= 200),
    spent_at timestamptz not null default now()
);
create index pow_spent_at on pow_spent (spent_at);

-- The confirmation mail names its sign-up (no foreign key: a list's deletion takes its
-- sign-ups, and a confirmation still queued then fails with that reason).
alter table deliveries add column signup_id bigint;
alter table deliveries drop constraint deliveries_kind_check;
alter table deliveries add constraint deliveries_kind_check
    check (kind in ('test', 'digest', 'campaign', 'invite', 'transactional', 'confirm'));
alter table deliveries add constraint deliveries_confirm_refs
    check (kind <> 'confirm' or signup_id is not null);
