//! YAML in, typed values out: parsing that names the field and line at fault (unknown fields are
//! rejected by the target types, so a typo never falls back to a default silently), the one deep merge
//! of overrides onto a base, and finding the line of a dotted field path in the text a user wrote.

use crate::{FieldError, InputError};
use serde_yaml::Value;

/// Deepest nesting a YAML file may have (flow brackets or block indentation levels): the parser's time
/// grows with the square of the depth (100,000 `[` took over a minute), and no configuration needs more
/// than a handful.
pub const MAX_YAML_DEPTH: usize = 64;

/// The line at which `text` first nests deeper than `max` (flow `[`/`{` outside quotes and comments,
/// or block indentation levels), if it does; one pass, linear in the text.
pub fn too_deep(text: &str, max: usize) -> Option<usize> {
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let body = line.trim_start_matches([' ', '-']);
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        if flow == 0 {
            let indent = line.len() - body.len();
            while indents.last().is_some_and(|&i| i >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        let mut quote: Option<char> = None;
        for c in body.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => flow += 1,
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
        if indents.len() + flow > max {
            return Some(n + 1);
        }
    }
    None
}

/// Deserialises YAML, naming the field path and line of the first problem.
pub fn parse_yaml<T: for<'de> serde::Deserialize<'de>>(
    file: &str,
    text: &str,
) -> Result<T, InputError> {
    if let Some(line) = too_deep(text, MAX_YAML_DEPTH) {
        return Err(InputError::new(
            file,
            line,
            "",
            format!(
                "nested deeper than {MAX_YAML_DEPTH} levels, more than any configuration needs"
            ),
        ));
    }
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        let located = e.inner().location().map(|l| l.line());
        let message = e.into_inner().to_string();
        if message == REPETITION_LIMIT {
            // serde_yaml gives this error no location: the field being read names the line.
            let line = match line_of(text, &field) {
                0 => first_alias_line(text),
                n => n,
            };
            return InputError::new(file, line, field, ALIAS_BOMB);
        }
        let line = located.unwrap_or_else(|| line_of(text, &field));
        InputError::new(file, line, field, without_location(&message))
    })
}

/// serde_yaml's error when aliases expand past 100 times the document's own events (an alias bomb:
/// ten lines of `[*a, *a, …]` nested ten deep would expand to 10¹⁰ values).
const REPETITION_LIMIT: &str = "repetition limit exceeded";

/// What the error says instead.
const ALIAS_BOMB: &str =
    "aliases (`*name`) expand to more than 100 times the file's own size: write the values out";

/// The first line that uses an alias (`*name` outside quotes and comments), 0 when none does.
fn first_alias_line(text: &str) -> usize {
    for (n, line) in text.lines().enumerate() {
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') if prev == ' ' => break,
                (None, '*') if matches!(prev, ' ' | '[' | ',' | '-' | '{' | ':') => return n + 1,
                _ => {}
            }
            prev = c;
        }
    }
    0
}

/// Deserialises a generic value (a merged document), naming the field path of the first problem.
pub fn from_value<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        FieldError::new(field, without_location(&e.into_inner().to_string()))
    })
}

/// Parses YAML into a generic value (for merging); an empty document is an empty mapping.
pub fn parse_value(file: &str, text: &str) -> Result<Value, InputError> {
    let v: Value = parse_yaml(file, text)?;
    Ok(match v {
        Value::Null => Value::Mapping(Default::default()),
        v => v,
    })
}

/// A value as YAML (for merging a typed value with overrides).
pub fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_yaml::to_value(v).expect("configuration types serialise to YAML")
}

/// Deep-merges `over` into `base`: mappings merge key by key; anything else replaces.
pub fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Mapping(b), Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

/// The 1-based line of `text` that sets the dotted field `path` (`engine.max_num_seqs`), following
/// block mappings by indentation and flow mappings (`engine: {max_num_seqs: 8}`) on one line; 0 when
/// the text does not set it. List indices in the path (`a[2]`) are not followed: the list's line is
/// given.
pub fn line_of(text: &str, path: &str) -> usize {
    if path.is_empty() {
        return 0;
    }
    // A list index is its own segment (`bands.[0].dist`) or a suffix (`bands[0]`): neither is a key.
    let keys: Vec<&str> = path
        .split('.')
        .map(|k| k.split('[').next().unwrap_or(k))
        .filter(|k| !k.is_empty())
        .collect();
    if keys.is_empty() {
        return 0;
    }
    let mut found = 0;
    let mut depth = 0;
    let mut parent_indent: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split(" #").next().unwrap_or(raw);
        let body = line.trim_start();
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let indent = line.len() - body.len();
        if let Some(p) = parent_indent {
            if indent <= p {
                break; // left the mapping the previous key opened
            }
        }
        let Some(rest) = key_value(body, keys[depth]) else {
            continue;
        };
        found = i + 1;
        depth += 1;
        // The remaining keys may sit on this line, in a flow mapping.
        let mut rest = rest;
        while depth < keys.len() {
            match find_flow_key(rest, keys[depth]) {
                Some(after) => {
                    rest = after;
                    depth += 1;
                }
                None => break,
            }
        }
        if depth == keys.len() || !rest.trim().is_empty() {
            return found;
        }
        parent_indent = Some(indent);
    }
    found
}

/// The text after `key:` when `body` starts with that key.
fn key_value<'a>(body: &'a str, key: &str) -> Option<&'a str> {
    let body = body.strip_prefix("- ").unwrap_or(body);
    let rest = body.strip_prefix(key)?;
    rest.trim_start().strip_prefix(':')
}

