//! `--report FILE.html`: one self-contained HTML page of a command's results — its tables, its SVG plots
//! inline and the run's metadata — that a person opens in a browser. It formats what the command already
//! computed into one text; it computes no result, writes no file and loads nothing from elsewhere.

use super::meta::Meta;
use std::fmt::Write as _;

/// A report being assembled, section by section.
pub struct Report {
    title: String,
    meta: Meta,
    body: String,
}

impl Report {
    /// An empty report titled `title` about the run `meta` describes.
    pub fn new(title: &str, meta: Meta) -> Report {
        Report {
            title: title.to_string(),
            meta,
            body: String::new(),
        }
    }

    /// A heading and a paragraph of explanation.
    pub fn section(&mut self, heading: &str, text: &str) -> &mut Report {
        let _ = writeln!(self.body, "<h2>{}</h2>", escape(heading));
        if !text.is_empty() {
            let _ = writeln!(self.body, "<p>{}</p>", escape(text));
        }
        self
    }

    /// A table from CSV text our commands write (a header line, then rows; no quoted fields). Numbers
    /// with a fraction are shown to four significant digits; the CSV file keeps them whole.
    pub fn csv_table(&mut self, caption: &str, csv: &str) -> &mut Report {
        let mut lines = csv.lines().filter(|l| !l.trim().is_empty());
        let Some(header) = lines.next() else {
            return self;
        };
        let rows: Vec<Vec<String>> = lines
            .map(|l| l.split(',').map(|c| short_number(c.trim())).collect())
            .collect();
        let header: Vec<String> = header.split(',').map(|h| h.trim().to_string()).collect();
        self.table(caption, &header, &rows)
    }

    /// The pipe tables of a Markdown text (other lines are kept as paragraphs).
    pub fn markdown(&mut self, text: &str) -> &mut Report {
        let mut table: Vec<Vec<String>> = Vec::new();
        for line in text.lines().chain(std::iter::once("")) {
            let t = line.trim();
            if t.starts_with('|') {
                let cells: Vec<String> = t
                    .trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect();
                if !cells.iter().all(|c| c.chars().all(|ch| "-: ".contains(ch))) {
                    table.push(cells);
                }
                continue;
            }
            if !table.is_empty() {
                let header = table.remove(0);
                self.table("", &header, &table);
                table.clear();
            }
            if let Some(h) = t.strip_prefix('#') {
                let _ = writeln!(
                    self.body,
                    "<h3>{}</h3>",
                    escape(h.trim_start_matches('#').trim())
                );
            } else if !t.is_empty() {
                let _ = writeln!(self.body, "<p>{}</p>", escape(t));
            }
        }
        self
    }

    /// A table.
    pub fn table(&mut self, caption: &str, header: &[String], rows: &[Vec<String>]) -> &mut Report {
        self.body.push_str("<div class=\"scroll\"><table>\n");
        if !caption.is_empty() {
            let _ = writeln!(self.body, "<caption>{}</caption>", escape(caption));
        }
        self.body.push_str("<thead><tr>");
        for h in header {
            let _ = write!(self.body, "<th>{}</th>", escape(h));
        }
        self.body.push_str("</tr></thead>\n<tbody>\n");
        for r in rows {
            self.body.push_str("<tr>");
            for c in r {
                let _ = write!(self.body, "<td>{}</td>", escape(c));
            }
            self.body.push_str("</tr>\n");
        }
        self.body.push_str("</tbody>\n</table></div>\n");
        self
    }

    /// A table of labelled rows (a printed summary: what a line is about, then what it says).
    pub fn labelled(&mut self, rows: &[(&str, String)]) -> &mut Report {
        self.body
            .push_str("<div class=\"scroll\"><table class=\"labelled\">\n<tbody>\n");
        for (k, v) in rows {
            let _ = writeln!(
                self.body,
                "<tr><th>{}</th><td>{}</td></tr>",
                escape(k),
                escape(v)
            );
        }
        self.body.push_str("</tbody>\n</table></div>\n");
        self
    }

