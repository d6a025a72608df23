//! Records the git commit the binary is built from (`SERVERBENCH_COMMIT`, `unknown` outside a clone),
//! for the metadata every JSON output carries.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SERVERBENCH_COMMIT={commit}");
    for path in [".git/HEAD", ".git/refs", ".git/packed-refs"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
