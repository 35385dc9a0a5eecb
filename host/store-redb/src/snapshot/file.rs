//! The bytes of a snapshot file, format version 1. Little-endian, every
//! byte covered by a checksum:
//!
//! - **Header**, 52 bytes: `"lockd snapshot\n\0"` (16 bytes) | `u32`
//!   format version (1) | `u32` flags (0) | `u64` wall-clock time of the
//!   cut, Unix epoch microseconds | `u64` the engine's token ceiling at the
//!   cut | `u64` the token reservation at the cut | `u32` crc32 of the 48
//!   bytes before it.
//! - **Entries**, one per record: `u8` table (1 `locks`, 2 `leases`, 3
//!   `shares`) | `u32` key length | key | `u32` value length | value; keys
//!   and values in the encodings of the store's tables (`codec`, store
//!   format 1).
//! - **End**: `u8` 255 | `u64` number of entries | `u64` highest token in a
//!   record (0 if none) | `u32` crc32 of every byte of the file before it.
//!
//! A newer format version is told apart right after the magic, before the
//! header's checksum: a later header may be laid out otherwise.

use std::io::{self, Read, Write};

use super::RestoreError;

pub(crate) const MAGIC: &[u8; 16] = b"lockd snapshot\n\0";
/// The snapshot format this lockd writes, and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
const HEADER: usize = 52;
const END: u8 = 255;
/// No key or value of a store is near this long: a length above it is
/// damage, not a record.
const MAX_FIELD: u32 = 1 << 20;

/// The tables a snapshot holds, by their tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    Locks = 1,
    Leases = 2,
    Shares = 3,
}

/// What a snapshot's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) taken_at_us: u64,
    pub(crate) token_ceiling: u64,
    pub(crate) tokens_reserved: u64,
}

/// Writes a snapshot, checksumming as it goes.
pub(crate) struct Writer<W: Write> {
    out: W,
    crc: crc32fast::Hasher,
    bytes: u64,
    entries: u64,
}

impl<W: Write> Writer<W> {
    pub(crate) fn new(out: W, header: &Header) -> io::Result<Writer<W>> {
        let mut bytes = Vec::with_capacity(HEADER);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&header.taken_at_us.to_le_bytes());
        bytes.extend_from_slice(&header.token_ceiling.to_le_bytes());
        bytes.extend_from_slice(&header.tokens_reserved.to_le_bytes());
        let sum = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&sum.to_le_bytes());
        let mut writer = Writer {
            out,
            crc: crc32fast::Hasher::new(),
            bytes: 0,
            entries: 0,
        };
        writer.put(&bytes)?;
        Ok(writer)
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.crc.update(bytes);
        self.bytes += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    pub(crate) fn entry(&mut self, table: Table, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.put(&[table as u8])?;
        self.put(&(key.len() as u32).to_le_bytes())?;
        self.put(key)?;
        self.put(&(value.len() as u32).to_le_bytes())?;
        self.put(value)?;
        self.entries += 1;
        Ok(())
    }

    /// Writes the end and flushes; the bytes written.
    pub(crate) fn finish(mut self, highest_token: Option<u64>) -> io::Result<u64> {
        self.put(&[END])?;
        self.put(&self.entries.to_le_bytes())?;
        self.put(&highest_token.unwrap_or(0).to_le_bytes())?;
        let sum = self.crc.clone().finalize();
        self.out.write_all(&sum.to_le_bytes())?;
        self.out.flush()?;
        Ok(self.bytes + 4)
    }
}

/// Reads a snapshot back, checksumming as it goes. Every error names what
/// is wrong; the caller adds the file.
pub(crate) struct Reader<R: Read> {
    input: R,
    crc: crc32fast::Hasher,
    at: u64,
    entries: u64,
}

/// One entry read.
pub(crate) enum Entry {
    Record {
        table: Table,
        key: Vec<u8>,
        value: Vec<u8>,
        at: u64,
    },
    /// The end, checked: the file's checksum and its count of entries.
    End { highest_token: u64 },
}

impl<R: Read> Reader<R> {
    pub(crate) fn new(input: R) -> Reader<R> {
        Reader {
            input,
            crc: crc32fast::Hasher::new(),
            at: 0,
            entries: 0,
        }
    }

