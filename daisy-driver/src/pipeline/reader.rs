//! Reading a table of the value tree into serde structs, every problem
//! found rather than the first.
//!
//! serde stops at the first error, and a pipeline file is refused with
//! every problem at once. So a [`Reading`] runs serde over the tree
//! (`syntax`'s `serde_json::Value`) with a deserializer of its own: when a
//! value is refused it records the problem (the field's path, the value,
//! its line), drops the value and reads the table again, so that the
//! field takes its default (or `None`) and serde goes on to the next one.
//! A table is read once more per refused value; pipeline tables are small.
//!
//! What the structs say, and how it is read:
//! - A value the field's type refuses is worded by the type: `u32` takes
//!   "a whole number from 0 to 4294967295", `u64` "a non-negative
//!   integer", `bool` "true or false", `String` "a string", `Vec<String>`
//!   "an array of strings", a struct or map "a table", an enum one of its
//!   variants. Rules beyond the type are the field's `deserialize_with`
//!   function, whose `de::Error::custom` message ends the problem
//!   (`timeout = "0s" must be longer than zero`).
//! - A required field is an `Option` with a `deserialize_with` and no
//!   `default`: serde asks for it when it is missing, which is reported,
//!   and it is then read as `None` (as is one whose value was refused).
//! - Keys that no struct read from a table declares are reported, with
//!   the declared field they most resemble. A table may be read as several
//!   structs, each declaring part of it: a launcher table is its `kind`
//!   and the launchers' `ClusterOptions`.
//!
//! Problems come out as [`Problem`]s of no task: `resolve` says whose.

use super::problems::{hint, show, Problem};
use super::syntax::Lines;
use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess};
use serde::de::{Deserializer, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A value of the tree being read as one or more structs, and the
/// problems found so far.
pub(super) struct Reading<'t> {
    value: &'t Value,
    lines: &'t Lines,
    /// The field path of the value: "" for a table of the file's own,
    /// `launcher` for a launcher table; its fields are `launcher.kind`.
    path: &'t str,
    state: RefCell<State>,
    problems: Vec<Problem>,
}

/// `T` read from the table `value` at `path` (its parts on `lines`), and
/// every problem in it: [`Reading::read`], then [`Reading::finish`].
pub(super) fn read_table<T: DeserializeOwned>(
    value: &Value,
    lines: &Lines,
    path: &str,
) -> (Option<T>, Vec<Problem>) {
    let mut reading = Reading::new(value, lines, path);
    let read = reading.read();
    (read, reading.finish())
}

impl<'t> Reading<'t> {
    pub(super) fn new(value: &'t Value, lines: &'t Lines, path: &'t str) -> Self {
        Self {
            value,
            lines,
            path,
            state: RefCell::default(),
            problems: Vec::new(),
        }
    }

    /// `T` read from the value, each refused value dropped and each
    /// required field missing read as `None`, all of them recorded.
    /// `None` only if the value is not what `T` reads (a table, for a
    /// struct) or a field cannot read a placeholder (a required field
    /// that is not an `Option`).
    pub(super) fn read<T: DeserializeOwned>(&mut self) -> Option<T> {
        let state = self.state.get_mut();
        state.dropped.clear();
        state.placeholders.clear();
        loop {
            let result = T::deserialize(Reader {
                value: Some(self.value),
                lines: self.lines,
                path: self.path.to_string(),
                state: &self.state,
            });
            let failure = self.state.get_mut().failure.take();
            match (result, failure) {
                (Ok(read), _) => return Some(read),
                (Err(_), Some(failure)) => {
                    if !self.note(failure) {
                        return None;
                    }
                }
                (Err(_), None) => return None,
            }
        }
    }

    /// Every problem found: the keys no struct read declares, then the
    /// others in the order found.
    pub(super) fn finish(self) -> Vec<Problem> {
        let state = self.state.into_inner();
        let unknown = (state.tables.iter()).flat_map(|(path, table)| table.unknown(path));
        unknown.chain(self.problems).collect()
    }

    /// Records `failure` and makes the next attempt pass its field; false
    /// if that field failed before, as only a required field that is not
    /// an `Option` does (it cannot read a placeholder).
    fn note(&mut self, failure: Failure) -> bool {
        let state = self.state.get_mut();
        match failure {
            Failure::Refused(problem) => {
                if !state.dropped.insert(problem.field.clone()) {
                    return false;
                }
                self.problems.push(problem);
            }
            Failure::Missing { path, line } => {
                if state.placeholders.contains(&path) {
                    return false;
                }
                if !state.dropped.contains(&path) {
                    let message = format!("missing required field {path:?}");
                    self.problems.push(Problem::new(&path, message, line));
                }
                state.placeholders.insert(path);
            }
        }
        true
    }
}

