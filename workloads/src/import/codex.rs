//! Codex CLI rollouts (`~/.codex/sessions/…/rollout-*.jsonl`): one session per file, a line per event.
//! Each `token_count` event that carries `info.last_token_usage` is one model call: its prompt
//! (`input_tokens`, cached ones included), the part the provider read from its cache
//! (`cached_input_tokens`, taken as the prefix shared with the call before) and its output
//! (`output_tokens`, reasoning included). The call was sent at the latest input the log shows before
//! it — the user's message, a tool's output, the turn's context — and its answer ended at the event's
//! own time; the gap between an answer and the next call is the client's. Only numbers are kept.

use super::{has_key, Importer, Reduced, Skip, SourceFile};
use crate::corpus::{Call, Session};
use crate::error::InputError;
use crate::import::claude_code::timestamp;
use serde_json::{Map, Value};

/// Codex CLI rollout files.
pub struct Codex;

impl Importer for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["codex-cli"]
    }

    fn summary(&self) -> &'static str {
        "Codex CLI rollouts (rollout-*.jsonl), one session per file: each token_count event is a model call"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "payload") && head.contains("\"session_meta\"")
    }

    fn reduce(&self, files: &[SourceFile], lenient: bool) -> Option<Result<Reduced, InputError>> {
        let mut out = Reduced::default();
        for f in files {
            match session(f, &mut out.skipped) {
                Ok(Some(s)) => out.push(s, vec![f.name.clone()]),
                Ok(None) => out
                    .skipped
                    .push(Skip::new(&f.name, 0, "a rollout with no model call")),
                Err(e) if lenient => out.skipped.push(Skip::unreadable(&e)),
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(out))
    }
}

/// One call as the rollout records it, times in seconds since the epoch.
struct Raw {
    sent: Option<f64>,
    done: Option<f64>,
    input: u32,
    cached: u32,
    output: u32,
}

/// The calls of one rollout, or `None` when it holds none; `skipped` gets what was left out.
fn session(f: &SourceFile, skipped: &mut Vec<Skip>) -> Result<Option<Session>, InputError> {
    let mut id: Option<String> = None;
    let mut last_input: Option<f64> = None;
    let mut last_total: Option<Value> = None;
    let mut raw: Vec<Raw> = Vec::new();
    for (n, line) in super::lines(&f.text) {
        let err = |field: &str, why: String| InputError::new(&f.name, n, field, why);
        let v: Value =
            serde_json::from_str(line).map_err(|e| err("", format!("malformed JSON: {e}")))?;
        let o = v
            .as_object()
            .ok_or_else(|| err("", "expected a JSON object".into()))?;
        let at = match o.get("timestamp") {
            None | Some(Value::Null) => None,
            Some(t) => Some(
                timestamp(t)
                    .filter(|s| s.is_finite() && s.abs() < 1e12)
                    .ok_or_else(|| err("timestamp", format!("not a time: {t}")))?,
            ),
        };
        let payload = o.get("payload").and_then(Value::as_object);
        let kind = o.get("type").and_then(Value::as_str).unwrap_or("");
        let inner = payload
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("");
        match (kind, inner) {
            ("session_meta", _) => {
                id = id.or_else(|| {
                    payload
                        .and_then(|p| p.get("id").or_else(|| p.get("session_id")))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                });
            }
            ("event_msg", "token_count") => {
                let Some(info) = payload
                    .and_then(|p| p.get("info"))
                    .and_then(Value::as_object)
                else {
                    skipped.push(Skip::new(&f.name, n, "a token_count event with no usage"));
                    continue;
                };
                // Codex writes the same count again (a rate-limit update): one call, counted once.
                let total = info.get("total_token_usage").cloned();
                if total.is_some() && total == last_total {
                    skipped.push(Skip::new(&f.name, n, "a repeated token_count event"));
                    continue;
                }
                last_total = total;
                let call = read_usage(&f.name, n, info, last_input, at)?;
                if call.output == 0 {
                    skipped.push(Skip::new(&f.name, n, "a model call with no output"));
                    continue;
                }
                raw.push(call);
                last_input = None;
            }
            // Inputs: what the next call is sent after.
            ("turn_context", _)
            | ("event_msg", "user_message")
            | ("response_item", "function_call_output")
            | ("response_item", "custom_tool_call_output")
            | ("response_item", "local_shell_call_output") => {
                last_input = at.or(last_input);
            }
            ("response_item", "message")
                if payload.and_then(|p| p.get("role")).and_then(Value::as_str) == Some("user") =>
            {
                last_input = at.or(last_input);
            }
            _ => {}
        }
    }
    if raw.is_empty() {
        return Ok(None);
    }
    let id = id.unwrap_or_else(|| super::base_name(&f.name).to_string());
    Ok(Some(Session::new("codex-cli", &id, calls(&raw))))
}

