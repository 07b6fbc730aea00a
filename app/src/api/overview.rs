use crate::error::AppError;
use leptos::prelude::*;

pub use crate::model::overview::{Overview, RecentAction};

#[server(endpoint = "overview")]
pub async fn get_overview() -> Result<Overview, AppError> {
    let figures = super::figures::figures();
    let (me, pool) = super::signed_in().await?;
    figures
        .overview
        .get(me.org_id, async {
            Ok(crate::db::overview::for_org(&pool, me.org_id).await?)
        })
        .await
}
