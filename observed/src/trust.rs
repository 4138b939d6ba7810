//! Whether a log location's lines can be believed. A log line says who read a file and when; a log object's
//! delivery time says how far the logs reach. Whoever can put an object below the location can forge both (a read
//! that keeps a file for ever, or a delivery that tells the consumer the logs cover a purge they do not), and
//! whoever can delete one can hide a read. So a location is read only when its bucket's policy denies putting and
//! deleting objects below it to every principal but AWS's own services: an explicit deny in the bucket policy
//! wins over any allow an IAM policy or an ACL of the account grants, so the product need not read the account's
//! IAM to know that the application's roles cannot write there.
//!
//! A statement counts when it is a `Deny` to `"*"`, its actions cover the operation, its resources cover every key
//! below the location, and each of its conditions only exempts AWS services: `aws:PrincipalIsAWSService` false,
//! or `aws:PrincipalServiceName` other than S3's and CloudWatch's log delivery. Anything else (`NotAction`,
//! `NotResource`, `NotPrincipal`, a condition on the caller's ARN or account, a wildcard in an exempted name) is a
//! statement the product cannot prove covers the application, and does not count: the location is refused, with
//! what is missing named.

use serde_json::Value;

/// What the policy must deny below the location: a put forges, a delete hides.
pub const GUARDED: [&str; 3] = ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"];

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
         (a Deny to \"*\" whose only condition is aws:PrincipalIsAWSService false): {}",
        missing.join(", "),
        if why.is_empty() { "no Deny statement covers it".to_owned() } else { why.join("; ") }
    )]
    Writable { location: String, missing: Vec<&'static str>, why: Vec<String> },
}

