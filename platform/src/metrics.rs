//! CloudWatch Embedded Metric Format: one JSON log line that CloudWatch turns into metrics, so alarms can
//! watch what the functions did without an API call from inside them.

use serde_json::{Map, Value, json};

/// The namespace every metric of this project is published under.
pub const NAMESPACE: &str = "AssetSweeper";

/// One EMF line: `dimensions` name the series, `counts` are published as metrics (unit `Count`), `properties`
/// ride along as searchable log fields.
pub fn emf_line(dimensions: &[(&str, &str)], counts: &[(&str, u64)], properties: &[(&str, Value)]) -> String {
    let timestamp_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default();
    let mut root = Map::new();
    root.insert(
        "_aws".into(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions.iter().map(|(k, _)| *k).collect::<Vec<_>>()],
                "Metrics": counts.iter().map(|(name, _)| json!({"Name": name, "Unit": "Count"})).collect::<Vec<_>>(),
            }],
        }),
    );
    for (k, v) in dimensions {
        root.insert((*k).into(), json!(v));
    }
    for (k, v) in counts {
        root.insert((*k).into(), json!(v));
    }
    for (k, v) in properties {
        root.insert((*k).into(), v.clone());
    }
    Value::Object(root).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emf_line_declares_each_count_and_carries_its_value() {
        let line = emf_line(&[("Function", "sweep")], &[("Claimed", 12), ("Refused", 0)], &[("RunId", json!("r1"))]);
        let v: Value = serde_json::from_str(&line).expect("json");
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Function"]]));
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"],
            json!([{"Name": "Claimed", "Unit": "Count"}, {"Name": "Refused", "Unit": "Count"}])
        );
        assert_eq!(
            (v["Function"].clone(), v["Claimed"].clone(), v["RunId"].clone()),
            (json!("sweep"), json!(12), json!("r1"))
        );
        assert!(v["_aws"]["Timestamp"].as_u64().is_some_and(|t| t > 1_700_000_000_000));
    }
}
