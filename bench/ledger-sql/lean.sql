-- A bound, not a design: the base schema without the seven secondary indexes the queue's own
-- statements do not use (the dashboard, retention and webhooks need them).
drop index if exists deliveries_org_list, deliveries_details_to_trim, deliveries_relay_id,
           deliveries_delivered_to, deliveries_campaign, deliveries_needing_attention,
           deliveries_digest;
