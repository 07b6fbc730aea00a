//! What a failover of the database can cost Mailroom, judged from what the primary reports of
//! its replication. Exactly-once across a failover needs every commit Mailroom acted on (a
//! claim, a body-start mark, an outcome) to be on the standby that takes over: only synchronous
//! replication promises that.

text_enum! {
    /// The durability of Mailroom's commits against the loss of the primary.
    pub enum Durability ("a database durability") {
        /// No standby streams from the primary: there is nothing to fail over to (a managed
        /// service's own standby may be invisible to Mailroom).
        NoStandby = "no_standby",
        /// Standbys stream, but Mailroom's commits do not wait for any of them: a failover can
        /// lose the last commits.
        Asynchronous = "asynchronous",
        /// Each of Mailroom's commits waits until a standby holds it.
        Synchronous = "synchronous",
        /// Commits must wait for a synchronous standby, and none is connected: they wait
        /// until one is.
        SynchronousWaiting = "synchronous_waiting",
        /// Standbys stream, but Mailroom's database role may not see whether they are
        /// synchronous (PostgreSQL shows that to members of `pg_monitor`).
        Unknown = "unknown",
    }
}

/// What the primary reports: Mailroom's own session's `synchronous_commit`, the server's
/// `synchronous_standby_names`, and the standbys in `pg_stat_replication`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplicationReading {
    pub synchronous_commit: String,
    pub synchronous_standby_names: String,
    /// Standbys connected to the primary.
    pub standbys: i64,
    /// Of those, the ones whose flush a commit waits for (`sync` or `quorum`).
    pub synchronous_standbys: i64,
    /// Of those, the ones whose state this role may not read.
    pub hidden: i64,
}

impl Durability {
    pub fn of(r: &ReplicationReading) -> Durability {
        // `local` and `off` commit without waiting for any standby, whatever is configured.
        let waits = !r.synchronous_standby_names.trim().is_empty()
            && matches!(
                r.synchronous_commit.as_str(),
                "on" | "remote_write" | "remote_apply"
            );
        match (waits, r.standbys) {
            (false, 0) => Durability::NoStandby,
            (false, _) => Durability::Asynchronous,
            (true, _) if r.synchronous_standbys >= required(&r.synchronous_standby_names) => {
                Durability::Synchronous
            }
            (true, _) if r.hidden > 0 => Durability::Unknown,
            (true, _) => Durability::SynchronousWaiting,
        }
    }

    /// What the operator should know, when there is something to know.
    pub fn warning(self) -> Option<&'static str> {
        match self {
            Durability::NoStandby | Durability::Synchronous => None,
            Durability::Asynchronous => Some(
                "the database's standbys are asynchronous: if the primary is lost and a standby \
                 promoted, Mailroom's last commits can be lost with it, and a message whose \
                 body-start mark was lost may be sent a second time (docs/operations.md shows \
                 the synchronous set-up)",
            ),
            Durability::SynchronousWaiting => Some(
                "synchronous replication is configured but no synchronous standby is connected: \
                 every commit waits until one is, so mail stops",
            ),
            Durability::Unknown => Some(
                "standbys are connected but Mailroom's database role may not see whether they \
                 are synchronous: grant it pg_monitor",
            ),
        }
    }

    /// One line for the dashboard.
    pub fn describe(self) -> &'static str {
        match self {
            Durability::NoStandby => "no standby: a single database",
            Durability::Asynchronous => {
                "asynchronous standby: a failover can lose the last commits"
            }
            Durability::Synchronous => {
                "synchronous standby: a failover keeps every commit Mailroom acted on"
            }
            Durability::SynchronousWaiting => {
                "synchronous standby configured but none connected: commits wait"
            }
            Durability::Unknown => "standbys connected, their mode hidden from Mailroom",
        }
    }
}

/// How many standbys a commit waits for under `synchronous_standby_names`: `FIRST n (…)`,
/// `ANY n (…)` or the older `n (…)` name n; a plain list names one.
fn required(names: &str) -> i64 {
    let names = names.trim();
    let upper = names.to_ascii_uppercase();
    let counted = upper
        .strip_prefix("FIRST")
        .or_else(|| upper.strip_prefix("ANY"))
        .unwrap_or(&upper)
        .trim_start();
    let digits: String = counted.chars().take_while(char::is_ascii_digit).collect();
    match counted[digits.len()..].trim_start().starts_with('(') {
        true => digits.parse().unwrap_or(1),
        false => 1,
    }
}

text_enum! {
    /// Why the database refuses Mailroom's writes, when the cause lies with the database
    /// itself rather than with what was written.
    pub enum WriteTrouble ("a database write failure") {
        /// The disk holding its data is full (SQLSTATE 53100).
        DiskFull = "disk_full",
        /// It ran out of memory (53200).
        OutOfMemory = "out_of_memory",
        /// It has no connection slot left (53300).
        NoConnectionSlots = "no_connection_slots",
        /// It takes no writes: a standby, or read-only (25006).
        ReadOnly = "read_only",
        /// It is shutting down or restarting (57P01–57P03).
        ShuttingDown = "shutting_down",
        /// It cannot be reached: the connection failed or none could be had in time.
        Unreachable = "unreachable",
    }
}

