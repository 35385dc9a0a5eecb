//! `http-hostile`: a component that misbehaves on purpose, to prove the host
//! bounds every instance.
//!
//! - `GET /hostile/loop` spins forever (the epoch deadline must stop it).
//! - `GET /hostile/alloc` allocates and touches memory without bound (the
//!   per-instance memory cap must stop it).
//! - `GET /hostile/ok` answers `200 ok`: the same component still works
//!   for the next request, in a fresh instance.

use spin_sdk::http::{Request, Response};
use spin_sdk::http_component;

#[http_component]
fn handle(req: Request) -> Response {
    match req.path() {
        "/hostile/loop" => spin_forever(),
        "/hostile/alloc" => grow_forever(),
        "/hostile/ok" => Response::new(200, "ok"),
        _ => Response::new(404, "not found"),
    }
}

fn spin_forever() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn grow_forever() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        // Touch every page so the memory is really used.
        chunks.push(vec![1u8; 1 << 20]);
        std::hint::black_box(&chunks);
    }
}
