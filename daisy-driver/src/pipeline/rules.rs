//! The rules a pipeline file's values keep beyond their type, and the
//! functions serde runs them with.
//!
//! Each rule is a plain function from the value to what it means, or to
//! the end of the message saying what is wrong with it (`must be longer
//! than zero`). Most take the value as written, because their message
//! words a value of the wrong type too (`is not a duration like "10m" or
//! "90s"`). The schema names them through [`with`], whose functions are
//! what `deserialize_with` takes. Rules between fields and between tasks
//! are `resolve`'s and `validate`'s; the launcher options' are the
//! launchers crate's (`ClusterOptions`).

use super::problems::{hint, show};
use super::schema::Pool;
use super::{MAX_BATCH_SIZE, MAX_PREFETCH};
use daisy_core::coordinate::{MAX_COORDINATE, MAX_DIMS};
use daisy_core::protocol::FunctionSource;
use daisy_core::template::CommandTemplate;
use daisy_core::Roi;
use serde::de::{Deserialize, Deserializer, Error as _};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const ROI_FIELDS: &[&str] = &["offset", "shape"];

/// Longest per-block timeout accepted: a longer one is a typo, and
/// deadlines that far out overflow clock arithmetic.
const MAX_TIMEOUT: Duration = Duration::from_secs(366 * 24 * 3600);

/// Task ids and the pipeline name become directory names (`done/<task>/`,
/// `daisy_run/<name>`), so they keep to characters every file system and
/// shell takes, and are not `.` or `..`.
fn directory_name(name: &str) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_.-".contains(c);
    let bad: BTreeSet<char> = name.chars().filter(|&c| !allowed(c)).collect();
    if name.is_empty() {
        Err("must not be empty".into())
    } else if !bad.is_empty() {
        let bad: Vec<String> = bad.iter().map(|c| format!("{c:?}")).collect();
        Err(format!(
            "may only contain A-Z, a-z, 0-9, '_', '.' and '-' (found {})",
            bad.join(" ")
        ))
    } else if name == "." || name == ".." {
        Err("cannot be a directory name".into())
    } else {
        Ok(name.to_string())
    }
}

/// The `[[task]]` tables, at least one.
fn task_tables(value: &Value) -> Result<Vec<Value>, String> {
    let tables = (value.as_array()).filter(|items| items.iter().all(Value::is_object));
    match tables {
        None => Err("is not an array of tables ([[task]])".into()),
        Some(tables) if tables.is_empty() => Err("lists no tasks".into()),
        Some(tables) => Ok(tables.clone()),
    }
}

/// `{ offset = [..], shape = [..] }`, both of the same dimension.
fn roi(value: &Value) -> Result<Roi, String> {
    let table =
        (value.as_object()).ok_or("is not a table like { offset = [0, 0], shape = [10, 10] }")?;
    if let Some(key) = table.keys().find(|key| !ROI_FIELDS.contains(&key.as_str())) {
        let hint = hint(key, ROI_FIELDS.iter().copied());
        return Err(format!("has unknown field {key:?}{hint}"));
    }
    let offset = coordinate(table, "offset")?;
    let shape = coordinate(table, "shape")?;
    if offset.len() != shape.len() {
        let (o, s) = (offset.len(), shape.len());
        return Err(format!(
            "has a {o}-dimensional offset but a {s}-dimensional shape"
        ));
    }
    Ok(Roi::from_slices(&offset, &shape))
}

fn coordinate(table: &Map<String, Value>, key: &str) -> Result<Vec<i64>, String> {
    let value = table.get(key).ok_or_else(|| format!("has no {key}"))?;
    let values: Vec<i64> = (value.as_array())
        .and_then(|items| items.iter().map(Value::as_i64).collect())
        .ok_or_else(|| {
            format!(
                "has {key} {}, which is not an array of integers",
                show(value)
            )
        })?;
    if values.len() > MAX_DIMS {
        let dims = values.len();
        return Err(format!(
            "has {dims} dimensions in {key}, more than the {MAX_DIMS} supported"
        ));
    }
    match values.iter().find(|v| v.unsigned_abs() > MAX_COORDINATE) {
        Some(v) => Err(format!(
            "has {key} entry {v}, beyond the supported ±{MAX_COORDINATE}"
        )),
        None => Ok(values),
    }
}