    /// Reads exactly `n` bytes; `what` names them if the file ends first.
    fn take(&mut self, n: usize, what: &str) -> Result<Vec<u8>, RestoreError> {
        let mut bytes = vec![0; n];
        let mut got = 0;
        while got < n {
            match self.input.read(&mut bytes[got..]) {
                Ok(0) => {
                    return Err(damaged(format!(
                        "file cut short: it ends at byte {}, inside {what}",
                        self.at + got as u64
                    )))
                }
                Ok(read) => got += read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RestoreError::io_reading(e)),
            }
        }
        self.crc.update(&bytes);
        self.at += n as u64;
        Ok(bytes)
    }

    /// Reads and checks the header.
    pub(crate) fn header(&mut self) -> Result<Header, RestoreError> {
        let mut magic = [0u8; 16];
        let mut got = 0;
        while got < magic.len() {
            match self.input.read(&mut magic[got..]) {
                Ok(0) => break,
                Ok(read) => got += read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RestoreError::io_reading(e)),
            }
        }
        if got == 0 {
            return Err(not_a_snapshot("it is empty (0 bytes)"));
        }
        if magic[..got] != MAGIC[..got] {
            return Err(not_a_snapshot(
                "it does not start as a lockd snapshot does: it is another program's file",
            ));
        }
        if got < magic.len() {
            return Err(damaged(format!(
                "file cut short: it is {got} bytes, inside its header"
            )));
        }
        self.crc.update(&magic);
        self.at = magic.len() as u64;
        let version = u32_of(&self.take(4, "its header")?);
        if version > FORMAT_VERSION && version <= 0xffff {
            return Err(RestoreError::NewerFormat {
                path: Default::default(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let rest = self.take(HEADER - 20, "its header")?;
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(&version.to_le_bytes());
        header.extend_from_slice(&rest[..28]);
        if crc32fast::hash(&header) != u32_of(&rest[28..]) || version != FORMAT_VERSION {
            return Err(damaged("its header fails its checksum".to_string()));
        }
        Ok(Header {
            taken_at_us: u64_of(&rest[4..12]),
            token_ceiling: u64_of(&rest[12..20]),
            tokens_reserved: u64_of(&rest[20..28]),
        })
    }

    /// The next entry, or the end (checked).
    pub(crate) fn next(&mut self) -> Result<Entry, RestoreError> {
        let at = self.at;
        let tag = self.take(1, "an entry")?[0];
        let table = match tag {
            1 => Table::Locks,
            2 => Table::Leases,
            3 => Table::Shares,
            END => return self.end(),
            other => {
                return Err(damaged(format!(
                    "the entry at byte {at} is of table {other}, which no lockd writes"
                )))
            }
        };
        let key = self.field(at, "key")?;
        let value = self.field(at, "value")?;
        self.entries += 1;
        Ok(Entry::Record {
            table,
            key,
            value,
            at,
        })
    }

    fn field(&mut self, entry: u64, what: &str) -> Result<Vec<u8>, RestoreError> {
        let len = u32_of(&self.take(4, "an entry")?);
        if len > MAX_FIELD {
            return Err(damaged(format!(
                "the entry at byte {entry} says its {what} is {len} bytes long, which no record is"
            )));
        }
        self.take(len as usize, "an entry")
    }

    fn end(&mut self) -> Result<Entry, RestoreError> {
        let end = self.take(16, "its end")?;
        let sum = self.crc.clone().finalize();
        let mut stored = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match self.input.read(&mut stored[got..]) {
                Ok(0) => {
                    return Err(damaged(format!(
                        "file cut short: it ends at byte {}, inside its checksum",
                        self.at + got as u64
                    )))
                }
                Ok(read) => got += read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RestoreError::io_reading(e)),
            }
        }
        if u32::from_le_bytes(stored) != sum {
            return Err(damaged(
                "it fails its checksum: some byte of it changed after it was written".to_string(),
            ));
        }
        let count = u64_of(&end[..8]);
        if count != self.entries {
            return Err(damaged(format!(
                "its end counts {count} records, and it holds {}",
                self.entries
            )));
        }
        let mut more = [0u8; 1];
        if matches!(self.input.read(&mut more), Ok(n) if n > 0) {
            return Err(damaged(format!(
                "bytes follow its end, at byte {}",
                self.at + 4
            )));
        }
        Ok(Entry::End {
            highest_token: u64_of(&end[8..]),
        })
    }
}

fn damaged(detail: String) -> RestoreError {
    RestoreError::Damaged {
        path: Default::default(),
        detail,
    }
}

fn not_a_snapshot(detail: &str) -> RestoreError {
    RestoreError::NotASnapshot {
        path: Default::default(),
        detail: detail.to_string(),
    }
}

fn u32_of(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..4].try_into().unwrap_or_default())
}

fn u64_of(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default())
}
