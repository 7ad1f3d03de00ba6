//! `JsNativeDatabase` and `JsSqliteTransaction`: the actor's SQLite
//! database (`ActorContext.sql()`), a thin napi layer over
//! [`rivetkit_native_core::sqlite`], which documents the semantics (opened
//! on the first statement, transactions, limits, what an ended generation
//! may do); see docs/sqlite.md.
//!
//! Values cross as the reference addon passes them: bound parameters are
//! `{kind, intValue | floatValue | textValue | blobValue}` (`intValue` may
//! also be a `bigint`, read exactly); in rows, an integer is a `number`, or
//! a `bigint` beyond ±(2^53-1); a real is a `number`; text a `string`; a
//! blob an array of byte values; NULL is `null`. Every method returns a
//! promise; malformed arguments reject with `napi.invalid_argument`.

use std::time::Duration;

use napi::bindgen_prelude::{BigInt, Buffer, JsValue, Null, Object, PromiseRaw, ToNapiValue, TypeName, Unknown};
use napi::{Env, ValueType};
use napi_derive::napi;
use rivetkit_native_core::error::validate::{self, invalid};
use rivetkit_native_core::sqlite::{
    ActorDatabase, BatchStatement, BindParam, ColumnValue, ExecuteResult as CoreExecuteResult,
    QueryResult as CoreQueryResult, SqliteTransaction,
};

use crate::bridge::error::{reject, spawn_promise};
use crate::bridge::types::args::{self, ArgResult};

/// A bound parameter: `kind` is `null`, `int`, `float`, `text` or `blob`,
/// with the value in the matching field.
#[napi(object)]
pub struct JsBindParam {
    pub kind: String,
    pub int_value: Option<i64>,
    pub float_value: Option<f64>,
    pub text_value: Option<String>,
    pub blob_value: Option<Buffer>,
}

#[napi(object, object_from_js = false)]
pub struct ExecuteResult {
    pub changes: i64,
}

#[napi(object, object_from_js = false)]
pub struct QueryResult {
    pub columns: Vec<String>,
    #[napi(ts_type = "Array<Array<unknown>>")]
    pub rows: Vec<Vec<SqlValue>>,
}

#[napi(object, object_from_js = false)]
pub struct NativeExecuteResult {
    pub columns: Vec<String>,
    #[napi(ts_type = "Array<Array<unknown>>")]
    pub rows: Vec<Vec<SqlValue>>,
    pub changes: i64,
    /// The rowid of the last insert, when the statement changed rows.
    pub last_insert_row_id: Option<i64>,
}

#[napi(object)]
pub struct JsSqliteBatchStatement {
    pub sql: String,
    pub params: Option<Vec<JsBindParam>>,
}

/// The page store client's counters for an open database.
#[napi(object, object_from_js = false)]
pub struct JsSqliteVfsMetrics {
    pub request_build_ns: i64,
    pub serialize_ns: i64,
    pub transport_ns: i64,
    pub state_update_ns: i64,
    pub total_ns: i64,
    pub commit_count: i64,
    pub page_cache_entries: i64,
    pub page_cache_weighted_size: i64,
    pub page_cache_capacity_pages: i64,
    pub write_buffer_dirty_pages: i64,
    pub db_size_pages: i64,
}

/// One SQLite value on its way to JavaScript.
pub struct SqlValue(ColumnValue);

/// The largest integer a JavaScript number holds exactly.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

impl TypeName for SqlValue {
    fn type_name() -> &'static str {
        "unknown"
    }
    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

impl ToNapiValue for SqlValue {
    unsafe fn to_napi_value(env: napi::sys::napi_env, value: Self) -> napi::Result<napi::sys::napi_value> {
        unsafe {
            match value.0 {
                ColumnValue::Null => Null::to_napi_value(env, Null),
                ColumnValue::Integer(n) if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&n) => {
                    f64::to_napi_value(env, n as f64)
                }
                ColumnValue::Integer(n) => BigInt::to_napi_value(env, BigInt::from(n)),
                ColumnValue::Float(f) => f64::to_napi_value(env, f),
                ColumnValue::Text(s) => String::to_napi_value(env, s),
                ColumnValue::Blob(bytes) => Vec::<u32>::to_napi_value(env, bytes.into_iter().map(u32::from).collect()),
            }
        }
    }
}

