text_enum! {
    /// A dashboard user's role within their organisation. Stored as text (`users.role`).
    pub enum Role ("a role") {
        Owner = "owner",
        Admin = "admin",
        Viewer = "viewer",
    }
}

impl Role {
    /// Owners and admins change things; viewers only look.
    pub fn can_act(self) -> bool {
        matches!(self, Role::Owner | Role::Admin)
    }

    /// Only owners manage the organisation itself: its users and its settings.
    pub fn manages_org(self) -> bool {
        matches!(self, Role::Owner)
    }

    /// Whose weekly-digest opt-in this user may change: an owner anyone's, an admin their own.
    pub fn may_set_digest_opt_in(self, me: i64, of: i64) -> bool {
        match self {
            Role::Owner => true,
            Role::Admin => me == of,
            Role::Viewer => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn owners_set_anyones_digest_opt_in_admins_only_their_own() {
        assert!(Role::Owner.may_set_digest_opt_in(1, 2));
        assert!(Role::Admin.may_set_digest_opt_in(2, 2));
        assert!(!Role::Admin.may_set_digest_opt_in(1, 2));
        assert!(!Role::Viewer.may_set_digest_opt_in(3, 3));
    }

    use super::*;

    #[test]
    fn round_trips_and_rejects_unknown() {
        for r in [Role::Owner, Role::Admin, Role::Viewer] {
            assert_eq!(r.as_str().parse::<Role>().unwrap(), r);
        }
        assert!("root".parse::<Role>().unwrap_err().contains("root"));
        assert!(!Role::Viewer.can_act());
        assert!(Role::Admin.can_act());
    }

    #[test]
    fn only_owners_manage_the_org() {
        assert!(Role::Owner.manages_org());
        assert!(!Role::Admin.manages_org());
        assert!(!Role::Viewer.manages_org());
    }
}
