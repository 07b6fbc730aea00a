//! `TestOrg`: an organisation for a test, with its users by role and builders for what it
//! owns, so a test reads as what it needs (`org.campaign().to(&lists).approved()`) rather than
//! as tuple positions.

use app::db::campaign::edit::Audience;
use app::domain::{CampaignId, OrgId, Role, UserId};
use sqlx::PgPool;

use crate::support::test_app::TestApp;

/// A user of a [`TestOrg`], with the password it signs in with.
#[derive(Clone, Debug)]
pub struct TestUser {
    pub id: UserId,
    pub role: Role,
    pub email: String,
    pub password: String,
}

impl TestUser {
    /// A browser-like client signed in as this user.
    pub async fn signed_in(&self, app: &TestApp) -> reqwest::Client {
        crate::support::test_app::signed_in(app, &self.email, &self.password).await
    }
}

/// An organisation on a test database.
#[derive(Clone, Debug)]
pub struct TestOrg {
    pub pool: PgPool,
    pub id: OrgId,
    pub users: Vec<TestUser>,
}

impl TestOrg {
    /// An owner and an admin: the two people a campaign's four eyes need.
    pub async fn new(pool: &PgPool, slug: &str) -> TestOrg {
        TestOrg::with_roles(pool, slug, &[Role::Owner, Role::Admin]).await
    }

    /// One user per given role, in that order.
    pub async fn with_roles(pool: &PgPool, slug: &str, roles: &[Role]) -> TestOrg {
        let (id, users) = crate::support::helpers::org_with_users(pool, slug, roles).await;
        TestOrg {
            pool: pool.clone(),
            id: OrgId(id),
            users: users
                .into_iter()
                .zip(roles)
                .map(|((id, email, password), role)| TestUser {
                    id: UserId(id),
                    role: *role,
                    email,
                    password,
                })
                .collect(),
        }
    }

    /// The `n`th user (from 0) with `role`.
    pub fn user(&self, role: Role, n: usize) -> &TestUser {
        self.users
            .iter()
            .filter(|u| u.role == role)
            .nth(n)
            .unwrap_or_else(|| panic!("the org has no {role} number {n}"))
    }

    pub fn owner(&self) -> &TestUser {
        self.user(Role::Owner, 0)
    }

    /// The `n`th admin (from 0).
    pub fn admin(&self, n: usize) -> &TestUser {
        self.user(Role::Admin, n)
    }

    /// `n` subscribers over three overlapping lists, every 10th address also as an upper-cased
    /// second row ([`crate::support::fixtures::audience_of`]): (list ids, distinct addresses).
    pub async fn audience(&self, n: usize) -> (Vec<i64>, usize) {
        crate::support::fixtures::audience_of(&self.pool, self.id.0, n).await
    }

    /// An approved campaign ("Hello {{ name }}") to a fresh [`TestOrg::audience`] of `n`: its
    /// id and the distinct addresses it goes to.
    pub async fn approved_campaign_to_audience(&self, n: usize) -> (CampaignId, usize) {
        let (lists, n) = self.audience(n).await;
        let id = self
            .campaign()
            .to(&lists)
            .body("Hello {{ name }}")
            .approved()
            .await;
        (id, n)
    }

    /// An empty list.
    pub async fn list(&self, name: &str) -> i64 {
        let mut c = self.pool.acquire().await.unwrap();
        app::db::audience::create_list(&mut c, self.id.0, name)
            .await
            .unwrap()
    }

    /// A campaign of this org, written by its first user and approved by its first admin.
    pub fn campaign(&self) -> CampaignBuilder<'_> {
        CampaignBuilder {
            org: self,
            audience: Audience::default(),
            body: "Hi".into(),
            author: self.users[0].id,
        }
    }
}

/// A campaign to be made by [`TestOrg::campaign`].
pub struct CampaignBuilder<'a> {
    org: &'a TestOrg,
    audience: Audience,
    body: String,
    author: UserId,
}

impl CampaignBuilder<'_> {
    pub fn to(mut self, lists: &[i64]) -> Self {
        self.audience.lists = lists.to_vec();
        self
    }

    /// Also to the matches of these segments.
    pub fn and_segments(mut self, segments: &[i64]) -> Self {
        self.audience.segments = segments.to_vec();
        self
    }

    /// Leaving out the members of these lists and the matches of these segments.
    pub fn excluding(mut self, lists: &[i64], segments: &[i64]) -> Self {
        self.audience.excluded_lists = lists.to_vec();
        self.audience.excluded_segments = segments.to_vec();
        self
    }

    pub fn body(mut self, body: &str) -> Self {
        self.body = body.into();
        self
    }

    /// Submitted, and approved by the org's first admin to go out now.
    pub async fn approved(self) -> CampaignId {
        let approver = self.org.admin(0).id;
        let (pool, org) = (&self.org.pool, self.org.id.0);
        let id = crate::support::fixtures::approved(
            pool,
            org,
            self.author.0,
            approver.0,
            &self.audience,
            &self.body,
        )
        .await;
        CampaignId(id)
    }
}