fn rows(rows: Vec<Vec<ColumnValue>>) -> Vec<Vec<SqlValue>> {
    rows.into_iter().map(|row| row.into_iter().map(SqlValue).collect()).collect()
}

fn query_result(result: CoreQueryResult) -> QueryResult {
    QueryResult { columns: result.columns, rows: rows(result.rows) }
}

pub(crate) fn execute_result(result: CoreExecuteResult) -> NativeExecuteResult {
    NativeExecuteResult {
        columns: result.columns,
        rows: rows(result.rows),
        changes: result.changes,
        last_insert_row_id: result.last_insert_row_id,
    }
}

/// Reads one bound parameter object.
fn bind_param(argument: &str, value: Unknown<'_>) -> ArgResult<BindParam> {
    if value.get_type().ok() != Some(ValueType::Object) || value.is_array().unwrap_or(false) {
        return Err(invalid(argument, format!("expected a bind parameter object, got {}", args::type_name(&value))));
    }
    let object: Object<'_> = unsafe { value.cast() }.map_err(|e| invalid(argument, e.reason.clone()))?;
    let field = |name: &str| -> ArgResult<Unknown<'_>> {
        let path = format!("{argument}.{name}");
        object
            .get::<Unknown>(name)
            .map_err(|e| invalid(&path, e.reason.clone()))?
            .filter(|v| !args::is_nullish(v))
            .ok_or_else(|| invalid(&path, "missing"))
    };
    let kind = args::string(&format!("{argument}.kind"), field("kind")?)?;
    Ok(match kind.as_str() {
        "null" => BindParam::Null,
        "int" => BindParam::Integer(integer(&format!("{argument}.intValue"), field("intValue")?)?),
        "float" => BindParam::Float(args::number(&format!("{argument}.floatValue"), field("floatValue")?)?),
        "text" => BindParam::Text(args::string(&format!("{argument}.textValue"), field("textValue")?)?),
        "blob" => BindParam::Blob(args::bytes(&format!("{argument}.blobValue"), field("blobValue")?)?),
        other => {
            return Err(invalid(
                &format!("{argument}.kind"),
                format!("unknown bind parameter kind '{other}' (expected null, int, float, text or blob)"),
            ))
        }
    })
}

/// A 64-bit integer from a whole `number` or a `bigint`.
fn integer(argument: &str, value: Unknown<'_>) -> ArgResult<i64> {
    if value.get_type().ok() == Some(ValueType::BigInt) {
        let big: BigInt = unsafe { value.cast() }.map_err(|e| invalid(argument, e.reason.clone()))?;
        return match big.get_i64() {
            (n, true) => Ok(n),
            _ => Err(invalid(argument, "the bigint does not fit in a 64-bit signed integer")),
        };
    }
    let n = args::number(argument, value)?;
    if !n.is_finite() || n.fract() != 0.0 {
        return Err(invalid(argument, format!("expected a whole number, got {}", validate::describe(n))));
    }
    // 2^63 is the first whole f64 out of range.
    if n < -(2f64.powi(63)) || n >= 2f64.powi(63) {
        return Err(invalid(argument, format!("{} does not fit in a 64-bit signed integer", validate::describe(n))));
    }
    Ok(n as i64)
}

pub(crate) fn bind_params(argument: &str, value: Option<Unknown<'_>>) -> ArgResult<Option<Vec<BindParam>>> {
    match value.filter(|v| !args::is_nullish(v)) {
        None => Ok(None),
        Some(value) => args::list(argument, value, bind_param).map(Some),
    }
}

fn batch(value: Unknown<'_>) -> ArgResult<Vec<BatchStatement>> {
    args::list("statements", value, |name, item| {
        if item.get_type().ok() != Some(ValueType::Object) || item.is_array().unwrap_or(false) {
            return Err(invalid(name, format!("expected a statement object, got {}", args::type_name(&item))));
        }
        let object: Object<'_> = unsafe { item.cast() }.map_err(|e| invalid(name, e.reason.clone()))?;
        let get = |field: &str| {
            object.get::<Unknown>(field).map_err(|e| invalid(&format!("{name}.{field}"), e.reason.clone()))
        };
        let sql = get("sql")?.ok_or_else(|| invalid(&format!("{name}.sql"), "missing"))?;
        Ok(BatchStatement {
            sql: args::string(&format!("{name}.sql"), sql)?,
            params: bind_params(&format!("{name}.params"), get("params")?)?,
        })
    })
}

