//! Whether a log location's lines can be believed. A log line says who read a file and when; a log object's
//! delivery time says how far the logs reach. Whoever can put an object below the location can forge both (a read
//! that keeps a file for ever, or a delivery that tells the consumer the logs cover a purge they do not), and
//! whoever can delete one can hide a read. So a location is read only when its bucket's policy denies putting and
//! deleting objects below it to every principal but AWS's own services: an explicit deny in the bucket policy
//! wins over any allow an IAM policy or an ACL of the account grants, so the product need not read the account's
//! IAM to know that the application's roles cannot write there.
//!
//! A statement counts when it is a `Deny` to `"*"`, its actions cover the operation, its resources cover every key
//! below the location (matched segment by segment, in the bucket's partition, as IAM matches an ARN), and each of
//! its conditions only exempts AWS services: `aws:PrincipalIsAWSService` false under `BoolIfExists` (an anonymous
//! request carries no such key, and plain `Bool` would exempt it), or `aws:PrincipalServiceName` other than S3's
//! and CloudWatch's log delivery. Anything else (`NotAction`, `NotResource`, `NotPrincipal`, a condition on the
//! caller's ARN or account, a wildcard in an exempted name) is a statement the product cannot prove covers the
//! application, and does not count: the location is refused, with what is missing named.
//!
//! An AWS service may still write there if the policy or an ACL lets it (another bucket's access logs, a trail):
//! what a service writes names its own source, so the reader believes an object only when its content or name says
//! it is the asset bucket's or the distribution's (`reconcile::reads`).

use serde_json::Value;

/// What the policy must deny below the location: a put (or a replica from another bucket) forges, a delete hides.
pub const GUARDED: [&str; 5] =
    ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:ReplicateObject", "s3:ReplicateDelete"];

/// The services an exemption may name: they write the logs.
const LOG_DELIVERY: [&str; 2] = ["logging.s3.amazonaws.com", "delivery.logs.amazonaws.com"];

/// Why a location's lines are not believed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("its bucket has no policy, so any role of the account allowed to write it can forge its logs")]
    NoPolicy,
    #[error("its bucket's policy is not JSON: {0}")]
    Malformed(String),
    #[error(
        "its bucket's policy does not deny {} below {location} to every principal but AWS's services \
         (a Deny to \"*\" whose only condition is BoolIfExists aws:PrincipalIsAWSService false, or \
         StringNotEquals aws:PrincipalServiceName of the log delivery): {}",
        missing.join(", "),
        if why.is_empty() { "no Deny statement covers it".to_owned() } else { why.join("; ") }
    )]
    Writable { location: String, missing: Vec<&'static str>, why: Vec<String> },
}

/// Checks `policy` (the bucket's policy document; `None`: it has none) guards every key of `bucket` that begins
/// with `prefix`, the bucket being in AWS's `partition` (`aws`, `aws-cn`, `aws-us-gov`: [`partition`]).
pub fn check(policy: Option<&str>, partition: &str, bucket: &str, prefix: &str) -> Result<(), Untrusted> {
    let policy = policy.ok_or(Untrusted::NoPolicy)?;
    let document: Value = serde_json::from_str(policy).map_err(|e| Untrusted::Malformed(e.to_string()))?;
    let statements = match &document["Statement"] {
        Value::Array(statements) => statements.iter().collect(),
        statement @ Value::Object(_) => vec![statement],
        _ => Vec::new(),
    };
    let location = format!("s3://{bucket}/{prefix}");
    let mut why = Vec::new();
    let mut guarded = [false; GUARDED.len()];
    for (index, statement) in statements.iter().enumerate() {
        match guards(statement, partition, bucket, prefix) {
            Ok(actions) => actions.iter().zip(guarded.iter_mut()).for_each(|(&a, g)| *g |= a),
            Err(Some(reason)) => {
                let name = statement["Sid"].as_str().map_or_else(|| format!("statement {}", index + 1), str::to_owned);
                why.push(format!("{name} {reason}"));
            }
            Err(None) => {}
        }
    }
    let missing: Vec<&'static str> =
        GUARDED.iter().zip(guarded).filter(|(_, guarded)| !guarded).map(|(action, _)| *action).collect();
    if missing.is_empty() { Ok(()) } else { Err(Untrusted::Writable { location, missing, why }) }
}

