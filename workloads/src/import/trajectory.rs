//! Agent trajectories (SWE-agent `.traj`, mini-swe-agent `.traj.json`): one file per session, the
//! full message history of every model call. Each call becomes a corpus call: its prompt is the
//! messages before it, counted with the provider's usage where the file records it and otherwise with
//! a real tokenizer (OpenAI's `o200k_base`, shipped inside the `tiktoken-rs` crate); the prefix it
//! shares with the call before is the messages both start with; a step's `execution_time` is the
//! think time before the next call. Only numbers are kept.

use super::{has_key, Importer, Reduced, Skip, SourceFile};
use crate::corpus::{Call, Session};
use crate::error::InputError;
use serde_json::{Map, Value};

/// Tokens a chat message costs besides its content (role and separators, as OpenAI's chat format
/// counts them).
const PER_MESSAGE: u64 = 4;

/// SWE-agent and mini-swe-agent trajectories.
pub struct Trajectory;

impl Importer for Trajectory {
    fn name(&self) -> &'static str {
        "trajectory"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["swe-agent", "mini-swe-agent"]
    }

    fn summary(&self) -> &'static str {
        "agent trajectories: SWE-agent .traj and mini-swe-agent JSON, one session per file (tokens counted with o200k_base where the file has no usage)"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "trajectory_format")
            || (has_key(head, "trajectory") && has_key(head, "history"))
            || (has_key(head, "messages") && has_key(head, "info") && !has_key(head, "sessionId"))
    }

    fn reduce(&self, files: &[SourceFile], lenient: bool) -> Option<Result<Reduced, InputError>> {
        let mut out = Reduced::default();
        for f in files {
            match session(f) {
                Ok(Some(s)) => out.push(s, vec![f.name.clone()]),
                Ok(None) => {
                    out.skipped
                        .push(Skip::new(&f.name, 0, "a trajectory with no model call"))
                }
                Err(e) if lenient => out.skipped.push(Skip::unreadable(&e)),
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(out))
    }
}

/// One model call as the file shows it: the messages it was sent, its answer, and what the file
/// recorded about it.
struct Step<'a> {
    prompt: Vec<&'a Value>,
    answer: String,
    usage: Option<(u64, Option<u64>, u64)>,
    /// Tool time after the call, before the next.
    execution_s: Option<f64>,
}

fn session(f: &SourceFile) -> Result<Option<Session>, InputError> {
    let v: Value = serde_json::from_str(&f.text)
        .map_err(|e| InputError::new(&f.name, e.line(), "", format!("malformed JSON: {e}")))?;
    let o = v
        .as_object()
        .ok_or_else(|| InputError::new(&f.name, 1, "", "expected a JSON object"))?;
    let (source, steps) = if let Some(m) = o.get("messages").filter(|_| !o.contains_key("history"))
    {
        ("mini-swe-agent", mini_steps(&f.name, m)?)
    } else {
        ("swe-agent", swe_agent_steps(&f.name, o)?)
    };
    if steps.is_empty() {
        return Ok(None);
    }
    let base = super::base_name(&f.name);
    let id = o
        .get("instance_id")
        .and_then(Value::as_str)
        .map_or_else(|| base.to_string(), |i| format!("{base}#{i}"));
    Ok(Some(Session::new(source, &id, calls(&steps))))
}

/// The text of a message's content (a string, text parts, and any tool calls it makes).
fn content_text(m: &Value) -> String {
    let mut out = String::new();
    match m.get("content") {
        Some(Value::String(s)) => out.push_str(s),
        Some(Value::Array(parts)) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    out.push_str(t);
                }
            }
        }
        _ => {}
    }
    if let Some(calls) = m.get("tool_calls").filter(|c| !c.is_null()) {
        out.push_str(&calls.to_string());
    }
    out
}

fn tokens(text: &str) -> u64 {
    tokenizer().encode_ordinary(text).len() as u64
}

fn tokenizer() -> &'static tiktoken_rs::CoreBPE {
    static BPE: std::sync::OnceLock<tiktoken_rs::CoreBPE> = std::sync::OnceLock::new();
    BPE.get_or_init(|| {
        tiktoken_rs::o200k_base().expect("the o200k_base vocabulary the crate ships")
    })
}

