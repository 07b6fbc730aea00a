//! The one error type every server function returns. It separates the user's mistake (shown as
//! written) from the unexpected (logged on the server, shown as a generic line): a database or
//! I/O error never reaches the browser as text.

use leptos::server_fn::codec::JsonEncoding;
use leptos::server_fn::error::{FromServerFnError, ServerFnErrorErr};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AppError {
    #[error("Please sign in.")]
    NotSignedIn,
    #[error("Your role does not allow this action.")]
    Forbidden,
    /// Another organisation's object looks exactly like a missing one.
    #[error("Not found.")]
    NotFound,
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("Something went wrong on our side; it has been logged. Please try again.")]
    Internal,
    /// Transport problems seen by the client (network down, server restarting).
    #[error("The server could not be reached: {0}")]
    Transport(String),
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        match value {
            ServerFnErrorErr::Request(e) => AppError::Transport(e),
            ServerFnErrorErr::Args(e) | ServerFnErrorErr::MissingArg(e) => {
                AppError::Invalid(format!("The form was incomplete or malformed: {e}"))
            }
            other => {
                #[cfg(feature = "ssr")]
                tracing::error!(error = %other, "server function failed");
                #[cfg(not(feature = "ssr"))]
                let _ = other;
                AppError::Internal
            }
        }
    }
}

#[cfg(feature = "ssr")]
impl From<sqlx::Error> for AppError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::RowNotFound => AppError::NotFound,
            other => {
                tracing::error!(error = %other, "database error");
                AppError::Internal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_errors_do_not_leak_their_text() {
        let e = AppError::from_server_fn_error(ServerFnErrorErr::ServerError(
            "relation \"secret_table\" does not exist".into(),
        ));
        assert_eq!(e, AppError::Internal);
        assert!(!e.to_string().contains("secret_table"));
    }
}