/// Which of [`GUARDED`] one statement denies below the location to everyone but AWS's services; `Err(None)`: it
/// is not a deny of writes there at all, `Err(Some(why))`: it is one that falls short.
fn guards(
    statement: &Value,
    partition: &str,
    bucket: &str,
    prefix: &str,
) -> Result<[bool; GUARDED.len()], Option<String>> {
    if statement["Effect"].as_str() != Some("Deny") {
        return Err(None);
    }
    if statement.get("NotAction").is_some() || statement.get("NotResource").is_some() {
        return Err(Some("uses NotAction or NotResource, which the product does not evaluate".to_owned()));
    }
    let actions: Vec<String> = strings(&statement["Action"]).iter().map(|a| a.to_ascii_lowercase()).collect();
    let covered = GUARDED.map(|action| actions.iter().any(|pattern| glob(pattern, &action.to_ascii_lowercase())));
    let below = strings(&statement["Resource"]).iter().any(|r| covers_below(r, partition, bucket, prefix));
    if !covered.iter().any(|&c| c) || !below {
        return Err(None);
    }
    if statement.get("NotPrincipal").is_some() || !everyone(&statement["Principal"]) {
        return Err(Some("is not a Deny to every principal (\"Principal\": \"*\")".to_owned()));
    }
    if let Some(conditions) = statement.get("Condition") {
        let Value::Object(operators) = conditions else {
            return Err(Some("has a Condition that is not an object".to_owned()));
        };
        for (operator, keys) in operators {
            let Value::Object(keys) = keys else {
                return Err(Some(format!("has a {operator} condition that is not an object")));
            };
            for (key, values) in keys {
                if !exempts_services_only(operator, key, values) {
                    return Err(Some(format!(
                        "is conditional on {operator} {key}, which may exempt a principal other than AWS's log delivery"
                    )));
                }
            }
        }
    }
    Ok(covered)
}

/// Whether one condition only lifts the deny for requests AWS's services make: its negation holds for every
/// request of a user or a role, and for an anonymous one.
fn exempts_services_only(operator: &str, key: &str, values: &Value) -> bool {
    let operator = operator.to_ascii_lowercase();
    let Some(values) = strict_strings(values) else { return false };
    match key.to_ascii_lowercase().as_str() {
        // In every signed request, false for every user and role; in no anonymous one, which only `IfExists` denies.
        "aws:principalisawsservice" => operator == "boolifexists" && values.iter().all(|v| v == "false"),
        // Present only in a service principal's request: a negated match holds for every other one.
        "aws:principalservicename" => {
            let operator = operator.strip_suffix("ifexists").unwrap_or(&operator);
            matches!(operator, "stringnotequals" | "stringnotequalsignorecase" | "stringnotlike")
                && values.iter().all(|v| LOG_DELIVERY.iter().any(|d| d.eq_ignore_ascii_case(v)))
        }
        _ => false,
    }
}

/// `"*"`, `{"AWS": "*"}` or `{"AWS": ["*"]}`.
fn everyone(principal: &Value) -> bool {
    match principal {
        Value::String(s) => s == "*",
        Value::Object(map) => map.len() == 1 && map.get("AWS").is_some_and(|aws| strings(aws) == ["*"]),
        _ => false,
    }
}

/// The partition of AWS a Region is in, for the ARNs of its buckets.
pub fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// Whether the resource pattern matches every object key of `bucket` beginning with `prefix`. IAM matches an ARN
/// segment by segment (a wildcard never reaches past a `:`), so the first five must match the bucket's ARN's, and
/// the last must end in `*` after a part that matches a beginning of `bucket/prefix`.
fn covers_below(pattern: &str, partition: &str, bucket: &str, prefix: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let segments: Vec<&str> = pattern.splitn(6, ':').collect();
    let [arn, part, service, region, account, resource] = segments[..] else { return false };
    let exact = [("arn", arn), (partition, part), ("s3", service), ("", region), ("", account)];
    if !exact.iter().all(|(want, pattern)| glob(pattern, want)) {
        return false;
    }
    let Some(head) = resource.strip_suffix('*') else { return false };
    let object = format!("{bucket}/{prefix}");
    object.char_indices().map(|(i, _)| i).chain([object.len()]).any(|end| glob(head, &object[..end]))
}

/// IAM's wildcards: `*` any run of characters, `?` any one.
fn glob(pattern: &str, text: &str) -> bool {
    let (pattern, text): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut p, mut t, mut star, mut mark) = (0, 0, None, 0);
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some(p);
            mark = t;
            p += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            t = mark;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// A condition's values: one string or a non-empty list of strings (a boolean written bare counts as its text);
