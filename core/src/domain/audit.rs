//! What the audit log records: each action a typed name, stored as its text.

use super::Transition;

text_enum! {
    /// An action the audit log records (its `action` column).
    pub enum AuditAction ("an audit action") {
        ApiTokenCreate = "api_token.create",
        ApiTokenRevoke = "api_token.revoke",
        AutomationCreate = "automation.create",
        AutomationEdit = "automation.edit",
        AutomationApprove = "automation.approve",
        AutomationPause = "automation.pause",
        AutomationResume = "automation.resume",
        AutomationStop = "automation.stop",
        AutomationEnrol = "automation.enrol",
        AutomationRemove = "automation.remove",
        CampaignAutoPause = "campaign.auto_pause",
        CampaignClone = "campaign.clone",
        CampaignCreate = "campaign.create",
        CampaignDelete = "campaign.delete",
        CampaignEdit = "campaign.edit",
        CampaignRelayPause = "campaign.relay_pause",
        CampaignRelayResume = "campaign.relay_resume",
        CampaignRestore = "campaign.restore",
        CampaignTest = "campaign.test",
        CampaignSubmit = "campaign.submit",
        CampaignApprove = "campaign.approve",
        CampaignReject = "campaign.reject",
        CampaignPause = "campaign.pause",
        CampaignResume = "campaign.resume",
        CampaignCancel = "campaign.cancel",
        CampaignStart = "campaign.start",
        CampaignFinish = "campaign.finish",
        DeliveryRetry = "delivery.retry",
        DemoSeed = "demo.seed",
        DigestOptIn = "digest.opt_in",
        DigestResend = "digest.resend",
        DigestSchedule = "digest.schedule",
        ListCreate = "list.create",
        ListDelete = "list.delete",
        ListImport = "list.import",
        ListRename = "list.rename",
        OrgAdd = "org.add",
        SegmentDelete = "segment.delete",
        SegmentSave = "segment.save",
        SettingsApproval = "settings.approval",
        SettingsBounceDomain = "settings.bounce_domain",
        SettingsClickTracking = "settings.click_tracking",
        SettingsOpenTracking = "settings.open_tracking",
        SettingsQuietHours = "settings.quiet_hours",
        SettingsBouncePolicy = "settings.bounce_policy",
        SettingsDkim = "settings.dkim",
        SettingsDkimKey = "settings.dkim_key",
        SettingsDkimEd25519Key = "settings.dkim_ed25519_key",
        SettingsEventRetention = "settings.event_retention",
        SettingsReturnPath = "settings.return_path",
        SettingsSender = "settings.sender",
        SubscriberAdd = "subscriber.add",
        SubscriberBulkUpsert = "subscriber.bulk_upsert",
        SubscriberConfirm = "subscriber.confirm",
        SubscriberEdit = "subscriber.edit",
        SubscriberErase = "subscriber.erase",
        SubscriberJoin = "subscriber.join",
        SubscriberLeave = "subscriber.leave",
        SubscriberPreferences = "subscriber.preferences",
        SubscriberRemove = "subscriber.remove",
        SubscriberResubscribe = "subscriber.resubscribe",
        SubscriberSignup = "subscriber.signup",
        SuppressionAdd = "suppression.add",
        SuppressionRemove = "suppression.remove",
        EndpointCreate = "webhook_endpoint.create",
        EndpointDelete = "webhook_endpoint.delete",
        EndpointEnable = "webhook_endpoint.enable",
        EndpointDisable = "webhook_endpoint.disable",
        EndpointRotate = "webhook_endpoint.rotate",
        EndpointReplay = "webhook_endpoint.replay",
        EndpointTest = "webhook_endpoint.test",
        TemplateCreate = "template.create",
        TemplateSave = "template.save",
        UserAcceptInvite = "user.accept_invite",
        UserAdd = "user.add",
        UserDisable = "user.disable",
        UserEnable = "user.enable",
        UserInvite = "user.invite",
        UserReinvite = "user.reinvite",
        UserResetPassword = "user.reset_password",
        UserRole = "user.role",
        UserSetPassword = "user.set_password",
        WebhookCreate = "webhook.create",
        WebhookRevoke = "webhook.revoke",
    }
}

impl AuditAction {
    /// The entry of an admin's (or a worker's) change of a campaign's state.
    pub fn of_campaign(t: Transition) -> AuditAction {
        match t {
            Transition::Submit => AuditAction::CampaignSubmit,
            Transition::Approve => AuditAction::CampaignApprove,
            Transition::Reject => AuditAction::CampaignReject,
            Transition::Pause => AuditAction::CampaignPause,
            Transition::Resume => AuditAction::CampaignResume,
            Transition::Cancel => AuditAction::CampaignCancel,
            Transition::Start => AuditAction::CampaignStart,
            Transition::Finish => AuditAction::CampaignFinish,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transition_is_recorded_as_campaign_and_its_verb() {
        for t in Transition::BY_ADMINS
            .into_iter()
            .chain([Transition::Start, Transition::Finish])
        {
            assert_eq!(
                AuditAction::of_campaign(t).as_str(),
                format!("campaign.{}", t.verb())
            );
        }
    }
}
