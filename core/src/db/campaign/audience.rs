//! Who a campaign reaches, defined once: building its recipients (`sends::materialise`),
//! counting them for the approver (`edit::estimate`) and picking the preview's sample
//! recipient (`edit::sample_recipient`) all use it, so they cannot disagree.

/// The subscribers (`s`) a campaign reaches, one row per list membership (callers take one per
/// address): on any of its lists, confirmed, not erased, not suppressed. `$1` is the org, `$2`
/// the campaign. A macro so the statements that use it stay compile-time constants.
macro_rules! audience_rows {
    () => {
        "from campaign_lists cl
         join list_members lm on lm.org_id = cl.org_id and lm.list_id = cl.list_id
         join subscribers s on s.org_id = lm.org_id and s.id = lm.subscriber_id
         where cl.org_id = $1 and cl.campaign_id = $2::bigint
           and s.status = 'confirmed' and s.erased_at is null
           and not exists (select 1 from suppressions x
                           where x.org_id = s.org_id and x.email_lower = s.email_lower)"
    };
}
pub(crate) use audience_rows;
