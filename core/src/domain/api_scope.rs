text_enum! {
    /// What an API token may do (`api_tokens.scopes`; the column's check lists the same words).
    pub enum ApiScope ("an API scope") {
        SubscribersRead = "subscribers:read",
        SubscribersWrite = "subscribers:write",
        SuppressionsRead = "suppressions:read",
        SuppressionsWrite = "suppressions:write",
        MessagesSend = "messages:send",
        CampaignsRead = "campaigns:read",
        DeliveriesRead = "deliveries:read",
        EventsWrite = "events:write",
        SegmentsRead = "segments:read",
        SegmentsWrite = "segments:write",
        AutomationsRead = "automations:read",
        AutomationsWrite = "automations:write",
    }
}

impl ApiScope {
    /// What the scope allows, in the words Settings shows.
    pub fn describe(self) -> &'static str {
        match self {
            ApiScope::SubscribersRead => "read subscribers",
            ApiScope::SubscribersWrite => "create, change and delete subscribers",
            ApiScope::SuppressionsRead => "check the suppression list",
            ApiScope::SuppressionsWrite => "add to and remove from the suppression list",
            ApiScope::MessagesSend => "send transactional mail",
            ApiScope::CampaignsRead => "read campaigns and their progress",
            ApiScope::DeliveriesRead => "look up deliveries",
            ApiScope::EventsWrite => "record events about subscribers",
            ApiScope::SegmentsRead => "read segments, their counts and members",
            ApiScope::SegmentsWrite => "create, change and delete segments",
            ApiScope::AutomationsRead => "read automations and who is in them",
            ApiScope::AutomationsWrite => "enrol people in automations and take them out",
        }
    }

    /// The scopes named in `words` (each once, in the order of [`ApiScope::ALL`]); an unknown
    /// word or none at all is an error naming it.
    pub fn parse_list<S: AsRef<str>>(words: &[S]) -> Result<Vec<ApiScope>, String> {
        let mut picked = Vec::new();
        for w in words {
            let s: ApiScope = w.as_ref().trim().parse()?;
            if !picked.contains(&s) {
                picked.push(s);
            }
        }
        if picked.is_empty() {
            return Err("Choose at least one scope.".into());
        }
        picked.sort_by_key(|s| Self::ALL.iter().position(|a| a == s));
        Ok(picked)
    }
}

#[cfg(test)]
mod tests {
    use super::ApiScope;

    #[test]
    fn scope_lists_are_deduplicated_ordered_and_checked() {
        assert_eq!(
            ApiScope::parse_list(&["messages:send", "subscribers:read", "messages:send"]),
            Ok(vec![ApiScope::SubscribersRead, ApiScope::MessagesSend])
        );
        let e = ApiScope::parse_list(&["subscribers:admin"]).unwrap_err();
        assert!(
            e.contains("\"subscribers:admin\" is not an API scope"),
            "{e}"
        );
        assert!(ApiScope::parse_list::<&str>(&[]).is_err());
        assert_eq!(
            ApiScope::ALL.len(),
            12,
            "the migration's check lists each scope"
        );
    }
}
