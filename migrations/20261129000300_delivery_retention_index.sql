-- Retention (a leader job) clears details of long-finished deliveries in batches: find them
-- without scanning the whole table each batch.
create index deliveries_details_to_trim on deliveries (finished_at)
    where smtp_reply is not null or last_error is not null;
