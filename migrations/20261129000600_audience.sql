-- CSV imports into a list: one row per upload, its progress and its per-row errors. The rows
-- themselves are written in one transaction, so an import is all there or not at all.
create table imports (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    list_id bigint not null,
    user_id bigint not null,
    file_name text not null default '',
    status text not null default 'running' check (status in ('running', 'done', 'failed')),
    rows_read bigint not null default 0,
    created_subscribers bigint not null default 0,
    added_members bigint not null default 0,
    error_count bigint not null default 0,
    errors jsonb not null default '[]', -- the first errors: [{"row": n, "error": "…"}]
    message text, -- why a failed import imported nothing
    started_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    finished_at timestamptz,
    unique (org_id, id),
    foreign key (org_id, list_id) references lists (org_id, id) on delete cascade,
    foreign key (org_id, user_id) references users (org_id, id)
);
create index imports_org_time on imports (org_id, id desc);

-- Keyset pages of an org's suppressions, newest first.
create index suppressions_org_page on suppressions (org_id, created_at desc, email_lower desc);