/// Checks `policy` (the bucket's policy document; `None`: it has none) guards every key of `bucket` that begins
/// with `prefix`.
pub fn check(policy: Option<&str>, bucket: &str, prefix: &str) -> Result<(), Untrusted> {
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
        match guards(statement, bucket, prefix) {
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
fn guards(statement: &Value, bucket: &str, prefix: &str) -> Result<[bool; GUARDED.len()], Option<String>> {
    if statement["Effect"].as_str() != Some("Deny") {
        return Err(None);
    }
    if statement.get("NotAction").is_some() || statement.get("NotResource").is_some() {
        return Err(Some("uses NotAction or NotResource, which the product does not evaluate".to_owned()));
    }
    let actions: Vec<String> = strings(&statement["Action"]).iter().map(|a| a.to_ascii_lowercase()).collect();
    let covered = GUARDED.map(|action| actions.iter().any(|pattern| glob(pattern, &action.to_ascii_lowercase())));
    let below = strings(&statement["Resource"]).iter().any(|r| covers_below(r, bucket, prefix));
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

/// Whether one condition only lifts the deny for requests AWS's services make (its negation holds for every
/// request of a user or a role).
fn exempts_services_only(operator: &str, key: &str, values: &Value) -> bool {
    let operator = operator.to_ascii_lowercase();
    let operator = operator.strip_suffix("ifexists").unwrap_or(&operator);
    let values = strings(values);
    match key.to_ascii_lowercase().as_str() {
        // Present in every signed request: false for every user and role.
        "aws:principalisawsservice" => operator == "bool" && !values.is_empty() && values.iter().all(|v| v == "false"),
        // Present only in a service principal's request: a negated match holds for every other one.
        "aws:principalservicename" => {
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

/// Whether the resource pattern matches every object key of `bucket` beginning with `prefix`: it ends in `*`,
/// and what comes before matches a beginning of that prefix's ARN (in any partition).
fn covers_below(pattern: &str, bucket: &str, prefix: &str) -> bool {
    let Some(head) = pattern.strip_suffix('*') else { return false };
    ["aws", "aws-cn", "aws-us-gov"].iter().any(|partition| {
        let arn = format!("arn:{partition}:s3:::{bucket}/{prefix}");
        arn.char_indices().map(|(i, _)| i).chain([arn.len()]).any(|end| glob(head, &arn[..end]))
    })
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
            "Action": ["s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"],
            "Resource": "arn:aws:s3:::acme-logs/access/*",
            "Condition": {"Bool": {"aws:PrincipalIsAWSService": "false"}}
        });
        if let (Value::Object(s), Value::Object(f)) = (&mut statement, fields) {
            s.extend(f);
        }
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
        check(Some(&policy(statements)), BUCKET, PREFIX)
    }

    #[test]
    fn the_documented_policy_and_its_usual_spellings_are_trusted() {
        assert_eq!(verdict(vec![deny(json!({}))]), Ok(()));
        for fields in [
            json!({"Action": "s3:*", "Principal": {"AWS": "*"}}),
            json!({"Action": ["s3:Put*", "s3:Delete*"], "Resource": "arn:aws:s3:::acme-logs/*"}),
            json!({"Action": "*", "Resource": ["arn:aws:s3:::acme-logs", "arn:aws:s3:::acme-logs/acc*"]}),
            json!({"Condition": {"BoolIfExists": {"aws:PrincipalIsAWSService": false}}}),
            json!({"Condition": {"StringNotEquals": {"aws:PrincipalServiceName": "logging.s3.amazonaws.com"}}}),
            json!({"Resource": "arn:aws-cn:s3:::acme-logs/access/*"}),
        ] {
            assert_eq!(verdict(vec![deny(fields.clone())]), Ok(()), "{fields}");
        }
        // No condition at all: nobody writes, log delivery included (the logs then stop, and the alarm says so).
        let mut unconditional = deny(json!({}));
        unconditional.as_object_mut().map(|s| s.remove("Condition"));
        assert_eq!(verdict(vec![unconditional]), Ok(()));
        // The actions may be denied by separate statements.
        let (puts, deletes) = (deny(json!({"Action": "s3:PutObject"})), deny(json!({"Action": ["s3:DeleteObject*"]})));
        assert_eq!(verdict(vec![puts, deletes]), Ok(()));
    }

    #[test]
    fn a_location_others_may_write_is_refused_saying_what_is_missing() {
        assert_eq!(check(None, BUCKET, PREFIX), Err(Untrusted::NoPolicy));
        assert!(matches!(check(Some("{"), BUCKET, PREFIX), Err(Untrusted::Malformed(_))));
        let refused = |fields: Value| verdict(vec![deny(fields)]).expect_err("refused").to_string();
        // Only S3's allow: nothing denies.
        assert!(verdict(vec![]).expect_err("refused").to_string().contains("no Deny statement covers it"));
        // Deletes left open: a read can be hidden.
        let text = refused(json!({"Action": "s3:PutObject"}));
        assert!(text.contains("s3:DeleteObject, s3:DeleteObjectVersion below s3://acme-logs/access/"), "{text}");
        assert!(!text.contains("s3:PutObject,"), "{text}");
        // A deny of another prefix, or of only some keys below this one.
        for resource in ["arn:aws:s3:::acme-logs/other/*", "arn:aws:s3:::acme-logs/access/*.gz", "arn:aws:s3:::other/*"]
        {
            assert!(refused(json!({"Resource": resource})).contains("no Deny statement covers it"), "{resource}");
        }
        // Exemptions the product cannot tell from the application's roles.
        for (condition, says) in [
            (json!({"ArnNotLike": {"aws:PrincipalArn": "arn:aws:iam::111122223333:role/ops-*"}}), "aws:PrincipalArn"),
            (json!({"StringNotEquals": {"aws:PrincipalAccount": "444455556666"}}), "aws:PrincipalAccount"),
            (json!({"StringNotLike": {"aws:PrincipalServiceName": "*.amazonaws.com"}}), "aws:PrincipalServiceName"),
            (json!({"Bool": {"aws:SecureTransport": "false"}}), "aws:SecureTransport"),
            (json!({"Bool": {"aws:PrincipalIsAWSService": "true"}}), "aws:PrincipalIsAWSService"),
        ] {
            let text = refused(json!({"Sid": "Guard", "Condition": condition}));
            assert!(text.contains("Guard is conditional on") && text.contains(says), "{text}");
        }
        assert!(refused(json!({"Principal": {"AWS": "arn:aws:iam::111122223333:root"}})).contains("every principal"));
        let mut not_principal = deny(json!({"NotPrincipal": {"Service": "logging.s3.amazonaws.com"}}));
        not_principal.as_object_mut().map(|s| s.remove("Principal"));
        assert!(verdict(vec![not_principal]).expect_err("refused").to_string().contains("every principal"));
        let mut not_action = deny(json!({"NotAction": "s3:GetObject"}));
        not_action.as_object_mut().map(|s| s.remove("Action"));
        assert!(verdict(vec![not_action]).expect_err("refused").to_string().contains("NotAction"));
        // An Allow never guards, however it is written.
        let allow = deny(json!({"Effect": "Allow"}));
        assert!(verdict(vec![allow]).is_err());
    }

    #[test]
    fn wildcards_match_as_iam_matches_them() {
        assert!(glob("s3:put*", "s3:putobject"));
        assert!(glob("s3:?utobject", "s3:putobject"));
        assert!(glob("*", ""));
        assert!(!glob("s3:get*", "s3:putobject"));
        assert!(covers_below("arn:aws:s3:::acme-logs/*", BUCKET, PREFIX));
        assert!(covers_below("arn:aws:s3:::acme-*", BUCKET, PREFIX));
        assert!(covers_below("*", BUCKET, PREFIX));
        assert!(!covers_below("arn:aws:s3:::acme-logs/access/", BUCKET, PREFIX));
        assert!(!covers_below("arn:aws:s3:::acme-logs/access/2026-*", BUCKET, PREFIX));
    }
}
