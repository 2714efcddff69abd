//! Compiles `proto/` with protox (pure Rust, no `protoc` needed) into prost/tonic code, and
//! writes the encoded descriptor set that the reflection service serves.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "envoy/service/ratelimit/v3/rls.proto",
    "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
    "envoy/type/v3/ratelimit_unit.proto",
    "envoy/config/core/v3/base.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
    "turnstile/wire/v1/lenient.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let mut compiler = protox::Compiler::new(["proto"])?;
    compiler.include_imports(true).include_source_info(false);
    compiler.open_files(PROTOS)?;
    std::fs::write(
        out_dir.join("turnstile_descriptor.bin"),
        compiler.encode_file_descriptor_set(),
    )?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .include_file("protos.rs")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
