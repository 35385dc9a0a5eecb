//! The epoch clock every engine lockd creates runs on: one thread per engine
//! that advances its epoch every [`TICK`], so a store's deadline (counted in
//! ticks) bounds how long a guest may compute.

use std::time::Duration;

use anyhow::Context as _;
use wasmtime::Engine;

/// How often the epoch advances: the granularity of every guest time limit.
pub const TICK: Duration = Duration::from_millis(10);

/// Starts the thread that advances `engine`'s epoch. It holds only a weak
/// reference, so it ends by itself once the last clone of the engine is
/// dropped: no handle to keep, nothing to stop.
pub fn start_ticker(engine: &Engine) -> anyhow::Result<()> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("lockd-epoch".to_string())
        .spawn(move || loop {
            std::thread::sleep(TICK);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
        })
        .context("starting the epoch thread")?;
    Ok(())
}

/// The epoch deadline, in ticks, for a guest allowed to run `limit`: at
/// least one tick, and saturating rather than wrapping for huge limits.
pub fn deadline_ticks(limit: Duration) -> u64 {
    let ticks = limit.as_millis() / TICK.as_millis();
    u64::try_from(ticks)
        .unwrap_or(u64::MAX / 2)
        .clamp(1, u64::MAX / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_down_to_ticks_but_never_to_zero() {
        assert_eq!(deadline_ticks(Duration::ZERO), 1);
        assert_eq!(deadline_ticks(Duration::from_millis(9)), 1);
        assert_eq!(deadline_ticks(Duration::from_millis(30_000)), 3_000);
        assert_eq!(deadline_ticks(Duration::MAX), u64::MAX / 2);
    }
}
