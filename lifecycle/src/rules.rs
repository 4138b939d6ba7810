//! The lifecycle's rules: an asset's states, and what settlement decides from the facts about one asset, as pure
//! functions of them (the facts are read by `crate::facts`). The settle acts on the decision inside its
//! transaction, with the rows locked; the operator's `plan` and `explain` show it without acting.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use platform::audit::AuditAction;
use platform::text_enum;

text_enum! {
    /// Where an asset is in its lifecycle: the column `assets.state`.
    pub enum AssetState {
        /// Uploaded, not yet referred to by the application; deleted if still unattached after the abandon window.
        Pending = "pending",
        /// In use. Not swept until released (or found by a recheck to be unreferenced when due).
        Attached = "attached",
        /// Let go by the application: retired when nothing refers to it.
        Released = "released",
        /// Hidden, bytes kept, restorable until its purge time.
        Retired = "retired",
        /// Failed every delivery of its message: waits for an operator.
        Failed = "failed",
    }
}

/// The asset row with the facts a decision needs, computed by the database's clock.
#[derive(Debug)]
pub struct Facts {
    /// The workspace that owns the asset.
    pub workspace_id: Uuid,
    /// The object its bytes are stored as.
    pub storage_key: String,
    /// Its size in bytes.
    pub byte_size: i64,
    /// Its state.
    pub state: AssetState,
    /// The claim a sweep pass holds on it, if any.
    pub lease_token: Option<Uuid>,
    /// Its due time has come and it is not `failed`.
    pub due: bool,
    /// Written (it or its stored object) less than the grace period ago: untouchable (invariant 3).
    pub within_grace: bool,
    /// When the grace period ends, as the database prints it.
    pub grace_ends: String,
    /// Created longer ago than the abandon window.
    pub abandoned: bool,
    /// Retired and past its purge time.
    pub purge_due: bool,
    /// Retired, and every column the census reads for ids was proven by a scan that began after the retirement: a
    /// complete census since the decision found nothing naming it (its findings hold it on their own).
    pub tried: bool,
    /// Retired as an abandoned upload, for its trial alone (its purge time its retirement: `RETENTION` is a day at
    /// least): its removal, after the trial, is a delete.
    pub retired_abandoned: bool,
    /// Adopted by reconciliation (`adopted_assets`): bytes no row knew, whose safety rests on the key scan alone, so
    /// they are retired first (bytes in place, still served, restorable), never deleted outright.
    pub adopted: bool,
    /// When it was retired, if it is: a read of its file since is use (`crate::reads`).
    pub retired_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When its purge (or, for an abandoned upload, its delete) became due: the decision a removal's logs must
    /// reach past (`crate::reads`). Fixed when it is retired, so a removal that waits for the logs waits for logs
    /// reaching one time, not one that moves with each wait.
    pub purge_after: Option<chrono::DateTime<chrono::Utc>>,
    /// The whole asset row, for the audit record (what `undelete` rebuilds a row from).
    pub row_json: Value,
}