/// What the attempts of one read know, and what every read of the value
/// shares (`tables`).
#[derive(Default)]
struct State {
    /// Paths of refused values: read as absent, so their field takes its
    /// default.
    dropped: BTreeSet<String>,
    /// Paths of required fields reported (missing or refused): read as a
    /// placeholder, which an `Option` reads as `None`.
    placeholders: BTreeSet<String>,
    /// What ended the current attempt, recorded where it happened.
    failure: Option<Failure>,
    /// Each table read as a struct, by path.
    tables: BTreeMap<String, Declared>,
}

/// Why an attempt ended.
enum Failure {
    /// A value was refused; the problem's field is its path.
    Refused(Problem),
    /// serde found the required field at `path` absent; `line` is its
    /// table's.
    Missing { path: String, line: Option<usize> },
}

/// A table read as one or more structs: its keys with their lines, and
/// the fields the structs declare, in their order.
struct Declared {
    keys: Vec<(String, Option<usize>)>,
    fields: Vec<&'static str>,
}

impl Declared {
    /// A problem for each key of the table at `path` that no struct
    /// declares.
    fn unknown<'a>(&'a self, path: &'a str) -> impl Iterator<Item = Problem> + 'a {
        let place = match path {
            "" => String::new(),
            table => format!(" in [{table}]"),
        };
        let unknown = (self.keys.iter()).filter(|(key, _)| !self.fields.contains(&key.as_str()));
        unknown.map(move |(key, line)| {
            let hint = hint(key, self.fields.iter().copied());
            let message = format!("unknown field {key:?}{place}{hint}");
            Problem::new(&join(path, key), message, *line)
        })
    }
}

/// The path of `key` in the table at `path`.
fn join(path: &str, key: &str) -> String {
    match path {
        "" => key.to_string(),
        _ => format!("{path}.{key}"),
    }
}

/// One value of the tree as serde reads it.
#[derive(Clone)]
struct Reader<'de> {
    /// `None` for a placeholder: a required field already reported.
    value: Option<&'de Value>,
    /// Where the value's parts are in the file.
    lines: &'de Lines,
    path: String,
    state: &'de RefCell<State>,
}

/// A key of a table and what the current attempt reads for it.
type Entry<'de> = (&'de str, Option<&'de Value>);

impl<'de> Reader<'de> {
    /// The reader of `value`, this table's `key`.
    fn child(&self, key: &str, value: Option<&'de Value>) -> Self {
        Self {
            value,
            lines: self.lines.key(key),
            path: join(&self.path, key),
            state: self.state,
        }
    }

    /// The reader of this array's `index`-th item: problems in it are the
    /// array's.
    fn item(&self, index: usize, value: &'de Value) -> Self {
        Self {
            value: Some(value),
            lines: self.lines.item(index),
            path: self.path.clone(),
            state: self.state,
        }
    }

    fn typed<T>(
        &self,
        kind: Kind,
        get: impl FnOnce(&'de Value) -> Option<T>,
    ) -> Result<T, ReadError> {
        self.value.and_then(get).ok_or(ReadError::Type(kind))
    }

    fn table(&self) -> Result<&'de Map<String, Value>, ReadError> {
        self.typed(TABLE, Value::as_object)
    }