/// A transaction timeout: a positive, finite number of ms.
pub(crate) fn timeout(value: Option<Unknown<'_>>) -> ArgResult<Option<Duration>> {
    let Some(ms) = args::opt_number("timeoutMs", value)? else {
        return Ok(None);
    };
    validate::duration_ms("timeoutMs", ms)?;
    if ms <= 0.0 {
        return Err(invalid("timeoutMs", format!("must be greater than 0, got {}", validate::describe(ms))));
    }
    Ok(Some(Duration::from_secs_f64(ms / 1000.0)))
}

/// Reads the arguments with `read`; on failure the method's promise rejects.
macro_rules! read_or_reject {
    ($env:expr, $read:expr) => {{
        let read = || -> ArgResult<_> { $read };
        match read() {
            Ok(value) => value,
            Err(err) => return reject($env, err),
        }
    }};
}
pub(crate) use read_or_reject;

/// The actor's SQLite database, stored on the engine's page store
/// (docs/sqlite.md).
#[napi]
pub struct JsNativeDatabase {
    pub(crate) db: ActorDatabase,
}

#[napi]
impl JsNativeDatabase {
    /// The page store's last transport error (e.g. why a commit failed),
    /// taken; `null` if none or if the database is not open.
    #[napi(ts_return_type = "string | null")]
    pub fn take_last_kv_error(&self) -> Option<String> {
        self.db.take_last_kv_error()
    }

    /// The page store client's counters, or `null` if the database is not open.
    #[napi(ts_return_type = "JsSqliteVfsMetrics | null")]
    pub fn metrics(&self) -> Option<JsSqliteVfsMetrics> {
        let m = self.db.metrics()?;
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Some(JsSqliteVfsMetrics {
            request_build_ns: n(m.request_build_ns),
            serialize_ns: n(m.serialize_ns),
            transport_ns: n(m.transport_ns),
            state_update_ns: n(m.state_update_ns),
            total_ns: n(m.total_ns),
            commit_count: n(m.commit_count),
            page_cache_entries: n(m.page_cache_entries),
            page_cache_weighted_size: n(m.page_cache_weighted_size),
            page_cache_capacity_pages: n(m.page_cache_capacity_pages),
            write_buffer_dirty_pages: n(m.write_buffer_dirty_pages),
            db_size_pages: n(m.db_size_pages),
        })
    }