    /// Printed lines, each a paragraph (blank lines left out).
    pub fn paragraphs(&mut self, text: &str) -> &mut Report {
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let _ = writeln!(self.body, "<p>{}</p>", escape(line));
        }
        self
    }

    /// Preformatted text (what a command prints besides its tables).
    pub fn text(&mut self, text: &str) -> &mut Report {
        let _ = writeln!(self.body, "<pre>{}</pre>", escape(text));
        self
    }

    /// An SVG plot, inline.
    pub fn svg(&mut self, caption: &str, svg: &str) -> &mut Report {
        let start = svg.find("<svg").unwrap_or(0);
        let _ = writeln!(
            self.body,
            "<figure>\n{}\n<figcaption>{}</figcaption>\n</figure>",
            &svg[start..],
            escape(caption)
        );
        self
    }

    /// The page.
    pub fn html(&self) -> String {
        let meta = serde_json::to_string_pretty(&self.meta).unwrap_or_default();
        let deployment = self
            .meta
            .deployment
            .as_ref()
            .map(|d| {
                format!(
                    "{} (sha256 {}…)",
                    d.name,
                    &d.sha256[..12.min(d.sha256.len())]
                )
            })
            .unwrap_or_else(|| "—".into());
        let mut facts = vec![
            (
                "tool",
                format!(
                    "{} {} (commit {})",
                    self.meta.tool, self.meta.version, self.meta.commit
                ),
            ),
            ("command", self.meta.command.join(" ")),
            ("created (UTC)", self.meta.created_utc.clone()),
            ("deployment", deployment),
        ];
        if let Some(url) = &self.meta.url {
            facts.push(("server", url.clone()));
        }
        if let Some(model) = &self.meta.model {
            facts.push(("model", model.clone()));
        }
        let mut head = String::new();
        for (k, v) in facts {
            let _ = write!(
                head,
                "<tr><th>{}</th><td>{}</td></tr>",
                escape(k),
                escape(&v)
            );
        }
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n<table class=\"meta\">{head}</table>\n{body}<h2>Metadata</h2>\n<pre>{meta}</pre>\n</body>\n</html>\n",
            title = escape(&self.title),
            body = self.body,
            meta = escape(&meta),
        )
    }
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:1100px;color:#222}\
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:2px 8px;text-align:right}\
th{background:#f3f3f3}table.meta th,table.meta td,table.labelled th,table.labelled td{text-align:left}caption{font-weight:bold;text-align:left}\
pre{background:#f7f7f7;padding:8px;overflow-x:auto}div.scroll{overflow-x:auto}figure{margin:1em 0}svg{max-width:100%;height:auto}";

/// Text safe inside HTML.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// A number with a fraction to four significant digits; anything else as it is.
fn short_number(s: &str) -> String {
    match s.parse::<f64>() {
        Ok(v) if s.contains('.') && v.is_finite() && v != 0.0 => {
            let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 8) as usize;
            format!("{v:.digits$}")
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_tables_come_from_csv_and_markdown() {
        let mut r = Report::new("a <b> & c", crate::report::meta::test_meta());
        r.csv_table("levels", "c,d\n1,0.123456789\n2,12.5\n")
            .markdown("# Title\n| a | b |\n|---|---|\n| x<y | 2 |\n\nafter")
            .svg("plot", "<?xml version=\"1.0\"?><svg width=\"10\"></svg>");
        let html = r.html();
        assert!(html.contains("<title>a &lt;b&gt; &amp; c</title>"));
        assert!(
            html.contains("<td>0.1235</td>") && html.contains("<td>12.50</td>"),
            "{html}"
        );
        assert!(html.contains("<td>x&lt;y</td>") && html.contains("<h3>Title</h3>"));
        assert!(html.contains("<p>after</p>"));
        assert!(html.contains("<figure>\n<svg width=\"10\"></svg>") && !html.contains("<?xml"));
        assert_eq!(html.matches("<table>").count(), 2);
    }

    #[test]
    fn numbers_keep_four_significant_digits() {
        assert_eq!(short_number("0.000123456"), "0.0001235");
        assert_eq!(short_number("1234.5678"), "1235");
        assert_eq!(short_number("16"), "16");
        assert_eq!(short_number("true"), "true");
        assert_eq!(short_number("0.0"), "0.0");
    }
}