    /// What the current attempt reads for the struct field `name` of
    /// `table`: nothing if the table lacks it or its value was dropped, a
    /// placeholder if it is a required field already reported.
    fn field(&self, table: &'de Map<String, Value>, name: &'static str) -> Option<Entry<'de>> {
        let path = join(&self.path, name);
        let state = self.state.borrow();
        if state.placeholders.contains(&path) {
            return Some((name, None));
        }
        let value = table.get(name).filter(|_| !state.dropped.contains(&path))?;
        Some((name, Some(value)))
    }

    /// Notes that `table`, this value, declares `fields`.
    fn declare(&self, table: &Map<String, Value>, fields: &'static [&'static str]) {
        let mut state = self.state.borrow_mut();
        let declared = (state.tables.entry(self.path.clone())).or_insert_with(|| Declared {
            keys: (table.keys().map(|key| (key.clone(), self.lines.of(key)))).collect(),
            fields: Vec::new(),
        });
        for field in fields {
            if !declared.fields.contains(field) {
                declared.fields.push(field);
            }
        }
    }

    /// Records `error`, which refused `value` at this table's `key`, as
    /// the failure of the attempt (unless a value inside it already was).
    fn refused(&self, key: &str, value: Option<&Value>, error: ReadError) -> ReadError {
        if let ReadError::Reported | ReadError::Missing(_) = error {
            return error;
        }
        let path = join(&self.path, key);
        let shown = value.map(show).unwrap_or_default();
        let message = format!("{path} = {shown} {error}");
        let problem = Problem::new(&path, message, self.lines.of(key));
        let mut state = self.state.borrow_mut();
        state.failure.get_or_insert(Failure::Refused(problem));
        ReadError::Reported
    }

    /// Records a required field of this table that serde found absent.
    fn missing(&self, error: ReadError) -> ReadError {
        let ReadError::Missing(name) = error else {
            return error;
        };
        let path = join(&self.path, name);
        let failure = Failure::Missing {
            path,
            line: self.lines.of(name),
        };
        self.state.borrow_mut().failure.get_or_insert(failure);
        ReadError::Reported
    }

    fn entries(self, entries: Vec<Entry<'de>>) -> Entries<'de> {
        Entries {
            table: self,
            entries: entries.into_iter(),
            current: None,
        }
    }
}

/// What is read in place of a value that is not an array, so that the
/// type of its items words the problem.
static PROBE: [Value; 1] = [Value::Null];

impl<'de> Deserializer<'de> for Reader<'de> {
    type Error = ReadError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            None => visitor.visit_none(),
            Some(value) => value
                .deserialize_any(visitor)
                .map_err(|error| ReadError::Rule(error.to_string())),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_bool(self.typed(BOOL, Value::as_bool)?)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        let count = |value: &Value| value.as_u64().and_then(|n| u32::try_from(n).ok());
        visitor.visit_u32(self.typed(COUNT, count)?)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_u64(self.typed(AMOUNT, Value::as_u64)?)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_borrowed_str(self.typed(STRING, Value::as_str)?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        match self.value {
            None => visitor.visit_none(),
            Some(_) => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        visitor.visit_newtype_struct(self)
    }

    /// A value that is not an array is read as the array `[null]`, whose
    /// item its type refuses: the problem is then "is not an array of
    /// strings" whatever the value.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        let (items, array) = match self.value {
            Some(Value::Array(items)) => (items.as_slice(), true),
            _ => (&PROBE[..], false),
        };
        let items = Items {
            array: &self,
            items: items.iter().enumerate(),
        };
        match visitor.visit_seq(items) {
            Ok(read) if array => Ok(read),
            Ok(_) => Err(ReadError::Rule("is not an array".into())),
            Err(ReadError::Type(kind)) => {
                Err(ReadError::Rule(format!("is not an array of {}", kind.many)))
            }
            Err(error) => Err(error),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        let table = self.table()?;
        let entries = {
            let state = self.state.borrow();
            let kept = |key: &String| !state.dropped.contains(&join(&self.path, key));
            let kept = table.iter().filter(|(key, _)| kept(key));
            kept.map(|(key, value)| (key.as_str(), Some(value)))
                .collect()
        };
        visitor.visit_map(self.entries(entries))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        let table = self.table()?;
        self.declare(table, fields);
        let entries = (fields.iter()).filter_map(|name| self.field(table, name));
        let entries: Vec<Entry<'de>> = entries.collect();
        let place = self.clone();
        let read = visitor.visit_map(self.entries(entries));
        read.map_err(|error| place.missing(error))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ReadError> {
        match self.value {
            Some(Value::String(text)) => visitor.visit_enum(text.as_str().into_deserializer()),
            _ => Err(ReadError::Rule(one_of(variants))),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ReadError> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u128 f32 f64 char bytes byte_buf unit unit_struct
        tuple tuple_struct identifier
    }
}

/// The entries of a table, in the order the current attempt reads them.
struct Entries<'de> {
    table: Reader<'de>,
    entries: std::vec::IntoIter<Entry<'de>>,
    /// The entry whose key serde has just read.
    current: Option<Entry<'de>>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = ReadError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ReadError> {
        let Some(entry) = self.entries.next() else {
            return Ok(None);
        };
        self.current = Some(entry);
        seed.deserialize(BorrowedStrDeserializer::new(entry.0))
            .map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, ReadError> {
        let Some((key, value)) = self.current.take() else {
            return Err(de::Error::custom("serde asked for a value before its key"));
        };
        let read = seed.deserialize(self.table.child(key, value));
        read.map_err(|error| self.table.refused(key, value, error))
    }
}

