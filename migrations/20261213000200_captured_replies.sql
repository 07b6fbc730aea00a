-- A captured message's reply named the server's directory, and the dashboard and the REST API
-- show replies: new ones name the file alone, and so do those recorded before.
update deliveries
    set smtp_reply = regexp_replace(smtp_reply, '^captured to .*/([^/]*)$', 'captured as \1')
    where smtp_reply like 'captured to /%';
update deliveries
    set last_error = regexp_replace(last_error, '^cannot capture to .*/([^/]*\.eml): ', 'cannot capture as \1: ')
    where last_error like 'cannot capture to /%';
