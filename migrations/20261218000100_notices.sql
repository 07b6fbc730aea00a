-- Account notices: mail Mailroom itself sends an org's owners about their account (an event
-- webhook endpoint it turned off). The text is fixed when the notice is made, in the
-- transaction of the change it reports, so every owner's copy and every attempt say the same
-- and a process dying after that commit loses no notice.
create table notices (
    id bigint generated always as identity primary key,
    org_id bigint not null references orgs (id),
    subject text not null check (length(subject) between 1 and 200),
    body text not null check (length(body) <= 4000),
    -- The dashboard page the notice links to (under the public URL, added when sent).
    path text not null check (path like '/%'),
    created_at timestamptz not null default now(),
    unique (org_id, id)
);

alter table deliveries add column notice_id bigint;
alter table deliveries add constraint deliveries_notice
    foreign key (org_id, notice_id) references notices (org_id, id);
alter table deliveries drop constraint deliveries_kind_check;
alter table deliveries add constraint deliveries_kind_check
    check (kind in ('test', 'digest', 'campaign', 'invite', 'transactional', 'confirm', 'notice'));
alter table deliveries add constraint deliveries_notice_refs
    check (kind <> 'notice' or (notice_id is not null and user_id is not null));
