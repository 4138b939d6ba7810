//! Lists and values a row recorded as JSON, read back by a later build: an entry this build cannot read (one another
//! version wrote) is passed over and the rest still count. Readers of findings and run records err towards less
//! with it: a key left out is one no approval is granted on, a figure left out one that is not priced.

use serde::de::{Deserialize, DeserializeOwned, Deserializer};
use serde_json::Value;

/// A recorded list, entry by entry (for `#[serde(deserialize_with = "…")]`); a value that is no list reads as empty.
pub fn readable<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<Vec<T>, D::Error> {
    let entries = Option::<Vec<Value>>::deserialize(deserializer).unwrap_or_default().unwrap_or_default();
    Ok(entries.into_iter().filter_map(|e| serde_json::from_value(e).ok()).collect())
}

/// A recorded value, or none when this build cannot read it.
pub fn readable_or_none<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    let value = Option::<Value>::deserialize(deserializer).unwrap_or_default();
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}