/// mini-swe-agent: every assistant message is a call whose prompt is the messages before it; usage
/// from `extra.response.usage` where present.
fn mini_steps<'a>(file: &str, messages: &'a Value) -> Result<Vec<Step<'a>>, InputError> {
    let list = messages
        .as_array()
        .ok_or_else(|| InputError::new(file, 1, "messages", "expected a list"))?;
    let mut steps = Vec::new();
    for (i, m) in list.iter().enumerate() {
        if m.get("role").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        let usage = match m.pointer("/extra/response/usage") {
            None | Some(Value::Null) => None,
            Some(u) => Some(usage_of(
                file,
                &format!("messages[{i}].extra.response.usage"),
                u,
            )?),
        };
        steps.push(Step {
            prompt: list[..i].iter().collect(),
            answer: content_text(m),
            usage,
            execution_s: None,
        });
    }
    Ok(steps)
}

/// `prompt_tokens`, `prompt_tokens_details.cached_tokens`, `completion_tokens`.
fn usage_of(file: &str, path: &str, u: &Value) -> Result<(u64, Option<u64>, u64), InputError> {
    let count = |k: &str| -> Result<u64, InputError> {
        u.get(k).and_then(Value::as_u64).ok_or_else(|| {
            InputError::new(
                file,
                0,
                format!("{path}.{k}"),
                "missing or not a token count",
            )
        })
    };
    let cached = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64);
    Ok((count("prompt_tokens")?, cached, count("completion_tokens")?))
}

/// SWE-agent: a step's `query` is what it sent (1.x); without one, the history before each
/// assistant message that is not a demonstration (0.x). `execution_time` is the step's tool time.
fn swe_agent_steps<'a>(file: &str, o: &'a Map<String, Value>) -> Result<Vec<Step<'a>>, InputError> {
    let traj = o
        .get("trajectory")
        .and_then(Value::as_array)
        .ok_or_else(|| InputError::new(file, 1, "trajectory", "missing or not a list"))?;
    let times: Vec<Option<f64>> = traj
        .iter()
        .map(|s| s.get("execution_time").and_then(Value::as_f64))
        .collect();
    if traj
        .iter()
        .all(|s| s.get("query").is_some_and(Value::is_array))
    {
        return Ok(traj
            .iter()
            .zip(&times)
            .map(|(s, &t)| Step {
                prompt: s["query"]
                    .as_array()
                    .map(|q| q.iter().collect())
                    .unwrap_or_default(),
                answer: s
                    .get("response")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                usage: None,
                execution_s: t,
            })
            .collect());
    }
    let history = o
        .get("history")
        .and_then(Value::as_array)
        .ok_or_else(|| InputError::new(file, 1, "history", "missing or not a list"))?;
    let mut steps = Vec::new();
    for (i, m) in history.iter().enumerate() {
        let demo = m.get("is_demo").and_then(Value::as_bool) == Some(true);
        if m.get("role").and_then(Value::as_str) != Some("assistant") || demo {
            continue;
        }
        let k = steps.len();
        steps.push(Step {
            prompt: history[..i].iter().collect(),
            answer: content_text(m),
            usage: None,
            execution_s: times.get(k).copied().flatten(),
        });
    }
    Ok(steps)
}

