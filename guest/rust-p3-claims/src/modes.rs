//! The four modes: each awaits the SDK's calls and prints what it saw.

use std::time::Duration;

use futures::future::join;
use lockd_guest::p3::{self, Hold, Lease};
use lockd_guest::{Error, HoldOptions, LeaseOptions, LockOptions, Mode};

use crate::{check, outcome, reason, sleep, until_waiting, TTL, WAIT};

/// A lease's locks, retry, rival, refresh, unlock, revoke; then
/// [`kept_alive`].
pub(crate) async fn lease(prefix: &str) {
    let (a, b) = (format!("{prefix}/a"), format!("{prefix}/b"));
    let lease = check("grant", Lease::grant(TTL, LeaseOptions::default()).await);
    let id = lease.id();
    println!("lease {id}");
    let token_a = check("lock a", lease.lock(&a, Duration::ZERO).await).fencing_token;
    let token_b = check("lock b", lease.lock(&b, Duration::ZERO).await).fencing_token;
    let again = check("lock a again", lease.lock(&a, Duration::ZERO).await);
    println!("locked {token_a} {token_b} again {}", again.fencing_token);

    let rival = p3::lock(&a, "rival", TTL, LockOptions::default()).await;
    let held_by_lease = matches!(&rival, Err(Error::Busy(holder)) if holder.owner == id);
    println!("rival {} held-by-lease {held_by_lease}", outcome(&rival));

    let before = lease.expires_at_ms();
    // The clock moves on, so a refresh must answer a later expiry.
    sleep(Duration::from_millis(20)).await;
    let after = check("refresh", lease.refresh().await);
    let a_expires = check("get a", p3::get(&a).await).map(|info| info.expires_at_ms);
    println!(
        "refreshed {before} {after} same {}",
        lease.expires_at_ms() == after && a_expires == Some(after)
    );

    check("unlock b", lease.unlock(&b).await);
    let b_held = check("get b", p3::get(&b).await).is_some();
    println!("b-held {b_held} alive {}", lease.is_alive().await);

    let lost = lease.lost();
    check("revoke", lease.revoke().await);
    println!("revoked {}", reason(lost.await));
    let taken = check(
        "rival after revoke",
        p3::lock(&a, "rival", TTL, LockOptions::default()).await,
    );
    println!("rival-took {}", taken.fencing_token);
    kept_alive(prefix).await;
}

/// Two leases of 300 ms, one kept alive by the host: 700 ms later the
/// other is lost as expired and the kept one still holds its lock.
async fn kept_alive(prefix: &str) {
    let short = Duration::from_millis(300);
    let (kept_name, plain_name) = (format!("{prefix}/kept"), format!("{prefix}/plain"));
    let options = LeaseOptions::default();
    let kept = check(
        "grant kept",
        Lease::grant(short, options.kept_alive()).await,
    );
    let plain = check("grant plain", Lease::grant(short, options).await);
    check("lock kept", kept.lock(&kept_name, Duration::ZERO).await);
    check("lock plain", plain.lock(&plain_name, Duration::ZERO).await);
    let plain_lost = reason(plain.lost().await);
    sleep(Duration::from_millis(400)).await;
    println!(
        "plain {plain_lost} alive {} lock-held {}",
        plain.is_alive().await,
        check("get plain", p3::get(&plain_name).await).is_some()
    );
    let holder = check("get kept", p3::get(&kept_name).await).map(|info| info.owner);
    println!(
        "kept alive {} lock-held {}",
        kept.is_alive().await,
        holder == Some(kept.id())
    );
}

/// Two readers, a writer busy then waiting, a late reader busy behind it,
/// the writer granted once both readers left.
pub(crate) async fn rwlock(prefix: &str) {
    let name = format!("{prefix}/rw");
    let now = LockOptions::default();
    let r1 = check("r1", p3::lock_shared(&name, "r1", TTL, now).await).fencing_token;
    let r2 = check("r2", p3::lock_shared(&name, "r2", TTL, now).await).fencing_token;
    let state = check("describe", p3::describe(&name).await);
    let shared = state.holders.iter().filter(|h| h.mode == Mode::Shared);
    println!("readers {r1} {r2} shared {}", shared.count());
    let writer_now = p3::lock(&name, "w", TTL, now).await;
    println!("writer-now {}", outcome(&writer_now));

    let writing = p3::lock(&name, "w", TTL, now.with_wait(WAIT));
    let freeing = async {
        until_waiting(&name).await;
        let late = p3::lock_shared(&name, "r3", TTL, now).await;
        check("unlock r1", p3::unlock(&name, "r1", Some(r1)).await);
        // r2 still reads: the writer must still wait.
        sleep(Duration::from_millis(50)).await;
        let waiters = check("describe", p3::describe(&name).await).waiters;
        check("unlock r2", p3::unlock(&name, "r2", Some(r2)).await);
        (outcome(&late), waiters)
    };
    let (written, (late, waiters)) = join(writing, freeing).await;
    println!("late-reader {late} waiters-with-one-reader {waiters}");
    println!("writer {}", check("writer", written).fencing_token);
}

