//! The lessons in docs/lessons/ show commands and what they print; every block must still be what its
//! command prints, line for line (the lesson's numbers are the tool's).

use crate::{serverbench, stdout};
use std::path::PathBuf;

/// Each `<!-- run: ARGS -->` of a lesson and the lines of the ```text block after it.
fn runs(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        let Some(args) = l
            .trim()
            .strip_prefix("<!-- run:")
            .and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        let fence = lines.next().unwrap_or("");
        assert_eq!(fence.trim(), "```text", "a ```text block follows `{l}`");
        let block: Vec<String> = lines
            .by_ref()
            .take_while(|l| l.trim() != "```")
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.trim_end().to_string())
            .collect();
        out.push((args.trim().to_string(), block));
    }
    out
}

#[test]
fn every_lesson_shows_what_its_commands_print() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/lessons");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (args, block) in runs(&text) {
            let printed = stdout(&serverbench(args.split_whitespace()));
            let printed: Vec<&str> = printed.lines().map(str::trim_end).collect();
            for line in &block {
                assert!(
                    printed.contains(&line.as_str()),
                    "{}: `serverbench {args}` no longer prints\n{line}\nit prints:\n{}",
                    path.display(),
                    printed.join("\n")
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 4, "{checked} lesson commands checked");
}
