//! Compiles proto/dapr_lock.proto (Dapr's lock API, served on
//! `--dapr-grpc-listen`). protoc is the one `.cargo/config.toml` names,
//! shipped by protoc-bin-vendored, so a machine with only Rust builds it.

fn main() {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .build_client(false)
        .compile_protos(&["proto/dapr_lock.proto"], &["proto"])
        .expect("compiling proto/dapr_lock.proto");
}
