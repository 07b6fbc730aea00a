-- When the digest ticker next needs to look at an org: the instant its next weekly slot
-- passes, written when a tick looks at it. A tick then reads only the orgs that are due, so
-- its cost follows them, not every org stored (a tick walks them in this index's order). The
-- epoch (a new org, a changed schedule) means "at the next tick"; a due time that is late (the
-- ticker was down) is still due, and the claim records the weeks missed meanwhile.
alter table orgs add column digest_due_at timestamptz not null default 'epoch';
create index orgs_digest_due on orgs (digest_due_at, id);

-- A changed schedule or time zone is looked at again by the next tick, whoever changed it.
create function mailroom_digest_rescheduled() returns trigger language plpgsql as $$
begin
    new.digest_due_at := 'epoch';
    return new;
end $$;
create trigger orgs_digest_rescheduled before update of timezone, digest_weekday, digest_hour on orgs
    for each row
    when (old.timezone is distinct from new.timezone
          or old.digest_weekday is distinct from new.digest_weekday
          or old.digest_hour is distinct from new.digest_hour)
    execute function mailroom_digest_rescheduled();