/// anything else is a value the product does not read.
fn strict_strings(value: &Value) -> Option<Vec<String>> {
    let one = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    match value {
        Value::Array(items) if !items.is_empty() => items.iter().map(one).collect(),
        Value::Array(_) => None,
        v => one(v).map(|v| vec![v]),
    }
}

/// A policy element that may be one string or a list of them.
fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Bool(b) => vec![b.to_string()],
        Value::Array(items) => items
            .iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Bool(b) => Some(b.to_string()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BUCKET: &str = "acme-logs";
    const PREFIX: &str = "access/";

    fn deny(fields: Value) -> Value {
        let mut statement = json!({
            "Sid": "OnlyLogDeliveryWritesTheLogs",
            "Effect": "Deny",
            "Principal": "*",
            "Action": ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:Replicate*"],
            "Resource": "arn:aws:s3:::acme-logs/access/*",
            "Condition": {"BoolIfExists": {"aws:PrincipalIsAWSService": "false"}}
        });
        if let (Value::Object(s), Value::Object(f)) = (&mut statement, fields) {
            s.extend(f);
        }
        statement
    }

    fn without(mut statement: Value, field: &str) -> Value {
        statement.as_object_mut().map(|s| s.remove(field));
        statement
    }

    fn policy(statements: Vec<Value>) -> String {
        let allow = json!({
            "Effect": "Allow",
            "Principal": {"Service": "logging.s3.amazonaws.com"},
            "Action": "s3:PutObject",
            "Resource": "arn:aws:s3:::acme-logs/access/*"
        });
        let statements: Vec<Value> = [allow].into_iter().chain(statements).collect();
        json!({"Version": "2012-10-17", "Statement": statements}).to_string()
    }

    fn verdict(statements: Vec<Value>) -> Result<(), Untrusted> {
        check(Some(&policy(statements)), "aws", BUCKET, PREFIX)
    }

    fn refused(fields: Value) -> String {
        verdict(vec![deny(fields)]).expect_err("refused").to_string()
    }

    #[test]
    fn the_documented_policy_and_its_usual_spellings_are_trusted() {
        assert_eq!(verdict(vec![deny(json!({}))]), Ok(()));
        for fields in [
            json!({"Action": "s3:*", "Principal": {"AWS": "*"}}),
            json!({"Action": ["s3:Put*", "S3:DELETEOBJECT*", "s3:Replicate*"], "Resource": "arn:aws:s3:::acme-logs/*"}),
            json!({"Action": "*", "Resource": ["arn:aws:s3:::acme-logs", "arn:aws:s3:::acme-logs/acc*"]}),
            json!({"Condition": {"BoolIfExists": {"aws:PrincipalIsAWSService": false}}}),
            json!({"Condition": {"StringNotEquals": {"aws:PrincipalServiceName": "logging.s3.amazonaws.com"}}}),
            json!({"Condition": {"StringNotEqualsIfExists": {"aws:principalservicename": ["logging.s3.amazonaws.com"]}}}),
        ] {
            assert_eq!(verdict(vec![deny(fields.clone())]), Ok(()), "{fields}");
        }
        // No condition at all: nobody writes, log delivery included (the logs then stop, and the alarm says so).
        assert_eq!(verdict(vec![without(deny(json!({})), "Condition")]), Ok(()));
        // The actions may be denied by separate statements, and a policy may hold its one statement bare.
        let (puts, deletes) = (
            deny(json!({"Action": ["s3:PutObject", "s3:ReplicateObject"]})),
            deny(json!({"Action": ["s3:DeleteObject*", "s3:ReplicateDelete"]})),
        );
        assert_eq!(verdict(vec![puts, deletes]), Ok(()));
        let bare = json!({"Statement": deny(json!({"Action": "s3:*"}))}).to_string();
        assert_eq!(check(Some(&bare), "aws", BUCKET, PREFIX), Ok(()));
        // In another partition, its own ARNs.
        let china = deny(json!({"Resource": "arn:aws-cn:s3:::acme-logs/access/*"}));
        assert_eq!(check(Some(&policy(vec![china])), "aws-cn", BUCKET, PREFIX), Ok(()));
    }

    #[test]
    fn a_location_others_may_write_is_refused_saying_what_is_missing() {
        assert_eq!(check(None, "aws", BUCKET, PREFIX), Err(Untrusted::NoPolicy));
        assert!(matches!(check(Some("{"), "aws", BUCKET, PREFIX), Err(Untrusted::Malformed(_))));
        // Only S3's allow: nothing denies.
        assert!(verdict(vec![]).expect_err("refused").to_string().contains("no Deny statement covers it"));
        // Deletes and replicas left open: a read can be hidden, an object forged through replication.
        let text = refused(json!({"Action": "s3:PutObject"}));
        assert!(
            text.contains(
                "s3:DeleteObject, s3:DeleteObjectVersion, s3:ReplicateObject, s3:ReplicateDelete below s3://acme-logs/access/"
            ),
            "{text}"
        );
        assert!(!text.contains("s3:PutObject,"), "{text}");
        // A deny of another prefix, of only some keys below this one, in another partition, or not an ARN IAM
        // would match (a wildcard never reaches past a colon).
        for resource in [
            "arn:aws:s3:::acme-logs/other/*",
            "arn:aws:s3:::acme-logs/access/*.gz",
            "arn:aws:s3:::other/*",
            "arn:aws-cn:s3:::acme-logs/access/*",
            "arn:aws:s3?::acme-logs/access/*",
            "arn:aws:s3:*acme-logs/access/*",
        ] {
            assert!(refused(json!({"Resource": resource})).contains("no Deny statement covers it"), "{resource}");
        }
        // Exemptions the product cannot tell from the application's roles, or that let anonymous writes through.
        for (condition, says) in [
            (json!({"ArnNotLike": {"aws:PrincipalArn": "arn:aws:iam::111122223333:role/ops-*"}}), "aws:PrincipalArn"),
            (json!({"StringNotEquals": {"aws:PrincipalAccount": "444455556666"}}), "aws:PrincipalAccount"),
            (json!({"StringNotLike": {"aws:PrincipalServiceName": "*.amazonaws.com"}}), "aws:PrincipalServiceName"),
            (json!({"StringNotEquals": {"aws:PrincipalServiceName": []}}), "aws:PrincipalServiceName"),
            (json!({"StringNotEquals": {"aws:PrincipalServiceName": [1]}}), "aws:PrincipalServiceName"),
            (json!({"Bool": {"aws:SecureTransport": "false"}}), "aws:SecureTransport"),
            (json!({"Bool": {"aws:PrincipalIsAWSService": "false"}}), "Bool aws:PrincipalIsAWSService"),
            (json!({"BoolIfExists": {"aws:PrincipalIsAWSService": "true"}}), "aws:PrincipalIsAWSService"),
        ] {
            let text = refused(json!({"Sid": "Guard", "Condition": condition}));
            assert!(text.contains("Guard is conditional on") && text.contains(says), "{text}");
        }
        assert!(refused(json!({"Principal": {"AWS": "arn:aws:iam::111122223333:root"}})).contains("every principal"));
        let not_principal =
            without(deny(json!({"NotPrincipal": {"Service": "logging.s3.amazonaws.com"}})), "Principal");
        assert!(verdict(vec![not_principal]).expect_err("refused").to_string().contains("every principal"));
        let not_action = without(deny(json!({"NotAction": "s3:GetObject"})), "Action");
        assert!(verdict(vec![not_action]).expect_err("refused").to_string().contains("NotAction"));
        // An Allow never guards, however it is written.
        assert!(verdict(vec![deny(json!({"Effect": "Allow"}))]).is_err());
    }

    #[test]
    fn wildcards_match_as_iam_matches_them() {
        assert!(glob("s3:put*", "s3:putobject"));
        assert!(glob("s3:?utobject", "s3:putobject"));
        assert!(glob("*", ""));
        assert!(!glob("s3:get*", "s3:putobject"));
        for covering in ["arn:aws:s3:::acme-logs/*", "arn:aws:s3:::acme-*", "*", "arn:*:s3:::acme-logs/access/*"] {
            assert!(covers_below(covering, "aws", BUCKET, PREFIX), "{covering}");
        }
        for short in ["arn:aws:s3:::acme-logs/access/", "arn:aws:s3:::acme-logs/access/2026-*", "arn:aws:*"] {
            assert!(!covers_below(short, "aws", BUCKET, PREFIX), "{short}");
        }
        assert_eq!(
            (partition("us-east-1"), partition("cn-north-1"), partition("us-gov-west-1")),
            ("aws", "aws-cn", "aws-us-gov")
        );
    }
}
