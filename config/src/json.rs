//! JSON records (one per line of a trace or a step log) into typed values, naming the line and field
//! at fault and refusing anything after the record on its line.

use crate::InputError;

/// Deserialises the JSON record on line `line` of `file`. Text after the record (a second record, a
/// stray bracket) is an error, never silently dropped.
pub fn parse_json_line<T: serde::de::DeserializeOwned>(
    file: &str,
    line: usize,
    text: &str,
) -> Result<T, InputError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path == "?" {
            String::new()
        } else {
            path
        };
        InputError::new(file, line, field, e.into_inner().to_string())
    })?;
    de.end().map_err(|_| {
        InputError::new(
            file,
            line,
            "",
            "text after the record: one JSON record per line",
        )
    })?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_record_on_a_line_is_an_error_not_data_loss() {
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct R {
            a: u32,
        }
        assert_eq!(
            parse_json_line::<R>("f", 1, " {\"a\": 1} ").unwrap(),
            R { a: 1 }
        );
        let e = parse_json_line::<R>("f", 3, "{\"a\": 1} {\"a\": 2}").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.reason.contains("text after the record"), "{e}");
        let e = parse_json_line::<R>("f", 4, "{\"a\": -1}").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "a"));
    }
}
