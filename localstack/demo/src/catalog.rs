//! The demo catalog: three workspaces of an application whose records refer to their files in three ways (a
//! foreign key, an `asset_id[]` column, JSONB documents), with assets in every situation the sweeper meets.
//!
//! Every run seeds new workspaces, so a second run is a new catalog beside the first, and what the first run
//! decided stays as it was.

use std::fmt;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{Connection as _, PgPool};
use uuid::Uuid;

/// The application's tables, as its own migrations would create them. Idempotent.
const OWNER_TABLES: &str = r#"
CREATE TABLE IF NOT EXISTS products (
    id           bigserial PRIMARY KEY,
    workspace_id uuid NOT NULL,
    name         text NOT NULL,
    hero_image   uuid REFERENCES asset_sweeper_private.assets (id)
);
CREATE INDEX IF NOT EXISTS products_hero_image ON products (hero_image);

CREATE TABLE IF NOT EXISTS documents (
    id           bigserial PRIMARY KEY,
    workspace_id uuid NOT NULL,
    title        text NOT NULL,
    attachments  asset_sweeper.asset_id[] NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS documents_attachments ON documents USING gin (attachments);

CREATE TABLE IF NOT EXISTS pages (
    id           bigserial PRIMARY KEY,
    workspace_id uuid NOT NULL,
    slug         text NOT NULL,
    body         jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS pages_body ON pages USING gin (body jsonb_path_ops);
INSERT INTO asset_sweeper.asset_reference_sources (table_name, column_name, json_path, note)
VALUES ('pages', 'body', '$.blocks[*].asset_id', 'image blocks of a page')
ON CONFLICT DO NOTHING;

-- Orders keep their receipt through a foreign key; closed orders are kept two years (a retention rule, which the
-- sweep applies first in every pass).
CREATE TABLE IF NOT EXISTS orders (
    id           bigserial PRIMARY KEY,
    workspace_id uuid NOT NULL,
    number       text NOT NULL,
    status       text NOT NULL,
    placed_at    timestamptz NOT NULL,
    receipt      uuid REFERENCES asset_sweeper_private.assets (id)
);
CREATE INDEX IF NOT EXISTS orders_receipt ON orders (receipt);
CREATE INDEX IF NOT EXISTS orders_placed_at ON orders (placed_at);
INSERT INTO asset_sweeper.retention_rules (table_name, timestamp_column, keep, filter, description)
SELECT 'orders', 'placed_at', '2 years', 'status = ''closed''', 'closed orders are kept two years'
 WHERE NOT EXISTS (SELECT 1 FROM asset_sweeper.retention_rules WHERE table_name = 'public.orders');

-- The application's own guard, which the sweeper knows nothing about: rows of files under legal hold may not
-- be deleted. It makes the demo's poison case.
CREATE OR REPLACE FUNCTION demo_legal_hold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'asset % is under legal hold (%): the application refuses its deletion', OLD.id, OLD.storage_key;
END
$$;
DROP TRIGGER IF EXISTS demo_legal_hold ON asset_sweeper_private.assets;
CREATE TRIGGER demo_legal_hold BEFORE DELETE ON asset_sweeper_private.assets
    FOR EACH ROW WHEN (OLD.storage_key LIKE '%/legal-hold/%') EXECUTE FUNCTION demo_legal_hold();
"#;

/// What settlement should decide about a seeded asset, and so what must become of its row and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// Not due: the sweep does not look at it.
    NotDue,
    /// Still referenced: back to `attached`, bytes untouched.
    Keep,
    /// Released and unreferenced: `retired`, restorable, bytes untouched.
    Retire,
    /// Attached, yet nothing refers to it and nobody released it: discovered, then `retired` like any other.
    DiscoverAndRetire,
    /// Its only record expired under a retention rule: deleted first in a pass, then discovered and retired by the
    /// same pass.
    ExpireAndRetire,
    /// Abandoned upload: row and bytes gone.
    Delete,
    /// Abandoned upload whose bytes another asset shares: the row goes, the bytes stay.
    DeleteRowOnly,
    /// Retired past its purge time: row and bytes gone.
    Purge,
    /// Written within the grace period: looked at again later.
    Defer,
    /// Fails every delivery: dead-lettered, marked `failed`, bytes untouched.
    Fail,
}

impl Expect {
    /// The audit action that settles it, if the sweep looks at it.
    pub fn action(self) -> Option<&'static str> {
        match self {
            Self::NotDue => None,
            Self::Keep => Some("keep"),
            Self::Retire | Self::DiscoverAndRetire | Self::ExpireAndRetire => Some("retire"),
            Self::Delete | Self::DeleteRowOnly => Some("delete"),
            Self::Purge => Some("purge"),
            Self::Defer => Some("defer"),
            Self::Fail => Some("failed"),
        }
    }

    /// Whether the row must still exist afterwards.
    pub fn keeps_row(self) -> bool {
        !matches!(self, Self::Delete | Self::DeleteRowOnly | Self::Purge)
    }

    /// Whether the bytes must still be readable afterwards.
    pub fn keeps_bytes(self) -> bool {
        !matches!(self, Self::Delete | Self::Purge)
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotDue => "not due",
            Self::Keep => "keep",
            Self::Retire => "retire",
            Self::DiscoverAndRetire => "discover, then retire",
            Self::ExpireAndRetire => "its record expires, then discover and retire in the same pass",
            Self::Delete => "delete",
            Self::DeleteRowOnly => "delete the row, keep the shared bytes",
            Self::Purge => "purge",
            Self::Defer => "defer",
            Self::Fail => "fail to the DLQ",
        })
    }
}