/// Reads `last_token_usage` of a `token_count` event: counts bounded by the longest context.
fn read_usage(
    file: &str,
    n: usize,
    info: &Map<String, Value>,
    sent: Option<f64>,
    done: Option<f64>,
) -> Result<Raw, InputError> {
    let usage = info
        .get("last_token_usage")
        .and_then(Value::as_object)
        .ok_or_else(|| {
            InputError::new(
                file,
                n,
                "payload.info.last_token_usage",
                "missing: the event does not say what the call cost",
            )
        })?;
    let count = |k: &str| -> Result<u32, InputError> {
        match usage.get(k) {
            None | Some(Value::Null) => Ok(0),
            Some(v) => v
                .as_u64()
                .filter(|&c| c <= crate::spec::MAX_FIXED_TOKENS as u64)
                .map(|c| c as u32)
                .ok_or_else(|| {
                    InputError::new(
                        file,
                        n,
                        format!("payload.info.last_token_usage.{k}"),
                        format!(
                            "expected a token count from 0 to {} (the longest context), got {v}",
                            crate::spec::MAX_FIXED_TOKENS
                        ),
                    )
                }),
        }
    };
    let (input, cached, output) = (
        count("input_tokens")?,
        count("cached_input_tokens")?,
        count("output_tokens")?,
    );
    if cached > input {
        return Err(InputError::new(
            file,
            n,
            "payload.info.last_token_usage.cached_input_tokens",
            format!("{cached} cached tokens exceed the {input} input tokens they are part of"),
        ));
    }
    if input as u64 + output as u64 > crate::spec::MAX_FIXED_TOKENS as u64 {
        return Err(InputError::new(
            file,
            n,
            "payload.info.last_token_usage.input_tokens",
            format!(
                "{input} input and {output} output tokens exceed the longest context ({})",
                crate::spec::MAX_FIXED_TOKENS
            ),
        ));
    }
    Ok(Raw {
        sent,
        done,
        input: input.max(1),
        cached,
        output,
    })
}

/// The rollout's calls as one agent's chain: each depends on the one before, shares with it the
/// tokens the provider read from its cache, and waits the gap from its answer.
fn calls(raw: &[Raw]) -> Vec<Call> {
    let first = raw
        .iter()
        .filter_map(|r| r.sent.or(r.done))
        .fold(f64::INFINITY, f64::min);
    let rel = |t: Option<f64>| t.filter(|_| first.is_finite()).map(|t| round_ms(t - first));
    raw.iter()
        .enumerate()
        .map(|(i, r)| {
            let prev = i.checked_sub(1).map(|p| &raw[p]);
            let sent = r.sent.filter(|&s| r.done.map_or(true, |d| s <= d));
            let think = match (prev.and_then(|p| p.done), sent) {
                (Some(d), Some(s)) => Some(round_ms((s - d).max(0.0))),
                _ => None,
            };
            let shared = prev.map_or(0, |p| r.cached.min(p.input));
            Call {
                agent: 0,
                kind: Default::default(),
                deps: prev.map(|_| vec![i as u32 - 1]).unwrap_or_default(),
                background: false,
                sent_s: rel(sent),
                done_s: rel(r.done),
                think_s: think,
                input: r.input,
                cached: Some(r.cached),
                prefix: (shared > 0).then(|| (i as u32 - 1, shared)),
                app: 0,
                output: r.output,
            }
        })
        .collect()
}