/// The items of an array.
struct Items<'r, 'de> {
    array: &'r Reader<'de>,
    items: std::iter::Enumerate<std::slice::Iter<'de, Value>>,
}

impl<'de> SeqAccess<'de> for Items<'_, 'de> {
    type Error = ReadError;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, ReadError> {
        let item = self.items.next();
        item.map(|(index, item)| seed.deserialize(self.array.item(index, item)))
            .transpose()
    }
}

/// What a type takes, as problems say it: one, and many in an array.
#[derive(Clone, Copy, Debug)]
struct Kind {
    one: &'static str,
    many: &'static str,
}

const STRING: Kind = Kind {
    one: "a string",
    many: "strings",
};
const BOOL: Kind = Kind {
    one: "true or false",
    many: "true or false values",
};
/// A `u32`: counts of workers, retries and restarts.
const COUNT: Kind = Kind {
    one: "a whole number from 0 to 4294967295",
    many: "whole numbers from 0 to 4294967295",
};
/// A `u64`: resource amounts.
const AMOUNT: Kind = Kind {
    one: "a non-negative integer",
    many: "non-negative integers",
};
const TABLE: Kind = Kind {
    one: "a table",
    many: "tables",
};

/// Why a value could not be read.
#[derive(Debug)]
enum ReadError {
    /// It is not of the kind its field's type takes.
    Type(Kind),
    /// A rule refused it, saying why: `must not be empty`.
    Rule(String),
    /// serde found this required field absent.
    Missing(&'static str),
    /// The failure was recorded where it happened; the attempt ends.
    Reported,
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Type(kind) => write!(f, "is not {}", kind.one),
            ReadError::Rule(why) => f.write_str(why),
            ReadError::Missing(field) => write!(f, "missing required field {field:?}"),
            ReadError::Reported => f.write_str("recorded where it was found"),
        }
    }
}

impl std::error::Error for ReadError {}

impl de::Error for ReadError {
    fn custom<T: fmt::Display>(why: T) -> Self {
        ReadError::Rule(why.to_string())
    }

    fn missing_field(field: &'static str) -> Self {
        ReadError::Missing(field)
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        ReadError::Rule(one_of(expected))
    }
}

fn one_of(variants: &[&str]) -> String {
    format!("is not one of {}", variants.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    /// A required field with no rule beyond its type.
    fn required<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        Option::deserialize(d)
    }

    fn read<T: DeserializeOwned>(tree: &Value) -> (Option<T>, Vec<String>) {
        let (read, problems) = read_table::<T>(tree, &Lines::default(), "");
        (read, problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn unknown_keys_are_named_with_their_table() {
        #[derive(Deserialize)]
        struct Top {
            launcher: Launcher,
        }
        #[derive(Deserialize)]
        struct Launcher {
            kind: Option<String>,
            partition: Option<String>,
        }
        let tree = json!({"launcher": {"partiton": "gpu", "kind": "local", "zzz": 1}});
        let (top, problems) = read::<Top>(&tree);
        let launcher = top.unwrap().launcher;
        assert_eq!(
            (launcher.kind.as_deref(), launcher.partition),
            (Some("local"), None)
        );
        assert_eq!(
            problems,
            [
                r#"unknown field "partiton" in [launcher] (did you mean "partition"?)"#,
                r#"unknown field "zzz" in [launcher]"#,
            ]
        );
    }

    #[test]
    fn wrong_types_name_field_and_value() {
        #[derive(Deserialize)]
        struct Sample {
            #[serde(default)]
            a: Option<u32>,
            #[serde(deserialize_with = "required")]
            b: Option<bool>,
            #[serde(default)]
            c: Vec<String>,
            #[serde(default)]
            d: BTreeMap<String, u64>,
            #[serde(deserialize_with = "required")]
            e: Option<String>,
        }
        let tree = json!({"a": -1, "b": "x", "c": [1], "d": {"gpu": 1.5, "cpu": 2}});
        let (values, problems) = read::<Sample>(&tree);
        let values = values.unwrap();
        assert_eq!((values.a, values.b, values.e), (None, None, None));
        assert!(values.c.is_empty());
        assert_eq!(values.d, BTreeMap::from([("cpu".to_string(), 2)]));
        assert_eq!(
            problems,
            [
                "a = -1 is not a whole number from 0 to 4294967295",
                "b = \"x\" is not true or false",
                "c = [1] is not an array of strings",
                "d.gpu = 1.5 is not a non-negative integer",
                "missing required field \"e\"",
            ]
        );
    }
}