/// The text after `key:` inside a flow mapping on one line.
fn find_flow_key<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    if key.is_empty() {
        return None;
    }
    let mut from = 0;
    while let Some(at) = text[from..].find(key) {
        let start = from + at;
        let before = text[..start].trim_end().chars().last();
        let after = text[start + key.len()..].trim_start();
        if matches!(before, Some('{') | Some(',')) && after.starts_with(':') {
            return Some(&after[1..]);
        }
        from = start + key.len();
    }
    None
}

/// A YAML error message without its trailing ` at line N column M`: the line is reported on its own.
fn without_location(message: &str) -> &str {
    let Some(at) = message.rfind(" at line ") else {
        return message;
    };
    let rest = &message[at + " at line ".len()..];
    let location = rest
        .split_once(" column ")
        .is_some_and(|(l, c)| l.parse::<u64>().is_ok() && c.parse::<u64>().is_ok());
    if location {
        &message[..at]
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_indices_in_a_field_path_are_skipped_when_finding_its_line() {
        let text = "name: x\nnew_tokens: {bands: [{dist: {dist: constant, value: -1}}]}\n";
        // The path an error inside a list names: its index segment is no key (it looped for ever).
        assert_eq!(line_of(text, "new_tokens.bands.[0].dist.value"), 2);
        assert_eq!(line_of(text, "new_tokens.bands[0]"), 2);
        assert_eq!(line_of(text, "[0]"), 0);
        assert_eq!(find_flow_key("{a: 1}", ""), None);
    }

    #[test]
    fn deep_nesting_is_refused_at_once_naming_the_line() {
        let deep = format!("a: {}", "[".repeat(100_000));
        let t = std::time::Instant::now();
        let e = parse_yaml::<Value>("deep.yaml", &deep).unwrap_err();
        assert!(t.elapsed().as_secs_f64() < 1.0, "{:?}", t.elapsed());
        assert_eq!(
            (e.line, e.reason.contains("deeper than 64")),
            (1, true),
            "{e}"
        );
        let mut block = String::new();
        for i in 0..80 {
            block.push_str(&format!("{}k{i}:\n", " ".repeat(i)));
        }
        assert_eq!(too_deep(&block, 64), Some(65));
        // Brackets inside quotes and comments are text, not nesting; real files pass.
        assert_eq!(too_deep("a: \"[[[[\" # [[[[\nb: [1, [2]]\n", 3), None);
        assert!(parse_yaml::<Value>("ok.yaml", "a:\n  b: [1, {c: 2}]\n").is_ok());
    }

    #[test]
    fn an_alias_bomb_names_its_line() {
        let mut bomb = String::from("a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n");
        for (name, prev) in ["b", "c", "d", "e", "f", "g"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f"])
        {
            let items = vec![format!("*{prev}"); 10].join(", ");
            bomb.push_str(&format!("{name}: &{name} [{items}]\n"));
        }
        let e = parse_yaml::<Value>("bomb.yaml", &bomb).unwrap_err();
        assert!(e.reason.contains("aliases (`*name`) expand"), "{e}");
        // The expansion passes the limit inside `e` (10⁴ values from a 70-line-event file).
        assert_eq!((e.line, e.field.starts_with("e[")), (5, true), "{e}");
        // At the top of the document (no field to name), the first alias names the line.
        let top = bomb
            .replace("g: &g [", "top: [")
            .replace("a: &a", "# x\na: &a");
        assert_eq!(first_alias_line(&top), 3);
        assert_eq!(first_alias_line("a: \"*x\" # *y\nb: [*c]\n"), 2);
    }

    #[test]
    fn fields_are_found_on_the_line_that_sets_them() {
        let text = "base: x\n# a comment\nengine:\n  policy: sglang\n  max_num_seqs: 8\nslo: {ttft_s: 1.5, tpot_s: 0.02}\ntp: 2\n";
        assert_eq!(line_of(text, "engine.max_num_seqs"), 5);
        assert_eq!(line_of(text, "engine"), 3);
        assert_eq!(line_of(text, "slo.tpot_s"), 6);
        assert_eq!(line_of(text, "tp"), 7);
        assert_eq!(line_of(text, "dp"), 0);
        assert_eq!(
            line_of(text, "engine.block_size"),
            3,
            "the nearest line that is set"
        );
        assert_eq!(
            line_of("engine: {speculative: {k: 0}}\n", "engine.speculative.k"),
            1
        );
        assert_eq!(line_of("a:\n  b: 1\nc:\n  b: 2\n", "c.b"), 4);
    }

    #[test]
    fn merges_go_deep_and_replace_leaves() {
        let mut base = parse_value("b", "a: {x: 1, y: 2}\nz: [1]\n").unwrap();
        merge(
            &mut base,
            parse_value("o", "a: {y: 3}\nz: [2, 3]\nw: 4\n").unwrap(),
        );
        let want = parse_value("w", "a: {x: 1, y: 3}\nz: [2, 3]\nw: 4\n").unwrap();
        assert_eq!(base, want);
        assert_eq!(
            parse_value("e", "").unwrap(),
            Value::Mapping(Default::default())
        );
    }

    #[test]
    fn parse_errors_name_file_line_and_field() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct T {
            a: u32,
        }
        let e = parse_yaml::<T>("t.yaml", "\na: -1\n").unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.line, e.field.as_str()),
            ("t.yaml", 2, "a")
        );
        assert!(!e.reason.contains("at line"), "{}", e.reason);
        let e = FieldError::new("b", "must be positive").under("engine");
        assert_eq!(e.field, "engine.b");
        assert_eq!(e.to_string(), "engine.b: must be positive");
        let e = e.in_file("d.yaml", "engine:\n  b: 0\n");
        assert_eq!(e.to_string(), "d.yaml: line 2: engine.b: must be positive");
    }
}
