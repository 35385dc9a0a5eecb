//! Segments made ahead of need: a thread keeps the next segment written and
//! synced, so a commit that fills one moves on at once.

use std::io;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::{create_segment, LogConfig, Segment};

/// After a failure (a full disk), how long before the thread tries again
/// by itself; a commit that needs the segment tries at once.
const RETRY: Duration = Duration::from_secs(1);

pub(crate) struct Spares {
    dir: PathBuf,
    config: LogConfig,
    state: Mutex<State>,
    wake: Condvar,
}

struct State {
    next_seq: u64,
    /// Segments made since the open, which sets the next one's size.
    made: u32,
    ready: Option<Segment>,
    failed: bool,
    stop: bool,
}

impl Spares {
    /// Segments from `next_seq` on, in `dir`.
    pub(crate) fn new(dir: PathBuf, next_seq: u64, config: LogConfig) -> Spares {
        Spares {
            dir,
            config,
            state: Mutex::new(State {
                next_seq,
                made: 0,
                ready: None,
                failed: false,
                stop: false,
            }),
            wake: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next segment, with room for `needed` bytes: the one made ahead,
    /// or one made now.
    pub(crate) fn take(&self, needed: u64) -> io::Result<Segment> {
        let mut state = self.lock();
        let segment = match state.ready.take() {
            Some(spare) if spare.size >= needed => spare,
            Some(small) => {
                // A commit larger than the planned segment: remake it under
                // the same number, large enough.
                std::fs::remove_file(&small.path)?;
                state.next_seq = small.seq;
                self.make(&mut state, needed)?
            }
            None => self.make(&mut state, needed)?,
        };
        state.failed = false;
        self.wake.notify_all();
        Ok(segment)
    }

    fn make(&self, state: &mut State, needed: u64) -> io::Result<Segment> {
        let first = self.config.first_segment;
        let planned = first
            .checked_shl(state.made.min(32))
            .unwrap_or(u64::MAX)
            .min(self.config.max_segment)
            .max(first)
            .max(needed);
        let io = &*self.config.io;
        let made = match create_segment(&self.dir, state.next_seq, planned, io) {
            Err(_) if planned > needed.max(first) => {
                // A nearly full disk may still hold a small one.
                create_segment(&self.dir, state.next_seq, needed.max(first), io)
            }
            other => other,
        }?;
        state.next_seq += 1;
        state.made += 1;
        Ok(made)
    }

    /// The thread: keeps one segment ready until [`Spares::stop`].
    pub(crate) fn run(&self) {
        let mut state = self.lock();
        loop {
            if state.stop {
                if let Some(spare) = state.ready.take() {
                    let _ = std::fs::remove_file(&spare.path);
                }
                return;
            }
            if state.ready.is_none() && !state.failed {
                match self.make(&mut state, 0) {
                    Ok(spare) => state.ready = Some(spare),
                    Err(e) => {
                        tracing::warn!(dir = %self.dir.display(), error = %e, "cannot create the next log segment ahead of time; retrying");
                        state.failed = true;
                    }
                }
                continue;
            }
            if state.failed {
                state = self
                    .wake
                    .wait_timeout(state, RETRY)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                state.failed = false;
            } else {
                state = self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// Stops the thread, which removes the segment it had ready.
    pub(crate) fn stop(&self) {
        self.lock().stop = true;
        self.wake.notify_all();
    }
}