impl WriteTrouble {
    /// The trouble an error's SQLSTATE names, if it is the database's own.
    pub fn of_sqlstate(code: &str) -> Option<WriteTrouble> {
        Some(match code {
            "53100" => WriteTrouble::DiskFull,
            "53200" => WriteTrouble::OutOfMemory,
            "53300" => WriteTrouble::NoConnectionSlots,
            "25006" => WriteTrouble::ReadOnly,
            "57P01" | "57P02" | "57P03" => WriteTrouble::ShuttingDown,
            c if c.starts_with("08") => WriteTrouble::Unreachable,
            _ => return None,
        })
    }

    pub fn describe(self) -> &'static str {
        match self {
            WriteTrouble::DiskFull => "the database's disk is full",
            WriteTrouble::OutOfMemory => "the database is out of memory",
            WriteTrouble::NoConnectionSlots => "the database has no free connection slot",
            WriteTrouble::ReadOnly => "the database takes no writes (a standby, or read-only)",
            WriteTrouble::ShuttingDown => "the database is shutting down or restarting",
            WriteTrouble::Unreachable => "the database cannot be reached",
        }
    }
}

/// This process's workers cannot write to the database, since when and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WritesFailing {
    pub trouble: WriteTrouble,
    pub since: chrono::DateTime<chrono::Utc>,
}

/// What the dashboard shows of the database: the durability of its commits, and whether this
/// process's workers can write to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DatabaseStatus {
    pub durability: Durability,
    pub writes_failing: Option<WritesFailing>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(commit: &str, names: &str, standbys: i64, sync: i64, hidden: i64) -> Durability {
        Durability::of(&ReplicationReading {
            synchronous_commit: commit.into(),
            synchronous_standby_names: names.into(),
            standbys,
            synchronous_standbys: sync,
            hidden,
        })
    }

    #[test]
    fn each_reading_has_one_verdict() {
        assert_eq!(reading("on", "", 0, 0, 0), Durability::NoStandby);
        assert_eq!(reading("on", "", 1, 0, 0), Durability::Asynchronous);
        assert_eq!(reading("on", "s1", 1, 1, 0), Durability::Synchronous);
        assert_eq!(
            reading("remote_write", "ANY 1 (s1, s2)", 2, 2, 0),
            Durability::Synchronous
        );
        // Configured, but Mailroom's session commits locally: nothing waits for the standby.
        assert_eq!(reading("local", "s1", 1, 1, 0), Durability::Asynchronous);
        assert_eq!(reading("off", "s1", 0, 0, 0), Durability::NoStandby);
        assert_eq!(reading("on", "s1", 0, 0, 0), Durability::SynchronousWaiting);
        assert_eq!(reading("on", "s1", 1, 0, 0), Durability::SynchronousWaiting);
        assert_eq!(reading("on", "s1", 1, 0, 1), Durability::Unknown);
        assert_eq!(reading("on", "  ", 1, 0, 1), Durability::Asynchronous);
        // Two must confirm, one is there: commits wait.
        assert_eq!(
            reading("on", "FIRST 2 (s1, s2)", 2, 1, 0),
            Durability::SynchronousWaiting
        );
        assert_eq!(
            reading("on", "ANY 2 (s1, s2, s3)", 3, 2, 0),
            Durability::Synchronous
        );
        assert_eq!(
            reading("on", "2 (s1, s2)", 2, 2, 0),
            Durability::Synchronous
        );
    }

    #[test]
    fn the_standbys_a_commit_waits_for_are_counted_from_the_setting() {
        for (names, n) in [
            ("s1", 1),
            ("s1, s2", 1),
            ("*", 1),
            ("FIRST 2 (s1, s2)", 2),
            ("first 3 (a,b,c)", 3),
            ("ANY 2(a, b)", 2),
            ("2 (a, b)", 2),
            ("\"2x\"", 1),
            ("any", 1),
        ] {
            assert_eq!(required(names), n, "{names}");
        }
    }

    #[test]
    fn only_a_synchronous_standby_or_none_goes_without_a_warning() {
        for d in Durability::ALL {
            let quiet = matches!(d, Durability::NoStandby | Durability::Synchronous);
            assert_eq!(d.warning().is_none(), quiet, "{d}");
        }
    }

    #[test]
    fn only_the_databases_own_troubles_are_named() {
        assert_eq!(
            WriteTrouble::of_sqlstate("53100"),
            Some(WriteTrouble::DiskFull)
        );
        assert_eq!(
            WriteTrouble::of_sqlstate("57P01"),
            Some(WriteTrouble::ShuttingDown)
        );
        assert_eq!(
            WriteTrouble::of_sqlstate("08006"),
            Some(WriteTrouble::Unreachable)
        );
        assert_eq!(
            WriteTrouble::of_sqlstate("25006"),
            Some(WriteTrouble::ReadOnly)
        );
        // What was written, or a race the caller retries, is no trouble of the database.
        for code in ["23505", "40001", "40P01", "22P02"] {
            assert_eq!(WriteTrouble::of_sqlstate(code), None, "{code}");
        }
    }
}
