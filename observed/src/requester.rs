//! Who a read is not evidence from: the product's own roles (its sweeps read the bucket's configuration, its settles
//! copy versions back), and any requester the operator names (a backup or a thumbnail job that reads everything).

/// Whether `requester`, as S3 logs it, is one of `ignored`. An entry matches a requester equal to it; an IAM role's
/// ARN (`arn:aws:iam::111122223333:role/path/name`) also matches every session of that role, which S3 logs as
/// `arn:aws:sts::111122223333:assumed-role/name/session`.
pub fn is_ignored(requester: &str, ignored: &[String]) -> bool {
    ignored.iter().any(|entry| entry == requester || role_session(entry, requester))
}

/// Whether `requester` is a session of the role `role_arn`.
fn role_session(role_arn: &str, requester: &str) -> bool {
    let Some((account, path)) = role_arn.strip_prefix("arn:aws:iam::").and_then(|rest| rest.split_once(":role/"))
    else {
        return false;
    };
    // A role's path is not in its sessions' ARNs: only its name is.
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some(rest) = requester.strip_prefix("arn:aws:sts::").and_then(|rest| rest.strip_prefix(account)) else {
        return false;
    };
    rest.strip_prefix(":assumed-role/")
        .and_then(|rest| rest.strip_prefix(name))
        .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_roles_arn_ignores_its_sessions_and_nothing_else() {
        let ignored = vec!["arn:aws:iam::111122223333:role/service/asset-sweeper-consumer".to_owned()];
        assert!(is_ignored("arn:aws:sts::111122223333:assumed-role/asset-sweeper-consumer/1700000000", &ignored));
        assert!(!is_ignored("arn:aws:sts::111122223333:assumed-role/asset-sweeper-consumer-2/x", &ignored));
        assert!(!is_ignored("arn:aws:sts::444455556666:assumed-role/asset-sweeper-consumer/x", &ignored));
        assert!(!is_ignored("arn:aws:iam::111122223333:user/alice", &ignored));
    }

    #[test]
    fn any_other_entry_ignores_exactly_that_requester() {
        let ignored = vec!["arn:aws:iam::111122223333:user/backup".to_owned(), "79a59df900b949e55d96".to_owned()];
        assert!(is_ignored("arn:aws:iam::111122223333:user/backup", &ignored));
        assert!(is_ignored("79a59df900b949e55d96", &ignored));
        assert!(!is_ignored("arn:aws:iam::111122223333:user/backup2", &ignored));
    }
}