    /// Runs one statement; resolves to the number of rows it changed.
    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<ExecuteResult>"
    )]
    pub fn run<'env>(
        &self,
        env: &'env Env,
        sql: Unknown<'env>,
        params: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, ExecuteResult>> {
        let (sql, params) = read_or_reject!(env, Ok((args::string("sql", sql)?, bind_params("params", params)?)));
        let db = self.db.clone();
        spawn_promise(env, async move { Ok(ExecuteResult { changes: db.execute(sql, params).await?.changes }) })
    }

    /// Runs one statement; resolves to its columns and rows.
    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<QueryResult>"
    )]
    pub fn query<'env>(
        &self,
        env: &'env Env,
        sql: Unknown<'env>,
        params: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, QueryResult>> {
        let (sql, params) = read_or_reject!(env, Ok((args::string("sql", sql)?, bind_params("params", params)?)));
        let db = self.db.clone();
        spawn_promise(env, async move {
            let result = db.execute(sql, params).await?;
            Ok(QueryResult { columns: result.columns, rows: rows(result.rows) })
        })
    }

    /// Runs one statement; resolves to its rows, changes and last rowid.
    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<NativeExecuteResult>"
    )]
    pub fn execute<'env>(
        &self,
        env: &'env Env,
        sql: Unknown<'env>,
        params: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, NativeExecuteResult>> {
        let (sql, params) = read_or_reject!(env, Ok((args::string("sql", sql)?, bind_params("params", params)?)));
        let db = self.db.clone();
        spawn_promise(env, async move { Ok(execute_result(db.execute(sql, params).await?)) })
    }

    /// Runs the statements in one transaction (all or none).
    #[napi(
        ts_args_type = "statements: Array<JsSqliteBatchStatement>",
        ts_return_type = "Promise<Array<NativeExecuteResult>>"
    )]
    pub fn execute_batch<'env>(
        &self,
        env: &'env Env,
        statements: Unknown<'env>,
    ) -> napi::Result<PromiseRaw<'env, Vec<NativeExecuteResult>>> {
        let statements = read_or_reject!(env, batch(statements));
        let db = self.db.clone();
        spawn_promise(
            env,
            async move { Ok(db.execute_batch(statements).await?.into_iter().map(execute_result).collect()) },
        )
    }

    /// Runs any number of statements; resolves to the rows of the last one
    /// that returned rows.
    #[napi(ts_args_type = "sql: string", ts_return_type = "Promise<QueryResult>")]
    pub fn exec<'env>(&self, env: &'env Env, sql: Unknown<'env>) -> napi::Result<PromiseRaw<'env, QueryResult>> {
        let sql = read_or_reject!(env, args::string("sql", sql));
        let db = self.db.clone();
        spawn_promise(env, async move { Ok(query_result(db.exec(sql).await?)) })
    }

    /// Closes the database for the rest of this actor generation.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let db = self.db.clone();
        spawn_promise(env, async move { db.close().await })
    }

    /// Begins a transaction once no other is open; it is rolled back after
    /// `timeoutMs` (default 60 s) unless committed or rolled back before.
    /// `name` is informational.
    #[napi(
        ts_args_type = "timeoutMs?: number | undefined | null, name?: string | undefined | null",
        ts_return_type = "Promise<JsSqliteTransaction>"
    )]
    pub fn begin_transaction<'env>(
        &self,
        env: &'env Env,
        timeout_ms: Option<Unknown<'env>>,
        name: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, JsSqliteTransaction>> {
        let (timeout, name) = read_or_reject!(env, Ok((timeout(timeout_ms)?, args::opt_string("name", name)?)));
        let db = self.db.clone();
        spawn_promise(env, async move {
            let tx = db.begin_transaction(timeout).await?;
            if let Some(name) = name {
                tracing::debug!(name, "SQLite transaction began");
            }
            Ok(JsSqliteTransaction { tx })
        })
    }
}

/// An open transaction (`JsNativeDatabase.beginTransaction`).
#[napi]
pub struct JsSqliteTransaction {
    tx: SqliteTransaction,
}

#[napi]
impl JsSqliteTransaction {
    #[napi(
        ts_args_type = "sql: string, params?: Array<JsBindParam> | undefined | null",
        ts_return_type = "Promise<NativeExecuteResult>"
    )]
    pub fn execute<'env>(
        &self,
        env: &'env Env,
        sql: Unknown<'env>,
        params: Option<Unknown<'env>>,
    ) -> napi::Result<PromiseRaw<'env, NativeExecuteResult>> {
        let (sql, params) = read_or_reject!(env, Ok((args::string("sql", sql)?, bind_params("params", params)?)));
        let tx = self.tx.clone();
        spawn_promise(env, async move { Ok(execute_result(tx.execute(sql, params).await?)) })
    }

    #[napi(ts_args_type = "sql: string", ts_return_type = "Promise<QueryResult>")]
    pub fn exec<'env>(&self, env: &'env Env, sql: Unknown<'env>) -> napi::Result<PromiseRaw<'env, QueryResult>> {
        let sql = read_or_reject!(env, args::string("sql", sql));
        let tx = self.tx.clone();
        spawn_promise(env, async move { Ok(query_result(tx.exec(sql).await?)) })
    }

    /// Commits; if the commit fails the transaction is rolled back.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn commit<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let tx = self.tx.clone();
        spawn_promise(env, async move { tx.commit().await })
    }

    /// Rolls back (a no-op if it already rolled back or expired).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn rollback<'env>(&self, env: &'env Env) -> napi::Result<PromiseRaw<'env, ()>> {
        let tx = self.tx.clone();
        spawn_promise(env, async move { tx.rollback().await })
    }
}
