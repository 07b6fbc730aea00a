-- The IMAP bounce poller's place in each mailbox it reads: the mailbox's UIDVALIDITY and the
-- highest UID whose report is recorded. Advanced in the same transaction as the report's
-- events, so a crash before the message is flagged only re-reads it, and the re-read dedupes.
create table imap_cursors (
    mailbox text primary key check (length(mailbox) <= 500),
    uid_validity bigint not null check (uid_validity >= 0),
    last_uid bigint not null check (last_uid >= 0),
    updated_at timestamptz not null default now()
);