/// The calls of a trajectory: counts, prefixes (the leading messages two prompts share), the
/// system prompt as the application prefix, tool times as think times.
fn calls(steps: &[Step]) -> Vec<Call> {
    let mut out: Vec<Call> = Vec::with_capacity(steps.len());
    // Later prompts repeat earlier messages: each distinct message is counted once.
    let mut counts: std::collections::HashMap<String, u64> = Default::default();
    for (k, s) in steps.iter().enumerate() {
        let counted: Vec<u64> = s
            .prompt
            .iter()
            .map(|m| {
                let text = content_text(m);
                match counts.get(&text) {
                    Some(&n) => n,
                    None => {
                        let n = tokens(&text) + PER_MESSAGE;
                        counts.insert(text, n);
                        n
                    }
                }
            })
            .collect();
        let total_counted: u64 = counted.iter().sum::<u64>().max(1);
        let (input, cached, output) = match s.usage {
            Some((i, c, o)) => (i.max(1), c, o.max(1)),
            None => (total_counted, None, tokens(&s.answer).max(1)),
        };
        // Provider counts and ours differ: shares are scaled to this call's own count.
        let scale = input as f64 / total_counted as f64;
        let app = match s.prompt.first() {
            Some(m) if m.get("role").and_then(Value::as_str) == Some("system") => {
                ((counted[0] as f64 * scale) as u64).min(input)
            }
            _ => 0,
        };
        let prefix = (k > 0).then(|| {
            let prev = &steps[k - 1].prompt;
            let same = prev
                .iter()
                .zip(&s.prompt)
                .take_while(|(a, b)| a == b)
                .count();
            let shared_counted: u64 = counted[..same].iter().sum();
            let shared = if same == prev.len() {
                // The whole previous prompt: its own count.
                out[k - 1].input as u64
            } else {
                (shared_counted as f64 * scale) as u64
            };
            (
                (k - 1) as u32,
                shared.min(input).min(out[k - 1].input as u64) as u32,
            )
        });
        out.push(Call {
            agent: 0,
            deps: if k > 0 { vec![(k - 1) as u32] } else { vec![] },
            think_s: if k == 0 {
                Some(0.0)
            } else {
                steps[k - 1].execution_s.map(|t| t.max(0.0))
            },
            input: input.min(u32::MAX as u64) as u32,
            cached: cached.map(|c| c.min(input) as u32),
            prefix: prefix.filter(|&(_, n)| n > 0),
            app: app as u32,
            output: output.min(u32::MAX as u64) as u32,
            ..Call::default()
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> SourceFile {
        SourceFile {
            name: "t.traj".into(),
            text: text.into(),
        }
    }

    #[test]
    fn the_tokenizer_counts_like_o200k() {
        // "hello world" is two tokens in OpenAI's o200k_base.
        assert_eq!(tokens("hello world"), 2);
    }

    #[test]
    fn a_swe_agent_history_becomes_calls_that_extend_each_other() {
        let text = r#"{"trajectory": [{"action": "ls", "execution_time": 1.5}, {"action": "cat a", "execution_time": 0.25}],
            "history": [{"role": "system", "content": "You are a helpful agent."},
                        {"role": "user", "content": "Fix the bug."},
                        {"role": "assistant", "content": "Let me look."},
                        {"role": "user", "content": "a.py b.py"},
                        {"role": "assistant", "content": "Done."}],
            "info": {}}"#;
        let s = session(&file(text)).unwrap().unwrap();
        assert_eq!(s.source, "swe-agent");
        assert_eq!(s.calls.len(), 2);
        let (a, b) = (&s.calls[0], &s.calls[1]);
        assert_eq!(a.app, tokens("You are a helpful agent.") as u32 + 4);
        assert_eq!(b.prefix, Some((0, a.input)));
        assert!(b.input > a.input);
        assert_eq!(b.think_s, Some(1.5));
        assert_eq!(a.output, tokens("Let me look.") as u32);
        s.check().unwrap();
    }

    #[test]
    fn mini_swe_agent_usage_is_taken_as_recorded() {
        let text = r#"{"trajectory_format": "mini-swe-agent-1", "info": {}, "messages": [
            {"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
            {"role": "assistant", "content": "x", "extra": {"response": {"usage": {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 0}}}}},
            {"role": "user", "content": "out"},
            {"role": "assistant", "content": "y", "extra": {"response": {"usage": {"prompt_tokens": 150, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 96}}}}}]}"#;
        let s = session(&file(text)).unwrap().unwrap();
        assert_eq!(s.source, "mini-swe-agent");
        assert_eq!((s.calls[1].input, s.calls[1].output), (150, 9));
        assert_eq!(s.calls[1].cached, Some(96));
        assert_eq!(s.calls[1].prefix, Some((0, 100)));
        assert_eq!(s.calls[1].think_s, None);
    }

    #[test]
    fn bad_trajectories_name_the_field() {
        let e = session(&file(r#"{"trajectory": 3, "history": []}"#))
            .err()
            .unwrap();
        assert_eq!(e.field, "trajectory");
        let e = session(&file(r#"{"trajectory_format": "mini-swe-agent-1", "messages": [{"role": "assistant", "content": "x", "extra": {"response": {"usage": {"prompt_tokens": -1}}}}]}"#)).err().unwrap();
        assert_eq!(e.field, "messages[0].extra.response.usage.prompt_tokens");
        assert!(session(&file("{\"trajectory\": ["))
            .err()
            .unwrap()
            .reason
            .contains("malformed"));
    }
}
