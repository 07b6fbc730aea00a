-- Settings: invitations and password resets (issue 6). Expand only: older replicas keep working.

-- Invitations and reset links go out through the delivery engine as their own kind.
alter table deliveries drop constraint deliveries_kind_check;
alter table deliveries add constraint deliveries_kind_check
    check (kind in ('test', 'digest', 'campaign', 'invite'));
alter table deliveries add constraint deliveries_invite_refs
    check (kind <> 'invite' or user_id is not null);

-- One row per set-password link (an invitation or a reset). The link's token is never stored:
-- only its SHA-256, like session tokens. Single use (`used_at`), expiring, and a newer link for
-- the same user retires the older ones.
create table password_tokens (
    id bigint generated always as identity primary key,
    org_id bigint not null,
    user_id bigint not null,
    purpose text not null check (purpose in ('invite', 'reset')),
    token_hash bytea unique, -- set in the transaction that creates the row (the token names the id)
    created_by bigint,
    created_at timestamptz not null default now(),
    expires_at timestamptz not null,
    used_at timestamptz,
    unique (org_id, id),
    foreign key (org_id, user_id) references users (org_id, id) on delete cascade,
    foreign key (org_id, created_by) references users (org_id, id)
);
create index password_tokens_user on password_tokens (org_id, user_id) where used_at is null;

-- The audit log page pages newest first by id, optionally for one action or one actor.
create index audit_log_org_id on audit_log (org_id, id desc);
create index audit_log_org_action on audit_log (org_id, action, id desc);
create index audit_log_org_actor on audit_log (org_id, actor_id, id desc);
