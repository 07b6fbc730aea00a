//! Captured mail: with no SMTP server configured, the delivery worker writes each message as an
//! `.eml` file under the data directory instead, and the dashboard reads it back. Both sides
//! derive the file's place from the org and the job id here, so no path is ever stored or taken
//! from a request.

use std::path::{Path, PathBuf};

/// `<dir>/<org_id>/<job id, escaped>.eml`.
pub fn path_for(dir: &Path, org_id: i64, job_id: &str) -> PathBuf {
    dir.join(org_id.to_string())
        .join(format!("{}.eml", file_stem(job_id)))
}

/// The job id with every byte outside a safe set percent-encoded: injective, so two jobs never
/// share a file, and never a path separator or a leading dot.
fn file_stem(job_id: &str) -> String {
    let mut out = String::with_capacity(job_id.len());
    for b in job_id.bytes() {
        let safe =
            b.is_ascii_alphanumeric() || b"_@+=:-".contains(&b) || (b == b'.' && !out.is_empty());
        if safe {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Removes the captured copies of these jobs of `org_id` (an erasure's, once committed): a job
/// with no copy is passed over, a copy that cannot be removed is logged with its path. Answers
/// how many files were removed.
pub async fn remove(dir: &Path, org_id: i64, job_ids: &[String]) -> usize {
    let mut removed = 0;
    for job_id in job_ids {
        let path = path_for(dir, org_id, job_id);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::error!(error = %e, path = %path.display(), "cannot remove an erased person's captured message")
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_per_org_and_never_escape_the_directory() {
        let dir = Path::new("/data/captured");
        assert_eq!(
            path_for(dir, 7, "test:7:x:ann@example.org"),
            Path::new("/data/captured/7/test:7:x:ann@example.org.eml")
        );
        let odd = path_for(dir, 7, "test:../../etc/passwd%");
        assert_eq!(odd.parent(), Some(Path::new("/data/captured/7")));
        assert!(odd
            .to_string_lossy()
            .ends_with("test:..%2F..%2Fetc%2Fpasswd%25.eml"));
        assert_eq!(file_stem(".x"), "%2Ex");
        // Injective: the escape character itself is escaped.
        assert_ne!(file_stem("a%2Fb"), file_stem("a/b"));
    }
}
