//! Compiles proto/dapr_lock.proto (Dapr's lock API, served on
//! `--dapr-grpc-listen`). protoc is `PROTOC` when set (in this repository,
//! `.cargo/config.toml` sets it); otherwise, as when the crate is built from
//! crates.io, the one the protoc-bin-vendored package ships, so a machine
//! with only Rust builds it.

fn main() {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-env-changed=PROTOC");
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path().unwrap_or_else(|e| {
            panic!("protoc-bin-vendored has no protoc for this platform ({e}); set PROTOC to one of your own")
        });
        // prost-build, under tonic-prost-build, runs the protoc named here.
        std::env::set_var("PROTOC", protoc);
    }
    tonic_prost_build::configure()
        .build_client(false)
        .compile_protos(&["proto/dapr_lock.proto"], &["proto"])
        .expect("compiling proto/dapr_lock.proto");
}
