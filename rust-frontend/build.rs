// Compiles the engine contract with a vendored protoc so no system protoc is needed.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_dir = manifest.join("../proto");
    let proto = proto_dir.join("engine.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    // SAFETY of set_var: build scripts are single-threaded.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_server(false) // the server is the Python worker
        .compile_protos(&[proto], &[proto_dir])?;
    Ok(())
}
