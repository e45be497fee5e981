//! Compiles the vendored Envoy .proto files (the workspace's proto/vendor, see
//! scripts/vendor-envoy-protos) into a descriptor set that src/envoy_types.rs embeds: to read
//! EnvoyFilter patch values as Envoy messages, and (in the server) to print xDS resources as
//! proto3 JSON and apply those patches. Only descriptors are produced, no Rust code: the
//! message types come from envoy-types.

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let vendor = Path::new("../../proto/vendor");
    println!("cargo:rerun-if-changed=../../proto/vendor");
    let roots = std::fs::read_to_string(vendor.join("ROOTS"))?;
    let roots: Vec<&str> = roots.lines().filter(|l| !l.trim().is_empty()).collect();
    let descriptors = protox::Compiler::new([vendor])?
        .include_source_info(false)
        .include_imports(true)
        .open_files(roots)?
        .encode_file_descriptor_set();
    let out = Path::new(&std::env::var("OUT_DIR")?).join("envoy_descriptors.bin");
    std::fs::write(out, descriptors)?;
    Ok(())
}
