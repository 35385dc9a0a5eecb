//! `check` on real damage: each is a clear finding naming the file, the
//! same words an open refuses the store with, and nothing is modified.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lockd_core::{Claim, Journal as _, JournalOp, Key, LeaseRecord, Record};

use super::{layout, scratch, segments};
use crate::log::format::{crc, parse_segment_header, FRAME_HEADER, RECORD_HEADER};
use crate::log::LogConfig;
use crate::{check, Damage, OpenError, RedbJournal};

fn record(token: u64) -> Record {
    Record {
        value: None,
        claim: Claim::Exclusive,
        owner: format!("owner-{token:04}"),
        token,
        expires_at_ms: 1 << 50,
    }
}

/// Locks, a lease and a share, each op its own commit.
fn ops() -> Vec<JournalOp> {
    let key = |name: &str| Key::new("ns", name);
    let mut ops = vec![JournalOp::ReserveTokens { up_to: 100 }];
    ops.extend((1..=12).map(|i| JournalOp::Put(key(&format!("k{i}")), record(i))));
    ops.push(JournalOp::PutLease(
        key("lease"),
        LeaseRecord {
            ttl_ms: 1_000,
            expires_at_ms: 1 << 50,
        },
    ));
    ops.push(JournalOp::PutShare(
        key("read"),
        Record {
            claim: Claim::Shared,
            owner: "reader".to_string(),
            ..record(13)
        },
    ));
    ops
}

/// A store written with `ops`; with `keep_log`, its log is left as it is
/// (not checkpointed), else the store file alone holds everything.
fn store_with(keep_log: bool) -> (tempfile::TempDir, PathBuf) {
    let dir = scratch();
    let path = dir.path().join("locks.redb");
    let config = LogConfig {
        checkpoints: !keep_log,
        ..LogConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (journal, _) = RedbJournal::open_configured(&path, config).unwrap();
    for op in ops() {
        runtime.block_on(journal.submit(op).wait()).unwrap();
    }
    drop(journal);
    (dir, path)
}

/// Every file of the store (the file and its log), byte for byte.
fn files(store: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    if store.is_file() {
        files.insert(store.to_path_buf(), std::fs::read(store).unwrap());
    }
    if let Ok(entries) = std::fs::read_dir(crate::log::dir_of(store)) {
        for entry in entries {
            let path = entry.unwrap().path();
            files.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    files
}

/// Checks `store`, asserting that nothing of it changed, and that an open
/// refuses it with the check's first finding, word for word. Returns the
/// report.
fn check_and_open(store: &Path) -> crate::CheckReport {
    let before = files(store);
    let report = check(store).unwrap();
    assert!(files(store) == before, "check changed {}", store.display());
    assert!(!report.is_intact(), "{report}");
    let finding = report.findings[0].to_string();
    let err = RedbJournal::open(store).unwrap_err();
    assert!(
        err.to_string().contains(&finding),
        "open: {err}\ncheck: {finding}"
    );
    report
}

#[test]
fn an_intact_store_is_reported_intact_and_unchanged() {
    for keep_log in [false, true] {
        let (_dir, store) = store_with(keep_log);
        let before = files(&store);
        let report = check(&store).unwrap();
        assert!(files(&store) == before, "check changed the store");
        assert!(report.is_intact(), "{report}");
        assert_eq!(
            (report.locks, report.shares, report.leases),
            (12, 1, 1),
            "{report}"
        );
        assert_eq!(report.format_version, Some(1));
        assert_eq!(report.tokens_reserved, 100);
        assert_eq!(report.highest_token, Some(13));
        assert_eq!(report.segments > 0, keep_log, "{report}");
        assert!(report.to_string().contains(": intact"), "{report}");
    }
}

#[test]
fn a_store_file_cut_short() {
    let (_dir, store) = store_with(false);
    let len = std::fs::metadata(&store).unwrap().len();
    for cut in [len - 4096, 100] {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&store)
            .unwrap();
        file.set_len(cut).unwrap();
        let report = check_and_open(&store);
        let finding = &report.findings[0];
        assert_eq!(finding.damage, Damage::CutShort, "{report}");
        assert_eq!(finding.file, store);
        assert!(finding.detail.contains("cut short"), "{finding}");
    }
}

#[test]
fn a_flipped_byte_in_a_log_record() {
    let (_dir, store) = store_with(true);
    let segment = segments(&store)[0].clone();
    let frame = layout(&segment).frames[3];
    let record = frame + FRAME_HEADER;
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[record + RECORD_HEADER + 3] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let report = check_and_open(&store);
    let finding = &report.findings[0];
    assert_eq!(
        (finding.damage, &finding.file),
        (Damage::Checksum, &segment)
    );
    assert!(
        finding
            .detail
            .starts_with(&format!("the record at byte {record} fails its checksum")),
        "{finding}"
    );
}

#[test]
fn a_log_record_that_does_not_decode() {
    let (_dir, store) = store_with(true);
    let segment = segments(&store)[0].clone();
    let mut bytes = std::fs::read(&segment).unwrap();
    let (salt, _) = parse_segment_header(&bytes).unwrap();
    let record = layout(&segment).frames[2] + FRAME_HEADER;
    // Op 99 does not exist; the record's checksum is made to match.
    let len = u32::from_le_bytes(bytes[record..record + 4].try_into().unwrap()) as usize;
    let payload = record + RECORD_HEADER;
    bytes[payload] = 99;
    let sum = crc(
        salt,
        &[&bytes[record..record + 4], &bytes[payload..payload + len]],
    );
    bytes[record + 4..record + 8].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&segment, &bytes).unwrap();
    let report = check_and_open(&store);
    let finding = &report.findings[0];
    assert_eq!(
        (finding.damage, &finding.file),
        (Damage::Undecodable, &segment)
    );
    assert!(finding.detail.contains("unknown op 99"), "{finding}");
}

#[test]
fn a_table_record_that_does_not_decode() {
    let (_dir, store) = store_with(false);
    {
        let db = redb::Database::create(&store).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(crate::codec::LOCKS)
            .unwrap()
            .insert(
                &crate::codec::encode_key(&Key::new("ns", "k3"))[..],
                &[9u8; 20][..],
            )
            .unwrap();
        txn.commit().unwrap();
    }
    let report = check_and_open(&store);
    let finding = &report.findings[0];
    assert_eq!(
        (finding.damage, &finding.file),
        (Damage::Undecodable, &store)
    );
    assert!(finding.detail.contains("\"k3\""), "{finding}");
    assert_eq!(report.locks, 11, "the others are read: {report}");
}

#[test]
fn a_flipped_byte_in_the_store_file() {
    let (_dir, store) = store_with(false);
    let mut bytes = std::fs::read(&store).unwrap();
    let at = bytes
        .windows(10)
        .position(|w| w == b"owner-0007")
        .expect("a lock's owner in the file");
    bytes[at + 3] ^= 0x01;
    std::fs::write(&store, &bytes).unwrap();
    // redb reads pages without checking them: only its integrity check,
    // which check and open both run, sees the damage.
    let report = check_and_open(&store);
    assert_eq!(report.findings[0].damage, Damage::Checksum, "{report}");
    assert_eq!(report.findings[0].file, store);
    // The refused open changed no record: at most redb's header flags
    // (it marks a file it opened as needing its allocator state rebuilt).
    let after = std::fs::read(&store).unwrap();
    assert_eq!(after.len(), bytes.len());
    let changed: Vec<usize> = (0..after.len()).filter(|&i| after[i] != bytes[i]).collect();
    assert!(
        changed.iter().all(|&i| i < 64),
        "open changed bytes {changed:?}"
    );
}

#[test]
fn a_newer_format_version() {
    // The store file's.
    let (_dir, store) = store_with(false);
    {
        let db = redb::Database::create(&store).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(crate::codec::META)
            .unwrap()
            .insert(crate::codec::FORMAT_VERSION, 3)
            .unwrap();
        txn.commit().unwrap();
    }
    let before = files(&store);
    let report = check(&store).unwrap();
    assert!(files(&store) == before);
    let newer = Damage::NewerFormat {
        found: 3,
        supported: 1,
    };
    assert_eq!(report.findings.len(), 1, "{report}");
    assert_eq!(
        (report.findings[0].damage, &report.findings[0].file),
        (newer, &store)
    );
    let message = "has format version 3; this lockd reads up to 1";
    assert!(report.to_string().contains(message), "{report}");
    let err = RedbJournal::open(&store).unwrap_err();
    assert!(matches!(err, OpenError::NewerFormat { .. }), "{err:?}");
    assert!(err.to_string().contains(message), "{err}");
    assert!(files(&store) == before);

    // A log segment's.
    let (_dir, store) = store_with(true);
    let segment = segments(&store)[0].clone();
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    let sum = crc(0, &[&bytes[..28]]);
    bytes[28..32].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&segment, &bytes).unwrap();
    let report = check_and_open(&store);
    assert_eq!(
        (report.findings[0].damage, &report.findings[0].file),
        (newer, &segment)
    );
    let err = RedbJournal::open(&store).unwrap_err();
    assert!(matches!(err, OpenError::NewerFormat { .. }), "{err:?}");
}

