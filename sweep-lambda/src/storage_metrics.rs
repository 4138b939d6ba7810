//! S3's own figures for the asset bucket: its daily storage metrics in CloudWatch (`AWS/S3`, `BucketSizeBytes` per
//! storage type and `NumberOfObjects`), which count every version the bucket bills. Two calls: `ListMetrics` for the
//! storage types the bucket has, then one `GetMetricData` for all of them.

use std::collections::BTreeMap;

use aws_sdk_cloudwatch::primitives::DateTime as AwsTime;
use aws_sdk_cloudwatch::types::{Dimension, DimensionFilter, Metric, MetricDataQuery, MetricStat};
use chrono::{DateTime, Days, NaiveDate, Utc};
use platform::aws::AwsFailure;

use ledger::drift::Reported;

const NAMESPACE: &str = "AWS/S3";
const SIZE: &str = "BucketSizeBytes";
const OBJECTS: &str = "NumberOfObjects";

fn dimension(name: &str, value: &str) -> Dimension {
    Dimension::builder().name(name).value(value).build()
}

/// The newest day S3 reported `bucket`'s size for, within the four days before `today` (S3 publishes a day's figures
/// within a day or two); `None` when it reported none (a new bucket, or storage metrics not published yet).
pub async fn read(
    cloudwatch: &aws_sdk_cloudwatch::Client,
    bucket: &str,
    today: NaiveDate,
) -> Result<Option<Reported>, AwsFailure> {
    let listed = cloudwatch
        .list_metrics()
        .namespace(NAMESPACE)
        .metric_name(SIZE)
        .dimensions(DimensionFilter::builder().name("BucketName").value(bucket).build())
        .send()
        .await
        .map_err(|e| AwsFailure::from_sdk("ListMetrics", &e))?;
    let mut storage_types: Vec<String> = listed
        .metrics()
        .iter()
        .flat_map(Metric::dimensions)
        .filter(|d| d.name() == Some("StorageType"))
        .filter_map(|d| d.value().map(str::to_owned))
        .collect();
    storage_types.sort();
    storage_types.dedup();
    if storage_types.is_empty() {
        return Ok(None);
    }
    let query = |id: String, metric: &str, storage_type: &str| {
        let metric = Metric::builder()
            .namespace(NAMESPACE)
            .metric_name(metric)
            .dimensions(dimension("BucketName", bucket))
            .dimensions(dimension("StorageType", storage_type))
            .build();
        MetricDataQuery::builder()
            .id(id)
            .metric_stat(MetricStat::builder().metric(metric).period(86_400).stat("Average").build())
            .return_data(true)
            .build()
    };
    // Whole days, from midnight UTC: the periods then fall on the days S3 stamps its figures with.
    let start = today.checked_sub_days(Days::new(4)).unwrap_or(today);
    let end = today.checked_add_days(Days::new(1)).unwrap_or(today);
    let at = |day: NaiveDate| AwsTime::from_secs(day.and_hms_opt(0, 0, 0).map_or(0, |t| t.and_utc().timestamp()));
    let mut request = cloudwatch.get_metric_data().start_time(at(start)).end_time(at(end));
    for (i, storage_type) in storage_types.iter().enumerate() {
        request = request.metric_data_queries(query(format!("size{i}"), SIZE, storage_type));
    }
    request = request.metric_data_queries(query("objects".to_owned(), OBJECTS, "AllStorageTypes"));
    let answer = request.send().await.map_err(|e| AwsFailure::from_sdk("GetMetricData", &e))?;

    // Each series' values by day. A day counts only once every storage type that reported in the window has it: a
    // day S3 has published for some types and not yet others would read as a bucket that shrank.
    let mut series: BTreeMap<String, BTreeMap<NaiveDate, f64>> = BTreeMap::new();
    for result in answer.metric_data_results() {
        let Some(id) = result.id() else { continue };
        let days = result
            .timestamps()
            .iter()
            .zip(result.values())
            .filter_map(|(t, v)| Some((DateTime::<Utc>::from_timestamp(t.secs(), 0)?.date_naive(), *v)));
        series.entry(id.to_owned()).or_default().extend(days);
    }
    let sizes: Vec<(&String, &BTreeMap<NaiveDate, f64>)> =
        series.iter().filter(|(id, days)| id.starts_with("size") && !days.is_empty()).collect();
    let complete = |day: &NaiveDate| sizes.iter().all(|(_, days)| days.contains_key(day));
    let Some(metric_day) = sizes.iter().flat_map(|(_, days)| days.keys()).filter(|d| complete(d)).max().copied() else {
        return Ok(None);
    };
    let whole = |v: f64| -> u64 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a byte or object count S3 reported
        let n = v.max(0.0).round() as u64;
        n
    };
    let mut by_type = BTreeMap::new();
    for (i, storage_type) in storage_types.iter().enumerate() {
        if let Some(value) = series.get(&format!("size{i}")).and_then(|days| days.get(&metric_day)) {
            by_type.insert(storage_type.clone(), whole(*value));
        }
    }
    let objects = series.get("objects").and_then(|days| days.get(&metric_day)).map(|v| whole(*v));
    Ok(Some(Reported { metric_day, bytes: by_type.values().sum(), objects, by_type }))
}
