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
    /// The caller's input, refused: the text names the field (and quotes at most an excerpt).
    #[error("{0}")]
    Invalid(#[serde(serialize_with = "capped")] String),
    #[error("{0}")]
    Conflict(#[serde(serialize_with = "capped")] String),
    /// It was good once and is no more (an expired confirmation).
    #[error("{0}")]
    Expired(#[serde(serialize_with = "capped")] String),
    /// The request's body is over the limit (a chunked body found out while it was read).
    #[error("The request is too large.")]
    TooLarge,
    /// Too many attempts (sign-in throttling): the text says when to try again.
    #[error("{0}")]
    Throttled(#[serde(serialize_with = "capped")] String),
    #[error("Something went wrong on our side; it has been logged. Please try again.")]
    Internal,
    /// Transport problems seen by the client (network down, server restarting).
    #[error("The server could not be reached: {0}")]
    Transport(#[serde(serialize_with = "capped")] String),
}

/// A message as it is sent: at most `input::MESSAGE_MAX_CHARS` characters, whatever it quotes,
/// so an answer never carries a whole input back (and stays far below what the server's
/// error-status layer reads).
#[allow(clippy::ptr_arg)]
fn capped<S: serde::Serializer>(message: &String, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::domain::input::capped(message))
}

/// A value refused at the edge is the caller's mistake: 422, the field named.
impl From<crate::domain::input::InputError> for AppError {
    fn from(e: crate::domain::input::InputError) -> Self {
        AppError::Invalid(format!("{e}."))
    }
}

impl AppError {
    /// The HTTP status a server function answers with it: the caller's mistakes are 4xx, only
    /// the unexpected is 500. (The browser reads the body whatever the status.)
    pub fn status(&self) -> u16 {
        match self {
            AppError::NotSignedIn => 401,
            AppError::Forbidden => 403,
            AppError::NotFound => 404,
            AppError::Conflict(_) => 409,
            AppError::Invalid(_) => 422,
            AppError::Expired(_) => 410,
            AppError::TooLarge => 413,
            AppError::Throttled(_) => 429,
            AppError::Internal => 500,
            AppError::Transport(_) => 502,
        }
    }
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        // A body without a declared length meets the body limit only as it is read; the error
        // reaches us as text (http-body-util's LengthLimitError).
        if value.to_string().contains("length limit exceeded") {
            return AppError::TooLarge;
        }
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
    /// The log line names where the failing statement was run (the `?` that converted it), so
    /// a database error points at its query.
    #[track_caller]
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::RowNotFound => AppError::NotFound,
            other => {
                let at = std::panic::Location::caller();
                tracing::error!(error = %other, at = %format_args!("{}:{}", at.file(), at.line()), "database error");
                AppError::Internal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_over_the_limit_is_too_large_not_internal() {
        let e = AppError::from_server_fn_error(ServerFnErrorErr::Deserialization(
            "error reading body: length limit exceeded".into(),
        ));
        assert_eq!((e.clone(), e.status()), (AppError::TooLarge, 413));
    }

    #[test]
    fn a_message_is_sent_cut_short_however_much_input_it_quotes() {
        let long = AppError::Invalid(format!("Status: {} is not one.", "x".repeat(100_000)));
        let sent = serde_json::to_string(&long).unwrap();
        assert!(sent.len() < 2_100, "{} bytes", sent.len());
        let back: AppError = serde_json::from_str(&sent).unwrap();
        assert!(back.to_string().starts_with("Status: xxx"));
        let short = AppError::Conflict("Taken.".into());
        assert_eq!(
            serde_json::to_string(&short).unwrap(),
            r#"{"Conflict":"Taken."}"#
        );
    }

    #[test]
    fn internal_errors_do_not_leak_their_text() {
        let e = AppError::from_server_fn_error(ServerFnErrorErr::ServerError(
            "relation \"secret_table\" does not exist".into(),
        ));
        assert_eq!(e, AppError::Internal);
        assert!(!e.to_string().contains("secret_table"));
    }
}