#[test]
fn not_a_store_file() {
    let dir = scratch();
    // A directory.
    let report = check(dir.path()).unwrap();
    assert_eq!(report.findings[0].damage, Damage::NotAStore);
    assert!(
        report.findings[0].detail.contains("a directory"),
        "{report}"
    );
    let err = RedbJournal::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("a directory"), "{err}");
    // An empty file.
    let empty = dir.path().join("empty.redb");
    std::fs::write(&empty, b"").unwrap();
    let report = check_and_open(&empty);
    assert_eq!(report.findings[0].damage, Damage::NotAStore);
    assert!(report.findings[0].detail.contains("empty"), "{report}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    // Another program's file.
    let other = dir.path().join("other.redb");
    std::fs::write(&other, vec![0x5a; 64 << 10]).unwrap();
    let report = check_and_open(&other);
    assert!(
        report.findings[0].detail.contains("not a lock store"),
        "{report}"
    );
    // Nothing there.
    let report = check(dir.path().join("missing.redb")).unwrap();
    assert_eq!(report.findings[0].damage, Damage::NotAStore);
    assert!(!dir.path().join("missing.redb").exists());
}

#[test]
fn a_store_in_use_is_not_checked() {
    let (_dir, store) = store_with(false);
    let (journal, _) = RedbJournal::open(&store).unwrap();
    let err = check(&store).unwrap_err();
    assert!(matches!(err, crate::CheckError::InUse { .. }), "{err:?}");
    assert!(err.to_string().contains("in use"), "{err}");
    drop(journal);
}