/// Why a decision waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deferral {
    /// Written too recently: the grace floor (invariant 3).
    Grace,
    /// An upload still inside its abandon window.
    AbandonWindow,
    /// Retired, before its purge time.
    Retention,
    /// Retired and past its purge time, while some column the census reads has not been proven by a scan that began
    /// after the retirement: the trial is not over (invariant 25). Looked at again after [`CENSUS_HOLD`].
    Trial,
    /// Deleting or purging, while the census has not proven every column of the schema as it stands
    /// (invariant 13): looked at again after [`CENSUS_HOLD`].
    Census,
    /// Adopted bytes whose key a record names (a key, path or URL in a text or JSON column): looked at again after
    /// [`NAMED_HOLD`], kept while the record names it.
    Named,
    /// Adopted bytes, while the census's key scan has not covered every text and JSON column as it stands:
    /// looked at again after [`CENSUS_HOLD`].
    KeyScan,
    /// Deleting or purging, while the asset bucket's versioning is not `Enabled` or could not be read: the removal
    /// could not be undone (invariant 18). Looked at again after [`BUCKET_HOLD`].
    Bucket,
    /// Retiring, deleting or purging, when the catalog at the settle's commit could not be confirmed to be the one
    /// its verdict's map came from (a schema change since the verdict, or one in flight): looked at again after
    /// [`SCHEMA_HOLD`], by which time a pass has checked the schema as it now is.
    SchemaChanged,
    /// Retiring, deleting or purging an asset whose id the census found in a column that is no source (a link in a
    /// comment): kept, and looked at again after [`NAMED_HOLD`].
    Found,
    /// Deleting or purging inside a window in which nothing is destroyed: one declared around a migration, or the
    /// quiet period after the schema last changed ([`crate::holds::Window`]). Looked at again when it ends.
    Window,
    /// Retiring, deleting or purging a pinned asset (its own pin, its workspace's, or its key's prefix's): a
    /// reference the database cannot show. Looked at again when the pin ends.
    Pinned,
    /// Retiring an asset whose file the access logs saw read within `GRACE` of now: somebody uses it. Looked at
    /// again when the grace after that read ends.
    Read,
    /// Deleting or purging while the access logs delivered so far do not reach past the decision by their delivery
    /// lag, or a log source cannot be read: a read nobody has seen yet may keep it. Looked at again after
    /// [`LOGS_HOLD`].
    Logs,
}

/// How long a removal that waits for the access logs waits before it is looked at again: S3 delivers most records
/// within a few hours.
pub const LOGS_HOLD: Duration = Duration::from_secs(3600);

/// How long adopted bytes a record names wait before they are looked at again: the record is the application's,
/// and it changes on its own time.
pub const NAMED_HOLD: Duration = Duration::from_secs(24 * 3600);

/// How long a delete or purge held back by an unfinished census waits before it is looked at again: a few sweep
/// passes, each of which reads more of the schema.
pub const CENSUS_HOLD: Duration = Duration::from_secs(3600);

/// How long a delete or purge held back by the bucket's versioning waits before it is looked at again: a person has
/// to turn versioning back on, and every batch reads it afresh.
pub const BUCKET_HOLD: Duration = Duration::from_secs(3600);

/// How long an asset held back by a schema change during its settle waits: one sweep pass, which checks the new
/// schema, and then some.
pub const SCHEMA_HOLD: Duration = Duration::from_secs(20 * 60);

/// The shortest wait of a delete or purge a window holds: a window ends at a time it names, but may be extended.
pub const WINDOW_RECHECK: Duration = Duration::from_secs(60);

impl Deferral {
    /// The name recorded in a deferral's evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            Deferral::Grace => "grace",
            Deferral::AbandonWindow => "abandon_window",
            Deferral::Retention => "retention",
            Deferral::Trial => "trial",
            Deferral::Census => "census",
            Deferral::Named => "named",
            Deferral::KeyScan => "key_scan",
            Deferral::Bucket => "bucket",
            Deferral::SchemaChanged => "schema_changed",
            Deferral::Found => "found",
            Deferral::Window => "window",
            Deferral::Pinned => "pinned",
            Deferral::Read => "read",
            Deferral::Logs => "logs",
        }
    }
}

/// What settlement does with a due, claimed asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A source refers to it: back to `attached`.
    Keep,
    /// Looked at again later, for the reason given.
    Defer(Deferral),
    /// An abandoned upload, retired for its trial and tried: its row, and its bytes unless another asset shares
    /// them.
    Delete,
    /// Retired past its purge time: its row, and its bytes unless shared.
    Purge,
    /// Released (or attached) with nothing referring to it: hidden, restorable.
    Retire,
}

/// What a delete or purge needs proven besides the asset's own facts. While either is not, the removal waits;
/// keeping and retiring, which can be undone, go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proven {
    /// The census has read every column of the schema as it stands (invariant 13).
    pub schema: bool,
    /// The asset bucket's versioning is `Enabled`, as read for this settle: a removal leaves the bytes as a
    /// noncurrent version, so it can be undone (invariant 18).
    pub undoable: bool,
}

