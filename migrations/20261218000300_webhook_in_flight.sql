-- Endpoints take up to 16 requests at once unless their owner chose otherwise (measured: 4 kept
-- a single endpoint to ~150 events/s, 16 to ~1,500). Nobody could choose before, so endpoints
-- still at the old default take the new one.
alter table webhook_out_endpoints alter column max_in_flight set default 16;
update webhook_out_endpoints set max_in_flight = 16 where max_in_flight = 4;
