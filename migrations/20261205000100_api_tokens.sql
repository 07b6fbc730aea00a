-- API tokens: what the sending SaaS's own code authenticates with at /api/v1. Only the
-- token's SHA-256 is stored (the token is shown once, at creation); revoking sets a time, so
-- the token's name, scopes and last use stay readable for the audit trail.
create table api_tokens (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    name text not null check (length(name) between 1 and 100),
    token_hash bytea not null unique check (length(token_hash) = 32),
    scopes text[] not null check (
        cardinality(scopes) between 1 and 20
        and scopes <@ array['subscribers:read', 'subscribers:write', 'suppressions:read',
                            'suppressions:write', 'messages:send', 'campaigns:read',
                            'deliveries:read']::text[]),
    created_by bigint references users (id),
    created_at timestamptz not null default now(),
    last_used_at timestamptz,
    revoked_at timestamptz
);
create index api_tokens_org on api_tokens (org_id, id);

-- An action taken with an API token is audited under it (there is no user behind it).
alter table audit_log add column api_token_id bigint references api_tokens (id);