impl Proven {
    /// Everything a removal needs.
    pub const ALL: Proven = Proven { schema: true, undoable: true };
}

/// The rules, in order: a reference keeps; then nothing inside its grace period is touched; then the state
/// decides (everything is retired before it is removed); a delete or purge waits while the census has not proven
/// the schema, then while it has not proven it since the retirement (the trial), and then while the bucket could not
/// undo it. The recheck is the authority, not the state: an `attached` asset nothing refers to retires.
pub fn decide(referenced: bool, facts: &Facts, proven: Proven) -> Decision {
    if referenced {
        return Decision::Keep;
    }
    if facts.within_grace {
        return Decision::Defer(Deferral::Grace);
    }
    let decision = match facts.state {
        // Adopted bytes nothing names: a trial first. Retired, they are still served and restorable for the
        // retention period, and purged only if nothing names them by then.
        AssetState::Pending if facts.adopted => Decision::Retire,
        AssetState::Pending if !facts.abandoned => Decision::Defer(Deferral::AbandonWindow),
        // Abandoned: retired first too. Nothing holds a never-attached upload but what the census reads, and a
        // column it proved before this decision says nothing of a name written into it since.
        AssetState::Pending => Decision::Retire,
        AssetState::Retired if !facts.purge_due => Decision::Defer(Deferral::Retention),
        AssetState::Retired if facts.retired_abandoned => Decision::Delete,
        AssetState::Retired => Decision::Purge,
        AssetState::Attached | AssetState::Released | AssetState::Failed => Decision::Retire,
    };
    match decision {
        Decision::Delete | Decision::Purge if !proven.schema => Decision::Defer(Deferral::Census),
        // The schema as it stands proven, but not all of it since the retirement.
        Decision::Delete | Decision::Purge if !facts.tried => Decision::Defer(Deferral::Trial),
        Decision::Delete | Decision::Purge if !proven.undoable => Decision::Defer(Deferral::Bucket),
        decision => decision,
    }
}