/// A per-block timeout or a retry backoff: a humantime duration ("90s",
/// "10m", "1h 30m").
fn duration(value: &Value) -> Result<Duration, String> {
    let like = "a duration like \"10m\" or \"90s\"";
    let text = value.as_str().ok_or_else(|| format!("is not {like}"))?;
    match humantime::parse_duration(text) {
        Err(error) => Err(format!("is not {like} ({error})")),
        Ok(timeout) if timeout.is_zero() => Err("must be longer than zero".into()),
        Ok(timeout) if timeout > MAX_TIMEOUT => Err("is longer than a year".into()),
        Ok(timeout) => Ok(timeout),
    }
}

/// A count from `low` to `high`: batch sizes and prefetch depths, whose
/// bounds keep one batch (or the blocks written ahead) small.
fn within(value: &Value, low: u32, high: u32) -> Result<u32, String> {
    let n = value.as_u64().and_then(|n| u32::try_from(n).ok());
    let n = n.filter(|n| (low..=high).contains(n));
    n.ok_or_else(|| format!("is not a whole number from {low} to {high}"))
}

/// How many blocks a worker is fed ahead of the one it works on.
fn prefetch(value: &Value) -> Result<u32, String> {
    within(value, 0, MAX_PREFETCH)
}

/// A batch size from 1 to the maximum, or `"auto"` (0 on the wire): the
/// worker fits its batches to how long blocks take.
fn batch_size(value: &Value) -> Result<u32, String> {
    if value.as_str() == Some("auto") {
        return Ok(0);
    }
    within(value, 1, MAX_BATCH_SIZE).map_err(|e| format!("{e}, nor \"auto\""))
}

/// A program and its arguments.
fn command_line(argv: &[String]) -> Result<Vec<String>, String> {
    match argv.first() {
        None => Err("must not be empty".into()),
        Some(program) if program.is_empty() => Err("has an empty program name".into()),
        Some(_) => Ok(argv.to_vec()),
    }
}

/// A block command whose `{placeholders}` the worker can fill in: caught
/// here, at load, rather than by every worker it would make refuse.
fn block_command_line(argv: &[String]) -> Result<Vec<String>, String> {
    let argv = command_line(argv)?;
    CommandTemplate::parse(&argv).map_err(|e| e.to_string())?;
    Ok(argv)
}

/// `"package.module:function"`, or `{ pickle = "path" }`.
fn function_source(value: &Value) -> Result<FunctionSource, String> {
    if let Some(reference) = value.as_str() {
        let (module, attribute) = reference.split_once(':').unwrap_or_default();
        if module.is_empty() || attribute.is_empty() {
            return Err("is not \"module:function\" nor { pickle = \"path\" }".into());
        }
        return Ok(FunctionSource::Reference(reference.to_string()));
    }
    let pickle = value.as_object().filter(|table| table.len() == 1);
    match pickle
        .and_then(|table| table.get("pickle"))
        .and_then(Value::as_str)
    {
        Some(path) if !path.is_empty() => Ok(FunctionSource::Pickle(path.to_string())),
        _ => Err("is not \"module:function\" nor { pickle = \"path\" }".into()),
    }
}

/// One key of `[resources]`: a count (the ids `0` to `n - 1`) or the ids
/// themselves, numbers or names (GPU UUIDs), each listed once.
fn pool(value: &Value) -> Result<Pool, String> {
    let like = "is not a non-negative integer or a list of ids like [0, 2]";
    if let Some(count) = value.as_u64() {
        return Ok(Pool::Count(count));
    }
    let items = value.as_array().ok_or(like)?;
    let mut ids: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let id = match item {
            Value::Number(n) if n.is_u64() => n.to_string(),
            Value::String(name) if !name.is_empty() && !name.contains(',') => name.clone(),
            _ => {
                return Err(format!(
                    "has {}, which is not an id (a number or a name without commas)",
                    show(item)
                ))
            }
        };
        if ids.contains(&id) {
            return Err(format!("lists {id} twice"));
        }
        ids.push(id);
    }
    Ok(Pool::Ids(ids))
}

/// `env`: variable name to value. Names must be settable: not empty,
/// without `=` or NUL.
fn environment(value: &Value) -> Result<BTreeMap<String, String>, String> {
    let table = value.as_object().ok_or("is not a table of strings")?;
    let variable = |(name, value): (&String, &Value)| {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(format!("has {name:?}, which cannot be a variable name"));
        }
        let text = value
            .as_str()
            .ok_or_else(|| format!("has {name} = {}, not a string", show(value)))?;
        Ok((name.clone(), text.to_string()))
    };
    table.iter().map(variable).collect()
}

