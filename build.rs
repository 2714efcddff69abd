//! Compiles `proto/` with protox (pure Rust, no `protoc` needed) into prost/tonic code, and
//! writes the encoded descriptor set that the reflection service serves (the served protos only).

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "envoy/service/ratelimit/v3/rls.proto",
    "envoy/extensions/common/ratelimit/v3/ratelimit.proto",
    "envoy/type/v3/ratelimit_unit.proto",
    "envoy/config/core/v3/base.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
    "turnstile/wire/v1/lenient.proto",
];

/// Protos Turnstile speaks as a client (rules over xDS): compiled, but not in the descriptor set
/// that reflection serves, since Turnstile does not serve them.
const CLIENT_PROTOS: &[&str] = &[
    "envoy/service/discovery/v3/ads.proto",
    "ratelimit/config/ratelimit/v3/rls_conf.proto",
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
    compiler.open_files(CLIENT_PROTOS)?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .include_file("protos.rs")
        .compile_fds(compiler.file_descriptor_set())?;
    Ok(())
}
