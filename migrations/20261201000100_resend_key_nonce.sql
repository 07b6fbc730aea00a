-- A forced resend's key carries a random nonce (manual-<unix seconds>-<16 hex digits>), so two
-- dialogs opened in the same second are two keys. Keys without one (earlier resends, and
-- replicas not yet upgraded) stay valid.
alter table digest_sends drop constraint digest_sends_week_key_check;
alter table digest_sends add constraint digest_sends_week_key_check
    check (week_key ~ '^([0-9]{4}-W[0-9]{2}|manual-[0-9]+(-[0-9a-f]{16})?)$');
