//! Embeds every file under the repository's `presets/` folder (one folder per kind: `models`,
//! `hardware`, `profiles`, `deployments`), so that adding a preset is adding a YAML file.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    // Read at run time, not compiled in: a build script binary cargo reuses for another checkout of the
    // same crate (a shared target folder) must still read this checkout's presets.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("../presets");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut kinds: Vec<_> = std::fs::read_dir(&root)
        .expect("the presets folder")
        .map(|e| e.expect("a folder entry").path())
        .filter(|p| p.is_dir())
        .collect();
    kinds.sort();
    let mut out = String::from("&[\n");
    for dir in kinds {
        println!("cargo:rerun-if-changed={}", dir.display());
        let kind = dir.file_name().unwrap().to_string_lossy().to_string();
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .expect("a preset folder")
            .map(|e| e.expect("a folder entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        for f in files {
            let name = f.file_stem().unwrap().to_string_lossy().to_string();
            let rel = format!("presets/{kind}/{name}.yaml");
            writeln!(
                out,
                "    PresetFile {{ kind: {kind:?}, name: {name:?}, file: {rel:?}, text: include_str!({:?}) }},",
                f.canonicalize().expect("a preset file").display().to_string()
            )
            .unwrap();
        }
    }
    out.push(']');
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("presets.rs");
    std::fs::write(dest, out).expect("write the preset list");
}