fn round_ms(s: f64) -> f64 {
    (s * 1e3).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> SourceFile {
        SourceFile {
            name: "rollout.jsonl".into(),
            text: text.into(),
        }
    }

    const ROLLOUT: &str = include_str!("../../../tests/fixtures/codex/rollout-sample.jsonl");

    /// Three calls: the first after the user's message, the next two after tool outputs; a
    /// rate-limit-only event and a repeated count left out with their reasons; the gaps from each
    /// answer to the next tool output's end.
    #[test]
    fn a_rollout_becomes_a_chain_of_calls() {
        let r = Codex.reduce(&[file(ROLLOUT)], false).unwrap().unwrap();
        assert_eq!(r.sessions.len(), 1);
        let s = &r.sessions[0];
        assert_eq!(s.source, "codex-cli");
        s.check().unwrap();
        let c = &s.calls;
        assert_eq!(c.len(), 3);
        assert_eq!(
            c.iter().map(|c| (c.input, c.output)).collect::<Vec<_>>(),
            [(12880, 328), (13421, 96), (14010, 512)]
        );
        assert_eq!(c[1].prefix, Some((0, 12800)));
        assert_eq!(c[1].deps, [0]);
        assert_eq!(c[0].sent_s, Some(0.0));
        assert_eq!(c[0].done_s, Some(3.1));
        assert_eq!(c[1].think_s, Some(1.9));
        assert_eq!(c[2].think_s, Some(0.4));
        let why: Vec<String> = r.skip_counts().into_iter().map(|(_, w)| w).collect();
        assert_eq!(
            why,
            [
                "a repeated token_count event",
                "a token_count event with no usage"
            ]
        );
        assert_eq!(
            super::super::TraceFormat::detect(ROLLOUT).unwrap().name(),
            "codex"
        );
    }

    /// Bad counts and times name the line and the field.
    #[test]
    fn bad_counts_name_line_and_field() {
        let bad = |from: &str, to: &str| {
            assert!(ROLLOUT.contains(from), "{from}");
            Codex
                .reduce(&[file(&ROLLOUT.replacen(from, to, 1))], false)
                .unwrap()
                .unwrap_err()
        };
        let last = "\"last_token_usage\":{\"input_tokens\":12880,\"cached_input_tokens\":9600,\"output_tokens\":";
        let e = bad(&format!("{last}328"), &format!("{last}-3"));
        assert_eq!(
            (e.line, e.field.as_str()),
            (5, "payload.info.last_token_usage.output_tokens")
        );
        let e = bad(
            "\"cached_input_tokens\":12800",
            "\"cached_input_tokens\":99999",
        );
        assert_eq!(e.field, "payload.info.last_token_usage.cached_input_tokens");
        let e = bad("\"input_tokens\":13421", "\"input_tokens\":16777216");
        assert_eq!(e.field, "payload.info.last_token_usage.input_tokens");
        let e = bad("\"2026-09-21T11:14:20.000Z\"", "\"yesterday\"");
        assert_eq!((e.line, e.field.as_str()), (1, "timestamp"));
        let lenient = Codex
            .reduce(
                &[file(&ROLLOUT.replacen(
                    &format!("{last}328"),
                    &format!("{last}1.5"),
                    1,
                ))],
                true,
            )
            .unwrap()
            .unwrap();
        assert!(lenient.sessions.is_empty() && lenient.skipped.len() == 1);
    }
}
