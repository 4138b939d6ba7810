//! The harness itself: each piece a later test relies on, shown working against the real services.

use aws_sdk_s3::primitives::ByteStream;
use integration_tests::{MAX_RECEIVE_COUNT, TestContext, TestDatabase, admin_database_url};
use sqlx::{Connection, PgConnection};

async fn database_exists(name: &str) -> bool {
    let mut admin = PgConnection::connect(&admin_database_url()).await.expect("admin connection");
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(&mut admin)
        .await
        .expect("pg_database query")
}

#[tokio::test]
async fn each_test_database_is_dropped_when_the_test_ends() {
    let db = TestDatabase::new().await;
    let name = db.name.clone();
    sqlx::query("SELECT 1").execute(&db.pool).await.expect("the fresh database answers");
    assert!(database_exists(&name).await);
    drop(db);
    assert!(!database_exists(&name).await, "{name} outlived its test");
}

#[tokio::test]
async fn a_panicking_test_still_drops_its_database() {
    let (tx, rx) = std::sync::mpsc::channel();
    // A whole test, on its own thread and runtime, that panics while its database is open.
    let outcome = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async move {
            let db = TestDatabase::new().await;
            sqlx::query("SELECT 1").execute(&db.pool).await.expect("connected");
            tx.send(db.name.clone()).expect("send name");
            panic!("a test failing with its database open");
        })
    })
    .join();
    assert!(outcome.is_err(), "the inner test should have panicked");
    let name = rx.recv().expect("the inner test created a database");
    assert!(!database_exists(&name).await, "{name} survived a panicking test");
}

#[tokio::test]
async fn a_message_sent_to_the_harness_queue_is_received() {
    let ctx = TestContext::new().await;
    ctx.sqs.send_message().queue_url(&ctx.queue.url).message_body(r#"{"hello":"queue"}"#).send().await.expect("send");
    let received =
        ctx.sqs.receive_message().queue_url(&ctx.queue.url).wait_time_seconds(5).send().await.expect("receive");
    let bodies: Vec<_> = received.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, [r#"{"hello":"queue"}"#]);
}

#[tokio::test]
async fn an_object_put_in_the_harness_bucket_is_listed() {
    let ctx = TestContext::new().await;
    ctx.s3
        .put_object()
        .bucket(&ctx.bucket)
        .key("images/cat.png")
        .body(ByteStream::from_static(b"not really a png"))
        .send()
        .await
        .expect("put");
    let listing = ctx.s3.list_objects_v2().bucket(&ctx.bucket).send().await.expect("list");
    let objects: Vec<_> = listing.contents().iter().map(|o| (o.key().unwrap_or_default(), o.size())).collect();
    assert_eq!(objects, [("images/cat.png", Some(16))]);
}

#[tokio::test]
async fn a_message_moves_to_the_dlq_after_max_receive_count_receives() {
    let ctx = TestContext::new().await;
    ctx.sqs.send_message().queue_url(&ctx.queue.url).message_body("poison").send().await.expect("send");

    let mut receives = 0;
    loop {
        // Visibility 0 hands the message straight back, as a consumer that failed it would after its timeout.
        let batch = ctx
            .sqs
            .receive_message()
            .queue_url(&ctx.queue.url)
            .visibility_timeout(0)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        if batch.messages().is_empty() {
            break;
        }
        receives += batch.messages().len() as u32;
        assert!(receives <= MAX_RECEIVE_COUNT, "received {receives} times; the redrive policy did not apply");
    }
    assert_eq!(receives, MAX_RECEIVE_COUNT);

    let dead = ctx
        .sqs
        .receive_message()
        .queue_url(&ctx.queue.dlq_url)
        .wait_time_seconds(5)
        .send()
        .await
        .expect("receive from DLQ");
    let bodies: Vec<_> = dead.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["poison"]);
}
