//! The Weka trace schema, read into typed values: what AgentX's loader reads (`id`, `models`,
//! `block_size`, `hash_id_scope`, `tool_tokens`, `system_tokens`, `requests` of `n`/`s` calls and
//! `subagent` entries, `totals`), plus what real files hold beyond it (a `global` scope, a null
//! `subagent_type`, extra keys, sub-agents nested in sub-agents). Every refusal names the file, the
//! line the trace starts on, and the field. Nothing here builds trees.

use crate::error::InputError;
use serde_json::{Map, Value};

/// The largest time a trace may record, seconds (about 31 years): every time and sum of times then fits
/// in nanoseconds.
pub const MAX_SECONDS: f64 = 1e9;

/// One trace object as recorded.
#[derive(Clone, Debug)]
pub struct RawTrace {
    /// The line the trace starts on (the row of a JSONL or Parquet file).
    pub line: usize,
    /// `id` (the file's base name when absent).
    pub id: String,
    /// `block_size` (64 when absent).
    pub block_size: u64,
    /// `hash_id_scope` is `local` (ids private to the trace): the default when absent.
    pub local: bool,
    /// `tool_tokens` + `system_tokens` of the root agent.
    pub declared: u64,
    /// The entries of `requests`, in file order.
    pub entries: Vec<Entry>,
}

/// One element of a `requests` list.
#[derive(Clone, Debug)]
pub enum Entry {
    /// A model call (`type` `n` or `s`, or absent).
    Call(Call),
    /// A `subagent` entry.
    Sub(Sub),
}

/// A model call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Its path in the trace (`requests[3]`), for errors.
    pub path: String,
    /// `t`, seconds (a sub-agent's inner `t` as written: relative or absolute).
    pub t: f64,
    /// `model` ("" when absent).
    pub model: String,
    /// `in`.
    pub input: u64,
    /// `out`.
    pub output: u64,
    /// `hash_ids`.
    pub hash_ids: Vec<u64>,
    /// `api_time`, seconds.
    pub api_time: Option<f64>,
}

impl Call {
    /// The recorded end, `t + max(api_time, 0)` (AgentX's interval end).
    pub fn end(&self) -> f64 {
        self.t + self.api_time.unwrap_or(0.0).max(0.0)
    }
}

/// A sub-agent entry.
#[derive(Clone, Debug)]
pub struct Sub {
    /// Its path in the trace, for errors.
    pub path: String,
    /// `t`, seconds: when it was spawned.
    pub t: f64,
    /// `agent_id`.
    pub agent_id: String,
    /// `duration_ms` (absent or null: none; negative: 0).
    pub duration_ms: Option<f64>,
    /// `tool_tokens` + `system_tokens` of the sub-agent.
    pub declared: u64,
    /// Its `requests`.
    pub entries: Vec<Entry>,
}

/// Reads one trace object; `name` is the file's base name (the id of a trace without one).
pub fn trace(file: &str, line: usize, name: &str, v: &Value) -> Result<RawTrace, InputError> {
    let r = Reader { file, line };
    let o = r.object(v, "")?;
    let id = match o.get("id") {
        None | Some(Value::Null) => name.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(x) => return Err(r.err("id", format!("expected a string, got {x}"))),
    };
    let block_size = match o.get("block_size") {
        None | Some(Value::Null) => 64,
        Some(_) => r.count(o, "", "block_size")?,
    };
    if block_size == 0 || block_size > u32::MAX as u64 {
        return Err(r.err("block_size", "must be a positive integer"));
    }
    let local = match o.get("hash_id_scope") {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) if s == "local" => true,
        Some(Value::String(s)) if s == "global" => false,
        Some(x) => {
            return Err(r.err(
                "hash_id_scope",
                format!("expected \"local\" or \"global\", got {x}"),
            ))
        }
    };
    let declared = r.declared(o, "")?;
    r.strings(o, "", "models")?;
    r.optional_object(o, "", "totals")?;
    let list = o
        .get("requests")
        .and_then(Value::as_array)
        .ok_or_else(|| r.err("requests", "missing or not a list"))?;
    let entries = r.entries(list, "requests")?;
    Ok(RawTrace {
        line,
        id,
        block_size,
        local,
        declared,
        entries,
    })
}