/// A semaphore of 2: a third owner busy, another size refused, then the
/// third waiting and granted the permit the first gives back.
pub(crate) async fn semaphore(prefix: &str) {
    let name = format!("{prefix}/sem");
    let now = LockOptions::default();
    let x = check("x", p3::acquire_permit(&name, "x", 2, TTL, now).await).fencing_token;
    let y = check("y", p3::acquire_permit(&name, "y", 2, TTL, now).await).fencing_token;
    println!("permits {x} {y}");
    let third = p3::acquire_permit(&name, "z", 2, TTL, now).await;
    let resized = p3::acquire_permit(&name, "z", 3, TTL, now).await;
    println!(
        "third-now {} other-size {}",
        outcome(&third),
        outcome(&resized)
    );

    let waiting = p3::acquire_permit(&name, "z", 2, TTL, now.with_wait(WAIT));
    let freeing = async {
        until_waiting(&name).await;
        let holders = check("describe", p3::describe(&name).await).holders.len();
        check("unlock x", p3::unlock(&name, "x", Some(x)).await);
        holders
    };
    let (z, holders) = join(waiting, freeing).await;
    let z = check("z", z).fencing_token;
    println!("third {z} holders-while-waiting {holders}");
    let state = check("describe", p3::describe(&name).await);
    let permits = state.holders.iter().filter(|h| h.mode == Mode::Permit);
    let owners: Vec<&str> = permits.map(|h| h.info.owner.as_str()).collect();
    let size = state.permits.unwrap_or(0);
    println!("holders {} size {size}", owners.join(","));
}

/// Shared holds and an exclusive one waiting for them; then permits as
/// holds.
pub(crate) async fn hold(prefix: &str) {
    let name = format!("{prefix}/hold");
    let options = HoldOptions::default();
    let first = check("shared 1", Hold::shared(&name, TTL, options).await);
    let second = check("shared 2", Hold::shared(&name, TTL, options).await);
    println!(
        "shared {} {} distinct-owners {}",
        first.fencing_token(),
        second.fencing_token(),
        first.owner() != second.owner()
    );
    let exclusive_now = Hold::exclusive(&name, TTL, options).await;
    println!("exclusive-now {}", outcome(&exclusive_now));

    let writing = Hold::exclusive(&name, TTL, options.with_wait(WAIT));
    let name_ref = &name;
    let freeing = async move {
        until_waiting(name_ref).await;
        drop(first);
        check("release 2", second.release().await);
    };
    let (writer, ()) = join(writing, freeing).await;
    let writer = check("exclusive", writer);
    let token = writer.fencing_token();
    let extended = check("extend", writer.extend(TTL).await).fencing_token;
    println!(
        "writer {token} held {} extended {extended}",
        writer.is_held().await
    );
    let lost = writer.lost();
    check("release writer", writer.release().await);
    println!("writer-lost {}", reason(lost.await));
    permits(prefix).await;
}

/// A 1-permit hold kept alive, a second refused, and a waiting one granted
/// once the first is dropped.
async fn permits(prefix: &str) {
    let slots = format!("{prefix}/slots");
    let options = HoldOptions::default();
    let first = check(
        "permit",
        Hold::permit(&slots, 1, TTL, options.kept_alive()).await,
    );
    let second = Hold::permit(&slots, 1, TTL, options).await;
    println!(
        "permit {} second {}",
        first.fencing_token(),
        outcome(&second)
    );
    drop(first);
    let next = check(
        "permit after drop",
        Hold::permit(&slots, 1, TTL, options.with_wait(WAIT)).await,
    );
    println!("after-drop {}", next.fencing_token());
}
