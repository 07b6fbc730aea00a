-- Retention's index as BRIN: finished rows are appended in finishing order, and a BRIN entry
-- is written only when a new row widens its page range's summary.
drop index deliveries_details_to_trim;
create index deliveries_finished_brin on deliveries using brin (finished_at);