/// The record that refers to an asset, if any.
#[derive(Clone, Copy)]
enum Owner {
    None,
    /// `products.hero_image`, a foreign key.
    Product(&'static str),
    /// `documents.attachments`, an `asset_id[]`.
    Document(&'static str),
    /// An image block in `pages.body`, a declared JSONB source.
    Page(&'static str),
    /// A product that showed it, deleted since with plain SQL: the application never released the asset.
    DeletedProduct(&'static str),
    /// `orders.receipt`, a foreign key, of an order placed `age` ago (an SQL interval) and closed.
    Order {
        number: &'static str,
        age: &'static str,
    },
}

struct Spec {
    workspace: &'static str,
    file: &'static str,
    bytes: i64,
    state: &'static str,
    /// How long ago the application last wrote about it (an SQL interval).
    age: &'static str,
    owner: Owner,
    /// Another spec's file whose bytes this asset shares (a second upload of the same content).
    shares: Option<&'static str>,
    expect: Expect,
    why: &'static str,
}

const SPECS: &[Spec] = &[
    // acme-shop: products show a hero image through a foreign key.
    Spec {
        workspace: "acme-shop",
        file: "trail-runner.jpg",
        bytes: 412_000,
        state: "attached",
        age: "40 days",
        owner: Owner::Product("Trail runner"),
        shares: None,
        expect: Expect::NotDue,
        why: "a live product's hero image",
    },
    Spec {
        workspace: "acme-shop",
        file: "trail-runner-2026.jpg",
        bytes: 405_000,
        state: "released",
        age: "3 days",
        owner: Owner::Product("Trail runner 2026"),
        shares: None,
        expect: Expect::Keep,
        why: "released by an editor, yet a product still shows it",
    },
    Spec {
        workspace: "acme-shop",
        file: "summit-jacket-old.jpg",
        bytes: 372_000,
        state: "released",
        age: "3 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Retire,
        why: "a replaced photo nothing refers to",
    },
    Spec {
        workspace: "acme-shop",
        file: "espadrille-discontinued.jpg",
        bytes: 298_000,
        state: "attached",
        age: "60 days",
        owner: Owner::DeletedProduct("Espadrille (discontinued)"),
        shares: None,
        expect: Expect::DiscoverAndRetire,
        why: "its product was deleted with plain SQL and nobody released it: discovery finds no reference",
    },
    Spec {
        workspace: "acme-shop",
        file: "receipt-2023-0042.pdf",
        bytes: 85_000,
        state: "attached",
        age: "3 years",
        owner: Owner::Order { number: "A-2023-0042", age: "3 years" },
        shares: None,
        expect: Expect::ExpireAndRetire,
        why: "the receipt of an order closed three years ago: the retention rule deletes the order, then the pass finds the receipt unreferenced",
    },
    Spec {
        workspace: "acme-shop",
        file: "receipt-2026-0311.pdf",
        bytes: 92_000,
        state: "attached",
        age: "30 days",
        owner: Owner::Order { number: "A-2026-0311", age: "30 days" },
        shares: None,
        expect: Expect::NotDue,
        why: "the receipt of an order closed last month: kept by the retention rule",
    },
    Spec {
        workspace: "acme-shop",
        file: "upload-7f3a.jpg",
        bytes: 1_250_000,
        state: "abandoned",
        age: "8 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Delete,
        why: "uploaded eight days ago, never attached; retired for its trial a week ago, and a census has read everything since",
    },
    Spec {
        workspace: "northwind-docs",
        file: "scan-0077.pdf",
        bytes: 830_000,
        state: "pending",
        age: "8 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Retire,
        why: "uploaded eight days ago, never attached: retired for its trial, bytes in place, until a census begun after it has read everything",
    },
    Spec {
        workspace: "acme-shop",
        file: "trail-runner-copy.jpg",
        bytes: 412_000,
        state: "abandoned",
        age: "8 days",
        owner: Owner::None,
        shares: Some("trail-runner.jpg"),
        expect: Expect::DeleteRowOnly,
        why: "a second upload of the live hero image's bytes, never attached, its trial over",
    },
    Spec {
        workspace: "acme-shop",
        file: "spring-banner.jpg",
        bytes: 640_000,
        state: "retired",
        age: "31 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Purge,
        why: "retired 31 days ago; its 30 days to be restored are over",
    },
    // northwind-docs: documents list their attachments in an asset_id[] column.
    Spec {
        workspace: "northwind-docs",
        file: "handbook.pdf",
        bytes: 2_400_000,
        state: "attached",
        age: "90 days",
        owner: Owner::Document("Employee handbook"),
        shares: None,
        expect: Expect::NotDue,
        why: "a live document's attachment",
    },
    Spec {
        workspace: "northwind-docs",
        file: "q3-board-pack.pdf",
        bytes: 1_800_000,
        state: "released",
        age: "3 days",
        owner: Owner::Document("Board meeting, Q3"),
        shares: None,
        expect: Expect::Keep,
        why: "released, yet still attached to a document",
    },
    Spec {
        workspace: "northwind-docs",
        file: "q2-report-draft.pdf",
        bytes: 1_650_000,
        state: "released",
        age: "3 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Retire,
        why: "a draft removed from its document",
    },
    Spec {
        workspace: "northwind-docs",
        file: "scan-0042.pdf",
        bytes: 950_000,
        state: "abandoned",
        age: "8 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Delete,
        why: "an abandoned upload, its trial over",
    },
    Spec {
        workspace: "northwind-docs",
        file: "legal-hold/contract-scan.pdf",
        bytes: 3_100_000,
        state: "abandoned",
        age: "8 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Fail,
        why: "abandoned, but the application's legal-hold trigger refuses every delete of its row",
    },
    // globex-wiki: pages embed images in JSONB documents, declared in asset_reference_sources.
    Spec {
        workspace: "globex-wiki",
        file: "architecture.png",
        bytes: 520_000,
        state: "attached",
        age: "120 days",
        owner: Owner::Page("architecture"),
        shares: None,
        expect: Expect::NotDue,
        why: "an image on a live page",
    },
    Spec {
        workspace: "globex-wiki",
        file: "onboarding-diagram.png",
        bytes: 310_000,
        state: "released",
        age: "3 days",
        owner: Owner::Page("onboarding"),
        shares: None,
        expect: Expect::Keep,
        why: "released, yet a page still embeds it",
    },
    Spec {
        workspace: "globex-wiki",
        file: "roadmap-2025.png",
        bytes: 450_000,
        state: "released",
        age: "3 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Retire,
        why: "last year's roadmap, on no page any more",
    },
    Spec {
        workspace: "globex-wiki",
        file: "old-logo.png",
        bytes: 88_000,
        state: "retired",
        age: "31 days",
        owner: Owner::None,
        shares: None,
        expect: Expect::Purge,
        why: "retired 31 days ago",
    },
    Spec {
        workspace: "globex-wiki",
        file: "sprint-board.png",
        bytes: 270_000,
        state: "released",
        age: "2 hours",
        owner: Owner::None,
        shares: None,
        expect: Expect::Defer,
        why: "released two hours ago: inside the 24 h grace period",
    },
];

/// Each workspace's storage quota, in bytes (`workspace_quotas`): what its uploads are checked against.
pub const QUOTAS: &[(&str, i64)] =
    &[("acme-shop", 1_000_000), ("northwind-docs", 12_000_000), ("globex-wiki", 2_000_000)];

/// One seeded asset and what should become of it.
#[derive(Debug, Clone, Serialize)]
pub struct Seeded {
    pub id: Uuid,
    pub workspace: &'static str,
    pub workspace_id: Uuid,
    pub file: &'static str,
    pub storage_key: String,
    pub bytes: i64,
    pub expect: Expect,
    pub why: &'static str,
}

/// What one run seeded.
#[derive(Debug, Clone, Serialize)]
pub struct Catalog {
    pub seeded_at: DateTime<Utc>,
    pub assets: Vec<Seeded>,
}

impl Catalog {
    /// The assets the sweep should claim.
    pub fn due(&self) -> impl Iterator<Item = &Seeded> {
        self.assets.iter().filter(|a| a.expect != Expect::NotDue)
    }

    pub fn get(&self, file: &str) -> Option<&Seeded> {
        self.assets.iter().find(|a| a.file == file)
    }

    /// Each workspace's name and id, in name order.
    pub fn workspaces(&self) -> Vec<(&'static str, Uuid)> {
        let ids: std::collections::BTreeMap<&str, Uuid> =
            self.assets.iter().map(|a| (a.workspace, a.workspace_id)).collect();
        ids.into_iter().collect()
    }
}

/// What the application's DBA grants the sweeper's roles on its tables (docs/security.md): they read every table,
/// and the sweep deletes from the table its retention rule names (with `UPDATE` of one column, for the batches'
/// row locks).
const DBA_GRANTS: &str = "
GRANT USAGE ON SCHEMA public TO asset_sweeper_sweep, asset_sweeper_consumer, asset_sweeper_operator;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO asset_sweeper_sweep, asset_sweeper_consumer, asset_sweeper_operator;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
    GRANT SELECT ON TABLES TO asset_sweeper_sweep, asset_sweeper_consumer, asset_sweeper_operator;
GRANT DELETE, UPDATE (placed_at) ON public.orders TO asset_sweeper_sweep;";

/// Creates the application's tables and its guard (idempotent), then what an operator runs next,
/// `asset-sweeper guards install`: the reference guards on its non-foreign-key sources.
pub async fn install_owner_tables(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::raw_sql(OWNER_TABLES).execute(pool).await.context("creating the demo application's tables")?;
    sqlx::raw_sql(DBA_GRANTS).execute(pool).await.context("granting the sweeper's roles their reading")?;
    let mut conn = crate::sweeper_session(pool).await.context("installing the reference guards")?;
    let (report, _) = schema::check::install_guards(&mut conn, schema::guards::Patience::default())
        .await
        .context("installing the reference guards")?;
    if let Some(blocked) = report.blocked.first() {
        anyhow::bail!("installing the reference guards: {}: {}", blocked.table, blocked.reason);
    }
    conn.close().await?;
    Ok(())
}

/// Seeds a new catalog: bytes into `bucket`, rows as the application would have written them, owner records.
pub async fn seed(pool: &PgPool, s3: &aws_sdk_s3::Client, bucket: &str) -> anyhow::Result<Catalog> {
    let seeded_at = Utc::now();
    let mut workspaces = std::collections::BTreeMap::new();
    let mut assets: Vec<Seeded> = Vec::with_capacity(SPECS.len());
    for spec in SPECS {
        let workspace_id = *workspaces.entry(spec.workspace).or_insert_with(Uuid::new_v4);
        let storage_key = match spec.shares {
            Some(file) => assets
                .iter()
                .find(|a| a.file == file && a.workspace_id == workspace_id)
                .map(|a| a.storage_key.clone())
                .with_context(|| format!("{} shares {file}, which must be seeded before it", spec.file))?,
            None => {
                let key = format!("{workspace_id}/{}", spec.file);
                put(s3, bucket, &key, spec.bytes).await?;
                key
            }
        };
        let id = insert_asset(pool, workspace_id, &storage_key, spec).await?;
        insert_owner(pool, workspace_id, id, spec.owner).await?;
        assets.push(Seeded {
            id,
            workspace: spec.workspace,
            workspace_id,
            file: spec.file,
            storage_key,
            bytes: spec.bytes,
            expect: spec.expect,
            why: spec.why,
        });
    }
    for (name, quota) in QUOTAS {
        if let Some(id) = workspaces.get(name) {
            sqlx::query("INSERT INTO asset_sweeper.workspace_quotas (workspace_id, quota_bytes) VALUES ($1, $2)")
                .bind(id)
                .bind(quota)
                .execute(pool)
                .await
                .with_context(|| format!("the quota of {name}"))?;
        }
    }
    Ok(Catalog { seeded_at, assets })
}

/// Content of `size` bytes: what it is does not matter, only that it is there and how big.
async fn put(s3: &aws_sdk_s3::Client, bucket: &str, key: &str, size: i64) -> anyhow::Result<()> {
    let size = usize::try_from(size).context("negative size")?;
    let body: Vec<u8> = key.bytes().cycle().take(size).collect();
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(body.into())
        .send()
        .await
        .with_context(|| format!("putting s3://{bucket}/{key}"))?;
    Ok(())
}

/// The stored object and the asset row, aged as the application would have left them `spec.age` ago. Due rows
/// are due now; a retired row's purge time has passed; a pending row gets its due time from the project's
/// trigger (a day after the upload). `abandoned` is an upload never attached that the sweeper retired for its trial
/// `spec.age` ago (its purge time its retirement). Written to the tables themselves, as history: the sweeper's own
/// columns of a retired row are not the application's to write through its views.
async fn insert_asset(pool: &PgPool, workspace: Uuid, key: &str, spec: &Spec) -> anyhow::Result<Uuid> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO asset_sweeper_private.stored_objects (storage_key, content_hash, byte_size)
         VALUES ($1, 'sha256:' || md5($1), $2)
         ON CONFLICT (storage_key) DO NOTHING",
    )
    .bind(key)
    .bind(spec.bytes)
    .execute(&mut *tx)
    .await?;
    let id: Uuid = sqlx::query_scalar(
        "INSERT INTO asset_sweeper_private.assets (workspace_id, storage_key, content_hash, byte_size, state, due_at,
                                                   created_at, updated_at, retired_at, purge_after)
         SELECT $1, $2, 'sha256:' || md5($2), $3, CASE WHEN $4 = 'abandoned' THEN 'retired' ELSE $4 END,
                CASE WHEN $4 IN ('released', 'retired', 'abandoned') THEN now() - interval '1 minute' END, t, t,
                CASE WHEN $4 IN ('retired', 'abandoned') THEN t END,
                CASE $4 WHEN 'retired' THEN now() - interval '1 minute' WHEN 'abandoned' THEN t END
           FROM (SELECT now() - $5::interval AS t) written
         RETURNING id",
    )
    .bind(workspace)
    .bind(key)
    .bind(spec.bytes)
    .bind(spec.state)
    .bind(spec.age)
    .fetch_one(&mut *tx)
    .await
    .with_context(|| format!("inserting the asset row for {key}"))?;
    // The insert counted as a write about the stored object (an upload restarts its grace period): date that
    // write to the seeded age, never later than a sharer's.
    sqlx::query(
        "UPDATE asset_sweeper_private.stored_objects o
            SET updated_at = (SELECT max(a.created_at) FROM asset_sweeper.assets a WHERE a.storage_key = $1)
          WHERE o.storage_key = $1",
    )
    .bind(key)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(id)
}

async fn insert_owner(pool: &PgPool, workspace: Uuid, asset: Uuid, owner: Owner) -> anyhow::Result<()> {
    let (sql, text) = match owner {
        Owner::None => return Ok(()),
        Owner::Product(name) => ("INSERT INTO products (workspace_id, name, hero_image) VALUES ($1, $2, $3)", name),
        Owner::DeletedProduct(name) => {
            ("INSERT INTO products (workspace_id, name, hero_image) VALUES ($1, $2, $3)", name)
        }
        Owner::Order { number, age } => {
            sqlx::query(
                "INSERT INTO orders (workspace_id, number, status, placed_at, receipt)
                 VALUES ($1, $2, 'closed', now() - $3::interval, $4),
                 -- As old, but still open: the rule's filter keeps it.
                        ($1, $2::text || '-open', 'open', now() - $3::interval, NULL)",
            )
            .bind(workspace)
            .bind(number)
            .bind(age)
            .bind(asset)
            .execute(pool)
            .await
            .context("inserting the order")?;
            return Ok(());
        }
        Owner::Document(title) => (
            "INSERT INTO documents (workspace_id, title, attachments)
             VALUES ($1, $2, ARRAY[$3]::asset_sweeper.asset_id[])",
            title,
        ),
        Owner::Page(slug) => (
            "INSERT INTO pages (workspace_id, slug, body)
             VALUES ($1, $2, jsonb_build_object('blocks', jsonb_build_array(
                 jsonb_build_object('type', 'heading', 'text', $2::text),
                 jsonb_build_object('type', 'image', 'asset_id', $3::text))))",
            slug,
        ),
    };
    sqlx::query(sql)
        .bind(workspace)
        .bind(text)
        .bind(asset)
        .execute(pool)
        .await
        .context("inserting the owner record")?;
    if let Owner::DeletedProduct(_) = owner {
        // As a catalogue clean-up by hand leaves it: the record gone, the asset still `attached`, no due time.
        sqlx::query("DELETE FROM products WHERE hero_image = $1")
            .bind(asset)
            .execute(pool)
            .await
            .context("deleting the owner record with plain SQL")?;
    }
    Ok(())
}
