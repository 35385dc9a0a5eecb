//! Keeps `protoc-bin-vendored` in the build graph. Cargo downloads it before
//! any build script runs, and `scripts/protoc` (the `PROTOC` that
//! `.cargo/config.toml` gives etcd-client's build script) runs its binary.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // Fail here, with the reason, on a platform the package has no protoc for.
    if let Err(e) = protoc_bin_vendored::protoc_bin_path() {
        panic!("protoc-bin-vendored has no protoc for this platform ({e}); set PROTOC to one of your own");
    }
}
