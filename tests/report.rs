//! `--report FILE.html` of `sweep`, `screen`, `compare` and `simulate --timeline`, opened in a real
//! headless browser: the page must parse into the DOM with its plots as SVG elements and its tables,
//! and a screenshot must be taken. The browser is `$SERVERBENCH_BROWSER`, else `chromium`,
//! `chromium-browser` or `google-chrome` on the PATH. `.ci/run` installs Debian's chromium and sets
//! `SERVERBENCH_REQUIRE_BROWSER=1`, so that there the test fails without a browser; elsewhere a
//! machine without one skips the browser check and says so (the reports are still written and parsed).

use crate::{serverbench, stdout};
use std::path::{Path, PathBuf};
use std::process::Command;

fn browser() -> Option<PathBuf> {
    if let Some(b) = std::env::var_os("SERVERBENCH_BROWSER") {
        return Some(PathBuf::from(b));
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| std::env::split_paths(&path).map(move |dir| dir.join(name)))
        .find(|p| p.is_file())
}

fn headless(browser: &Path, page: &Path, extra: &[&str]) -> std::process::Output {
    let dir = page.with_extension("profile");
    Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,2400",
        ])
        .arg(format!("--user-data-dir={}", dir.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("the browser starts")
}

/// Width and height of a PNG (its IHDR chunk).
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let be = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
    (be(16), be(20))
}

/// Opens `page` in the browser: its DOM has `svgs` plots and at least `tables` tables, its metadata,
/// and the screenshot is the window's size and not a blank page.
fn check_in_browser(browser: &Path, page: &Path, svgs: usize, tables: usize) {
    let o = headless(browser, page, &["--dump-dom"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        dom.matches("<svg").count(),
        svgs,
        "{}: plots in the DOM",
        page.display()
    );
    let found = dom.matches("<table").count();
    assert!(found >= tables, "{}: {found} tables", page.display());
    assert!(dom.contains("<h2>Metadata</h2>") && dom.contains("\"commit\""));
    let shot = page.with_extension("png");
    let o = headless(
        browser,
        page,
        &[&format!("--screenshot={}", shot.display())],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let png = std::fs::read(&shot).expect("a screenshot");
    assert_eq!(png_size(&png), (1200, 2400));
    // A blank white page compresses to a few kilobytes; plots and tables do not.
    assert!(
        png.len() > 50_000,
        "{}: {} bytes",
        shot.display(),
        png.len()
    );
}

/// Says that the browser check was skipped where `cargo test` shows it: the harness captures what a
/// passing test prints through `eprintln!`, but not what is written to standard error directly.
fn skipped_the_browser() {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "\nreports_open_in_a_headless_browser: SKIPPED the browser check (no browser found; scripts/install_browser.sh installs one): the reports were written and parsed, not opened in a browser"
    );
}

#[test]
fn reports_open_in_a_headless_browser() {
    let browser = browser();
    if browser.is_none() {
        assert!(
            std::env::var("SERVERBENCH_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "no browser found (SERVERBENCH_REQUIRE_BROWSER=1): run scripts/install_browser.sh or set SERVERBENCH_BROWSER"
        );
        skipped_the_browser();
    }
    let dir = std::env::temp_dir().join(format!("sb-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = |name: &str| dir.join(format!("{name}.html"));
    let arg = |p: &PathBuf| p.to_str().unwrap().to_string();
    stdout(&serverbench([
        "sweep",
        "-c",
        "1,2,4,8",
        "--seeds",
        "2",
        "-w",
        "300",
        "--report",
        &arg(&page("sweep")),
    ]));
    stdout(&serverbench([
        "screen",
        "--seeds",
        "16",
        "-w",
        "300",
        "--report",
        &arg(&page("screen")),
    ]));
    stdout(&serverbench([
        "simulate",
        "-w",
        "300",
        "--timeline",
        "--report",
        &arg(&page("simulate")),
    ]));
    let o = serverbench(["simulate", "--timeline"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--timeline: give --out DIR"));
    // compare from stored runs (no server needed).
    crate::compare_stored_seeds(&dir.join("compare"), &["--report", &arg(&page("compare"))]);
    for (name, svgs, tables) in [
        ("sweep", 1, 3),
        ("screen", 1, 2),
        ("simulate", 1, 2),
        ("compare", 1, 2),
    ] {
        let html = std::fs::read_to_string(page(name)).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>\n"));
        assert_eq!(html.matches("<svg").count(), svgs, "{name}");
        assert!(
            !html.contains("<?xml"),
            "{name}: the SVG is inline, without its prolog"
        );
        // The command's tables are HTML tables: the only preformatted block is the metadata (the
        // sweep's table and the simulate summary were `<pre>` blocks of printed text).
        assert_eq!(html.matches("<pre>").count(), 1, "{name}");
        let found = html.matches("<table").count();
        assert!(
            found >= tables,
            "{name}: {found} tables, the metadata's among them"
        );
        if let Some(b) = &browser {
            check_in_browser(b, &page(name), svgs, tables);
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
