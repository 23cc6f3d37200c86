//! The PostgreSQL side before streaming starts: parse the DSN, check the tables and
//! templates against the catalog, create the publication and the slot if missing, and
//! build the replication connection's settings.

use std::time::Duration;

use pgwire_replication::config::{ReplicationConfig, TlsConfig};
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use crate::config::{quote_ident, Config};
use crate::InvalidateError::{self, Database, Refused};

pub fn parse_dsn(dsn: &str) -> Result<tokio_postgres::Config, InvalidateError> {
    dsn.parse::<tokio_postgres::Config>()
        .map_err(InvalidateError::Dsn)
}

pub(crate) fn describe(pg: &tokio_postgres::Config) -> String {
    let host = match pg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    format!("{host} port {port}")
}

/// A `tokio_postgres::Error` as one line, with the server's message when there is one.
pub(crate) fn pg_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

/// An ordinary (not replication) connection within `limit`, its driver spawned: what the
/// replica gate and the visibility check ask their questions on.
pub(crate) async fn connect_within(
    pg: &tokio_postgres::Config,
    limit: std::time::Duration,
) -> Result<tokio_postgres::Client, String> {
    let (client, conn) = tokio::time::timeout(limit, pg.connect(tokio_postgres::NoTls))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| pg_error(&e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

async fn connect(pg: &tokio_postgres::Config) -> Result<Client, InvalidateError> {
    let (client, conn) = pg.connect(NoTls).await.map_err(|e| {
        Database(format!(
            "cannot connect to PostgreSQL at {}: {}",
            describe(pg),
            pg_error(&e)
        ))
    })?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// Everything `prepare` learned that the operator should hear about.
pub struct Prepared {
    pub warnings: Vec<String>,
    pub created: Vec<String>,
}

/// Checks the configuration against the database and creates what is missing. Every
/// refusal is one sentence naming the table, column, publication or slot at fault.
pub async fn prepare(
    config: &Config,
    pg: &tokio_postgres::Config,
) -> Result<Prepared, InvalidateError> {
    let client = connect(pg).await?;
    let q = |e: tokio_postgres::Error| Database(pg_error(&e));
    let mut warnings = Vec::new();
    let mut created = Vec::new();

    for t in &config.tables {
        let rows = client
            .query(
                "SELECT a.attname::text, c.relreplident::text, \
                        coalesce(a.attnum = ANY(i.indkey::int2[]), false) \
                 FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                 LEFT JOIN pg_index i ON i.indrelid = c.oid AND \
                      ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident)) \
                 WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')",
                &[&t.schema, &t.name],
            )
            .await
            .map_err(q)?;
        if rows.is_empty() {
            return Err(Refused(format!(
                "table {} does not exist",
                t.display_name()
            )));
        }
        let full = rows.iter().any(|r| r.get::<_, String>(1) == "f");
        for tpl in &t.templates {
            for col in tpl.columns() {
                let Some(row) = rows.iter().find(|r| r.get::<_, String>(0) == col) else {
                    return Err(Refused(format!(
                        "key template {:?} of table {} names column {col:?}, which the table does not have",
                        tpl.source(),
                        t.display_name()
                    )));
                };
                let in_identity: bool = row.get(2);
                if !full && !in_identity && (t.changes.update || t.changes.delete) {
                    warnings.push(format!(
                        "table {}: column {col:?} (key template {:?}) is not in the table's REPLICA IDENTITY, \
                         so a DELETE, or an UPDATE that changes it, cannot invalidate the old key; \
                         run ALTER TABLE {} REPLICA IDENTITY FULL",
                        t.display_name(),
                        tpl.source(),
                        t.quoted()
                    ));
                }
            }
        }
    }

    let publication = &config.source.publication;
    let pubrow = client
        .query_opt(
            "SELECT pubinsert, pubupdate, pubdelete FROM pg_publication WHERE pubname = $1",
            &[publication],
        )
        .await
        .map_err(q)?;
    match pubrow {
        None => {
            let list: Vec<String> = config.tables.iter().map(|t| t.quoted()).collect();
            let created_publication = client
                .batch_execute(&format!(
                    "CREATE PUBLICATION {} FOR TABLE {}",
                    quote_ident(publication),
                    list.join(", ")
                ))
                .await
                .map_err(|e| (pg_error(&e), e.code().cloned()));
            if let Err((error, code)) = created_publication {
                let mut msg = format!("cannot create publication {publication}: {error}");
                if code == Some(SqlState::INSUFFICIENT_PRIVILEGE) {
                    let hint = publication_grant_hint(&client, config, &error).await;
                    msg.push_str(&format!("; {hint}"));
                }
                return Err(Refused(msg));
            }
            created.push(format!("publication {publication}"));
        }
        Some(row) => {
            let (ins, upd, del): (bool, bool, bool) = (row.get(0), row.get(1), row.get(2));
            let published = client
                .query(
                    "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1",
                    &[publication],
                )
                .await
                .map_err(q)?;
            for t in &config.tables {
                let listed = published
                    .iter()
                    .any(|r| r.get::<_, String>(0) == t.schema && r.get::<_, String>(1) == t.name);
                if !listed {
                    return Err(Refused(format!(
                        "table {} is not in publication {publication}; run ALTER PUBLICATION {} ADD TABLE {}",
                        t.display_name(),
                        quote_ident(publication),
                        t.quoted()
                    )));
                }
                let missing: Vec<&str> = [
                    (t.changes.insert && !ins, "insert"),
                    (t.changes.update && !upd, "update"),
                    (t.changes.delete && !del, "delete"),
                ]
                .iter()
                .filter(|(m, _)| *m)
                .map(|(_, n)| *n)
                .collect();
                if !missing.is_empty() {
                    return Err(Refused(format!(
                        "publication {publication} does not publish {} but table {} asks for it",
                        missing.join(", "),
                        t.display_name()
                    )));
                }
            }
        }
    }

    let slot = &config.source.slot;
    // A consumer killed a moment ago leaves its walsender behind briefly, so an active
    // slot is looked at again for a few seconds before it counts as someone else's.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let row = client
            .query_opt(
                "SELECT plugin::text, slot_type::text, active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[slot],
            )
            .await
            .map_err(q)?;
        let Some(row) = row else {
            client
                .query(
                    "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
                    &[slot],
                )
                .await
                .map_err(|e| {
                    Refused(format!(
                        "cannot create replication slot {slot}: {}",
                        pg_error(&e)
                    ))
                })?;
            created.push(format!("replication slot {slot}"));
            break;
        };
        let plugin: Option<String> = row.get(0);
        let kind: String = row.get(1);
        let pid: Option<i32> = row.get(2);
        if kind != "logical" || plugin.as_deref() != Some("pgoutput") {
            return Err(Refused(format!(
                "replication slot {slot} exists but is a {kind} slot with plugin {}; memfleet needs a logical pgoutput slot",
                plugin.as_deref().unwrap_or("none")
            )));
        }
        match pid {
            None => break,
            Some(pid) if tokio::time::Instant::now() >= deadline => {
                return Err(Refused(format!(
                    "replication slot {slot} is in use by another consumer (walsender pid {pid})"
                )));
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    Ok(Prepared { warnings, created })
}

/// What the connected role lacks for `CREATE PUBLICATION` (refused with `error`): `CREATE`
/// on the database, or ownership of the tables (membership in their owner role).
async fn publication_grant_hint(client: &Client, config: &Config, error: &str) -> String {
    let who = client
        .query_one("SELECT current_database()::text, current_user::text", &[])
        .await;
    let (db, user) = match &who {
        Ok(row) => (row.get::<_, String>(0), row.get::<_, String>(1)),
        Err(_) => ("<database>".into(), "<role>".into()),
    };
    let mut owners = Vec::new();
    for t in &config.tables {
        let row = client
            .query_opt(
                "SELECT pg_get_userbyid(c.relowner)::text FROM pg_class c \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE n.nspname = $1 AND c.relname = $2 \
                 AND NOT pg_has_role(current_user, c.relowner, 'USAGE')",
                &[&t.schema, &t.name],
            )
            .await;
        if let Ok(Some(row)) = row {
            owners.push(row.get::<_, String>(0));
        }
    }
    owners.sort();
    owners.dedup();
    let tables: Vec<String> = config
        .tables
        .iter()
        .map(|t| format!("{}.{}", ident(&t.schema), ident(&t.name)))
        .collect();
    grant_hint(
        error,
        &db,
        &user,
        &owners,
        &config.source.publication,
        &tables,
    )
}

fn grant_hint(
    error: &str,
    db: &str,
    user: &str,
    owners: &[String],
    publication: &str,
    tables: &[String],
) -> String {
    let (db, user) = (ident(db), ident(user));
    let mut missing = Vec::new();
    if error.contains("permission denied for database") {
        missing.push(format!("GRANT CREATE ON DATABASE {db} TO {user}"));
    }
    for owner in owners {
        missing.push(format!("GRANT {} TO {user}", ident(owner)));
    }
    let grants = if missing.is_empty() {
        String::new()
    } else {
        format!("grant what {user} lacks ({}), or ", missing.join("; "))
    };
    format!(
        "creating a publication needs CREATE on the database and ownership of its tables: \
         {grants}have a superuser run CREATE PUBLICATION {} FOR TABLE {} once (docs/invalidate.md)",
        ident(publication),
        tables.join(", ")
    )
}

/// An identifier as an operator would type it: bare when it needs no quotes.
fn ident(s: &str) -> String {
    let plain = s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        s.to_owned()
    } else {
        quote_ident(s)
    }
}

/// The replication connection's settings, from the same DSN.
pub fn replication_config(
    config: &Config,
    pg: &tokio_postgres::Config,
) -> Result<ReplicationConfig, InvalidateError> {
    let user = match pg.get_user() {
        Some(u) => u.to_owned(),
        None => std::env::var("USER").map_err(|_| InvalidateError::NoUser)?,
    };
    let password = pg
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let dbname = pg.get_dbname().unwrap_or(&user).to_owned();
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    let host = match pg.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        _ => "localhost".into(),
    };
    let source = &config.source;
    let mut repl = match pg.get_hosts().first() {
        Some(Host::Unix(dir)) => ReplicationConfig::unix(
            dir.display().to_string(),
            port,
            user,
            password,
            dbname,
            source.slot.clone(),
            source.publication.clone(),
        ),
        _ => ReplicationConfig::new(
            host,
            user,
            password,
            dbname,
            source.slot.clone(),
            source.publication.clone(),
        )
        .with_port(port)
        .with_tls(TlsConfig::disabled()),
    };
    // Report progress soon after it is made, so the slot (and WAL retention) follows
    // closely behind the acknowledged deletes.
    repl = repl
        .with_status_interval(Duration::from_secs(1))
        .with_wakeup_interval(Duration::from_secs(1))
        .with_application_name("memfleet-invalidate");
    Ok(repl)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_hint_names_each_missing_grant() {
        let tables = ["public.users".to_string()];
        let hint = grant_hint(
            "ERROR: permission denied for database app",
            "app",
            "memfleet",
            &["app".into()],
            "memfleet",
            &tables,
        );
        assert!(hint.contains("GRANT CREATE ON DATABASE app TO memfleet; GRANT app TO memfleet"));
        assert!(hint.contains("CREATE PUBLICATION memfleet FOR TABLE public.users once"));
        // Owner only: no database grant asked for; names needing quotes are quoted.
        let hint = grant_hint(
            "ERROR: must be owner of table users",
            "my db",
            "memfleet",
            &["Owner".into()],
            "memfleet",
            &tables,
        );
        assert!(hint.contains(r#"(GRANT "Owner" TO memfleet)"#), "{hint}");
        assert!(!hint.contains("ON DATABASE"), "{hint}");
    }
}
