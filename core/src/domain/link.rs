//! What a set-password link is for.

text_enum! {
    /// Why a set-password link was sent (`password_tokens.purpose`): an invitation to a new
    /// user, or an owner's reset of a user's password.
    pub enum LinkPurpose ("a set-password link's purpose") {
        Invite = "invite",
        Reset = "reset",
    }
}