struct Reader<'a> {
    file: &'a str,
    line: usize,
}

impl Reader<'_> {
    fn err(&self, field: &str, reason: impl Into<String>) -> InputError {
        InputError::new(self.file, self.line, field, reason)
    }

    fn object<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, InputError> {
        v.as_object()
            .ok_or_else(|| self.err(path, "expected a JSON object"))
    }

    fn count(&self, o: &Map<String, Value>, path: &str, name: &str) -> Result<u64, InputError> {
        let field = join(path, name);
        match o.get(name) {
            None | Some(Value::Null) => Err(self.err(&field, "missing")),
            Some(v) => v.as_u64().ok_or_else(|| {
                self.err(&field, format!("expected a non-negative integer, got {v}"))
            }),
        }
    }

    fn optional_count(
        &self,
        o: &Map<String, Value>,
        path: &str,
        name: &str,
    ) -> Result<u64, InputError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(0),
            _ => self.count(o, path, name),
        }
    }

    /// `system_tokens` + `tool_tokens` of an agent object.
    fn declared(&self, o: &Map<String, Value>, path: &str) -> Result<u64, InputError> {
        Ok(self
            .optional_count(o, path, "system_tokens")?
            .saturating_add(self.optional_count(o, path, "tool_tokens")?))
    }

    /// A finite number of seconds, at most [`MAX_SECONDS`] from 0.
    fn seconds(
        &self,
        o: &Map<String, Value>,
        path: &str,
        name: &str,
    ) -> Result<Option<f64>, InputError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x.abs() <= MAX_SECONDS => Ok(Some(x)),
                _ => Err(self.err(
                    &join(path, name),
                    format!("expected a finite number of seconds, at most {MAX_SECONDS:e} from 0, got {v}"),
                )),
            },
        }
    }

    /// A finite, non-negative number of seconds (a negative duration means nothing).
    fn duration(
        &self,
        o: &Map<String, Value>,
        path: &str,
        name: &str,
    ) -> Result<Option<f64>, InputError> {
        match self.seconds(o, path, name)? {
            Some(x) if x < 0.0 => Err(self.err(
                &join(path, name),
                format!("expected a non-negative number of seconds, got {x}"),
            )),
            x => Ok(x),
        }
    }

    fn string(&self, o: &Map<String, Value>, path: &str, name: &str) -> Result<String, InputError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(self.err(&join(path, name), format!("expected a string, got {v}"))),
        }
    }

    /// A list of strings, or absent or null.
    fn strings(&self, o: &Map<String, Value>, path: &str, name: &str) -> Result<(), InputError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Array(a)) => match a.iter().position(|x| !x.is_string()) {
                None => Ok(()),
                Some(j) => Err(self.err(
                    &format!("{}[{j}]", join(path, name)),
                    format!("expected a string, got {}", a[j]),
                )),
            },
            Some(v) => Err(self.err(
                &join(path, name),
                format!("expected a list of strings, got {v}"),
            )),
        }
    }

    /// A JSON object, or absent or null.
    fn optional_object(
        &self,
        o: &Map<String, Value>,
        path: &str,
        name: &str,
    ) -> Result<(), InputError> {
        match o.get(name) {
            None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
            Some(v) => Err(self.err(&join(path, name), format!("expected an object, got {v}"))),
        }
    }

    fn entries(&self, list: &[Value], path: &str) -> Result<Vec<Entry>, InputError> {
        let mut out = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let o = self.object(item, &p)?;
            out.push(match o.get("type").and_then(Value::as_str) {
                Some("subagent") => Entry::Sub(self.sub(o, p)?),
                None | Some("n") | Some("s") => Entry::Call(self.call(o, p)?),
                Some(other) => {
                    return Err(self.err(
                        &join(&p, "type"),
                        format!("expected \"n\", \"s\" or \"subagent\", got {other:?}"),
                    ))
                }
            });
        }
        Ok(out)
    }

    fn call(&self, o: &Map<String, Value>, path: String) -> Result<Call, InputError> {
        let t = self
            .seconds(o, &path, "t")?
            .ok_or_else(|| self.err(&join(&path, "t"), "missing"))?;
        let input = self.count(o, &path, "in")?;
        if input == 0 || input > u32::MAX as u64 {
            return Err(self.err(&join(&path, "in"), "must be a positive token count"));
        }
        let output = self.count(o, &path, "out")?;
        if output > u32::MAX as u64 {
            return Err(self.err(&join(&path, "out"), "too large"));
        }
        let hash_ids = self.hash_ids(o, &path)?;
        // Typed as AgentX's schema types them, though the replay does not use them: a trace AgentX
        // would refuse is refused here too, naming the field.
        self.strings(o, &path, "input_types")?;
        self.strings(o, &path, "output_types")?;
        self.string(o, &path, "stop")?;
        self.seconds(o, &path, "think_time")?;
        self.seconds(o, &path, "ttft")?;
        Ok(Call {
            t,
            model: self.string(o, &path, "model")?,
            input,
            output,
            hash_ids,
            api_time: self.duration(o, &path, "api_time")?,
            path,
        })
    }

    fn sub(&self, o: &Map<String, Value>, path: String) -> Result<Sub, InputError> {
        let t = self
            .seconds(o, &path, "t")?
            .ok_or_else(|| self.err(&join(&path, "t"), "missing"))?;
        let agent_id = match o.get("agent_id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            None | Some(Value::Null) => return Err(self.err(&join(&path, "agent_id"), "missing")),
            Some(v) => {
                return Err(self.err(
                    &join(&path, "agent_id"),
                    format!("expected a string, got {v}"),
                ))
            }
        };
        match o.get("subagent_type") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(v) => {
                return Err(self.err(
                    &join(&path, "subagent_type"),
                    format!("expected a string or null, got {v}"),
                ))
            }
        }
        // `status` is read for its type only: AgentX decides background branches by time; so are the
        // sub-agent's `models`, `total_tokens` and `tool_use_count`.
        self.string(o, &path, "status")?;
        self.strings(o, &path, "models")?;
        self.optional_count(o, &path, "total_tokens")?;
        self.optional_count(o, &path, "tool_use_count")?;
        let duration_ms = match o.get("duration_ms") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_f64() {
                Some(x) if x.is_finite() && x.abs() <= MAX_SECONDS * 1e3 => Some(x),
                _ => {
                    return Err(self.err(
                        &join(&path, "duration_ms"),
                        format!("expected a finite number of milliseconds, got {v}"),
                    ))
                }
            },
        };
        let list = o
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| self.err(&join(&path, "requests"), "missing or not a list"))?;
        let entries = self.entries(list, &join(&path, "requests"))?;
        Ok(Sub {
            t,
            agent_id,
            duration_ms,
            declared: self.declared(o, &path)?,
            entries,
            path,
        })
    }

    fn hash_ids(&self, o: &Map<String, Value>, path: &str) -> Result<Vec<u64>, InputError> {
        let field = join(path, "hash_ids");
        match o.get("hash_ids") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(j, x)| {
                    x.as_u64().ok_or_else(|| {
                        self.err(
                            &format!("{field}[{j}]"),
                            format!("expected a non-negative integer id, got {x}"),
                        )
                    })
                })
                .collect(),
            Some(v) => Err(self.err(&field, format!("expected a list of ids, got {v}"))),
        }
    }
}

/// `path.name`, or `name` at the top.
pub fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}