/// The field read as `I`, then checked by `rule`. `O` is the field's
/// type: the rule's `T`, or an `Option` of it, whose `None` is what a
/// required field reads once it was reported (see `reader`).
fn checked<'de, D, I, T, O>(
    deserializer: D,
    rule: impl FnOnce(I) -> Result<T, String>,
) -> Result<O, D::Error>
where
    D: Deserializer<'de>,
    I: Deserialize<'de>,
    O: From<T> + Default,
{
    match Option::<I>::deserialize(deserializer)? {
        None => Ok(O::default()),
        Some(value) => rule(value).map(O::from).map_err(D::Error::custom),
    }
}

/// Defines, in [`with`], each rule as `deserialize_with` takes it: a
/// function that reads the field's value as the rule's input, then
/// applies the rule of the same name.
macro_rules! deserialize_with {
    ($($rule:ident($input:ty) -> $output:ty;)*) => {$(
        pub(in crate::pipeline) fn $rule<'de, D, O>(deserializer: D) -> Result<O, D::Error>
        where
            D: Deserializer<'de>,
            O: From<$output> + Default,
        {
            checked(deserializer, |input: $input| super::$rule(&input))
        }
    )*};
}

/// The rules as `deserialize_with` takes them.
pub(super) mod with {
    use super::*;

    deserialize_with! {
        directory_name(String) -> String;
        task_tables(Value) -> Vec<Value>;
        roi(Value) -> Roi;
        duration(Value) -> Duration;
        batch_size(Value) -> u32;
        prefetch(Value) -> u32;
        command_line(Vec<String>) -> Vec<String>;
        block_command_line(Vec<String>) -> Vec<String>;
        function_source(Value) -> FunctionSource;
        environment(Value) -> BTreeMap<String, String>;
        pool(Value) -> Pool;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::{problems, task};
    use crate::pipeline::Pipeline;
    use serde_json::json;
    use std::path::Path;

    #[test]
    fn rois_must_be_well_formed() {
        let rois = [
            json!({"offset": [0], "shape": [1, 2]}),
            json!({"ofset": [0], "shape": [1]}),
            json!({"offset": [0]}),
            json!({"offset": [0.5], "shape": [1]}),
            json!({"offset": vec![0; 9], "shape": vec![1; 9]}),
            json!({"offset": [i64::MIN], "shape": [1]}),
            json!([0, 1]),
        ];
        let errors: Vec<String> = rois.iter().map(|r| roi(r).unwrap_err()).collect();
        assert_eq!(
            errors,
            [
                "has a 1-dimensional offset but a 2-dimensional shape",
                "has unknown field \"ofset\" (did you mean \"offset\"?)",
                "has no shape",
                "has offset [0.5], which is not an array of integers",
                "has 9 dimensions in offset, more than the 8 supported",
                "has offset entry -9223372036854775808, beyond the supported ±1099511627776",
                "is not a table like { offset = [0, 0], shape = [10, 10] }",
            ]
        );
        let ok = roi(&json!({"offset": [-2, 0], "shape": [0, 3]})).unwrap();
        assert_eq!(ok, Roi::from_slices(&[-2, 0], &[0, 3]));
    }

    #[test]
    fn durations_and_walltimes_are_checked() {
        assert_eq!(duration(&json!("1h 30m")), Ok(Duration::from_secs(5400)));
        assert!(duration(&json!("ten minutes"))
            .unwrap_err()
            .starts_with("is not a duration"));
        assert_eq!(
            duration(&json!("0s")).unwrap_err(),
            "must be longer than zero"
        );
        assert_eq!(
            duration(&json!("2years")).unwrap_err(),
            "is longer than a year"
        );
        assert_eq!(
            duration(&json!(600)).unwrap_err(),
            "is not a duration like \"10m\" or \"90s\""
        );
        let with_walltime = |time: &str| {
            let launcher = format!("[launcher]\ntime = {time:?}\n");
            let text = format!("name = \"p\"\n{launcher}{}", task("t", ""));
            Pipeline::from_str(
                &text,
                Path::new("p.toml"),
                crate::pipeline::python_worker::PYTHON_ON_PATH,
            )
        };
        for good in ["30", "30:00", "04:00:00", "1-12", "1-12:00", "1-12:00:00"] {
            let time = with_walltime(good).unwrap().launcher.cluster.time;
            assert_eq!(time, Some(good.to_string()));
        }
        for bad in ["", "4h", "1:2:3:4", "-1", "a-1", "1-", "04::00"] {
            assert!(with_walltime(bad).is_err(), "{bad}");
        }
        let text = format!("name = \"p\"\n{}", task("t", "timeout = \"soon\""));
        let found = problems(&text);
        assert!(found[0].starts_with("task \"t\": timeout = \"soon\" is not a duration like"));
    }
}