impl Decision {
    /// The audit action a settle records for this decision.
    pub fn action(self) -> AuditAction {
        match self {
            Decision::Keep => AuditAction::Keep,
            Decision::Defer(_) => AuditAction::Defer,
            Decision::Delete => AuditAction::Delete,
            Decision::Purge => AuditAction::Purge,
            Decision::Retire => AuditAction::Retire,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(state: &str, within_grace: bool, abandoned: bool, purge_due: bool) -> Facts {
        Facts {
            workspace_id: Uuid::nil(),
            storage_key: "k".into(),
            byte_size: 1,
            state: state.parse().expect("a state"),
            lease_token: None,
            due: true,
            within_grace,
            grace_ends: String::new(),
            abandoned,
            purge_due,
            tried: true,
            retired_abandoned: false,
            adopted: false,
            retired_at: None,
            purge_after: None,
            row_json: Value::Null,
        }
    }

    #[test]
    fn adopted_bytes_nothing_names_are_retired_first_never_deleted_outright() {
        let adopted = |abandoned| Facts { adopted: true, ..facts("pending", false, abandoned, false) };
        for abandoned in [false, true] {
            assert_eq!(decide(false, &adopted(abandoned), Proven::ALL), Decision::Retire);
            assert_eq!(decide(true, &adopted(abandoned), Proven::ALL), Decision::Keep);
        }
        let within_grace = Facts { adopted: true, ..facts("pending", true, true, false) };
        assert_eq!(decide(false, &within_grace, Proven::ALL), Decision::Defer(Deferral::Grace));
        // Retired, an adopted asset is purged as any other, once its retention is over.
        let retired = Facts { adopted: true, ..facts("retired", false, true, true) };
        assert_eq!(decide(false, &retired, Proven::ALL), Decision::Purge);
    }

    #[test]
    fn a_reference_keeps_whatever_the_state_and_grace_protects_before_the_state_decides() {
        for state in ["pending", "released", "retired", "attached"] {
            assert_eq!(decide(true, &facts(state, false, true, true), Proven::ALL), Decision::Keep);
            assert_eq!(decide(false, &facts(state, true, true, true), Proven::ALL), Decision::Defer(Deferral::Grace));
        }
    }

    #[test]
    fn the_state_decides_what_goes() {
        assert_eq!(
            decide(false, &facts("pending", false, false, false), Proven::ALL),
            Decision::Defer(Deferral::AbandonWindow)
        );
        // An abandoned upload is retired first, and deleted once retired, past its purge time and tried.
        assert_eq!(decide(false, &facts("pending", false, true, false), Proven::ALL), Decision::Retire);
        assert_eq!(decide(false, &abandoned_and_retired(), Proven::ALL), Decision::Delete);
        assert_eq!(
            decide(false, &facts("retired", false, false, false), Proven::ALL),
            Decision::Defer(Deferral::Retention)
        );
        assert_eq!(decide(false, &facts("retired", false, false, true), Proven::ALL), Decision::Purge);
        assert_eq!(decide(false, &facts("released", false, false, false), Proven::ALL), Decision::Retire);
        assert_eq!(decide(false, &facts("attached", false, false, false), Proven::ALL), Decision::Retire);
    }

    /// Retired as an abandoned upload, past its purge time, tried.
    fn abandoned_and_retired() -> Facts {
        Facts { retired_abandoned: true, ..facts("retired", false, false, true) }
    }

    #[test]
    fn nothing_is_removed_before_a_census_begun_after_its_retirement_has_read_everything() {
        let untried = |f: Facts| Facts { tried: false, ..f };
        let trial = Decision::Defer(Deferral::Trial);
        assert_eq!(decide(false, &untried(abandoned_and_retired()), Proven::ALL), trial);
        assert_eq!(decide(false, &untried(facts("retired", false, false, true)), Proven::ALL), trial);
        let adopted = Facts { adopted: true, ..facts("retired", false, false, true) };
        assert_eq!(decide(false, &untried(adopted), Proven::ALL), trial);
        // Before its purge time the retention is what it waits for; a reference keeps it whatever the trial.
        assert_eq!(
            decide(false, &untried(facts("retired", false, false, false)), Proven::ALL),
            Decision::Defer(Deferral::Retention)
        );
        assert_eq!(decide(true, &untried(abandoned_and_retired()), Proven::ALL), Decision::Keep);
    }

    #[test]
    fn an_unproven_schema_holds_deletes_and_purges_but_not_retiring() {
        let unproven = Proven { schema: false, undoable: true };
        let census = Decision::Defer(Deferral::Census);
        assert_eq!(decide(false, &abandoned_and_retired(), unproven), census);
        assert_eq!(decide(false, &facts("retired", false, false, true), unproven), census);
        assert_eq!(decide(false, &facts("released", false, false, false), unproven), Decision::Retire);
        assert_eq!(
            decide(false, &facts("pending", false, false, false), unproven),
            Decision::Defer(Deferral::AbandonWindow)
        );
        assert_eq!(decide(true, &facts("pending", false, true, false), unproven), Decision::Keep);
    }

    #[test]
    fn a_bucket_that_cannot_undo_a_removal_holds_deletes_and_purges_but_not_keeping_or_retiring() {
        let unversioned = Proven { schema: true, undoable: false };
        let bucket = Decision::Defer(Deferral::Bucket);
        assert_eq!(decide(false, &abandoned_and_retired(), unversioned), bucket);
        assert_eq!(decide(false, &facts("retired", false, false, true), unversioned), bucket);
        assert_eq!(decide(false, &facts("released", false, false, false), unversioned), Decision::Retire);
        assert_eq!(decide(true, &facts("retired", false, false, true), unversioned), Decision::Keep);
        assert_eq!(
            decide(false, &facts("retired", false, false, false), unversioned),
            Decision::Defer(Deferral::Retention)
        );
        // Both unproven: the census's hold is named first, as it was before the bucket was checked.
        let neither = Proven { schema: false, undoable: false };
        assert_eq!(decide(false, &abandoned_and_retired(), neither), Decision::Defer(Deferral::Census));
    }
}
