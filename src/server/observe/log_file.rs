//! Where the decision log's lines go, written so that what the log kept is
//! never lost to a full disk, a file-size limit or a path that is not a
//! file:
//!
//! - lines are buffered whole and written in batches; a batch that fails
//!   part way is cut back to its last whole line (the file is truncated to
//!   it), so a reader never meets half a line in the middle of the log;
//! - the size that triggers a rotation counts only bytes that reached the
//!   file, and only a batch written in full can trigger one: while the disk
//!   is full nothing already on it is renamed or deleted;
//! - a path that is not a regular file (a FIFO, `/dev/stdout`, a character
//!   device, a symlink to one) is written to but never rotated;
//! - lines written and lines dropped are counted apart, the drops by why.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};

/// Bytes buffered before a batch is written (whatever the queue holds).
pub const BATCH_BYTES: usize = 64 * 1024;

/// Milliseconds a batch waits, at most, for a full pipe to drain.
const PIPE_PATIENCE: u32 = 1000;

/// Where the lines go.
enum Target {
    Stderr,
    File(File),
}

/// The log's destination and the whole lines waiting for it.
pub struct LogFile {
    target: Target,
    path: Option<PathBuf>,
    /// Whether the path is a regular file, the only kind ever rotated.
    rotatable: bool,
    /// Bytes in the file: its length when opened plus what reached it.
    size: u64,
    buf: Vec<u8>,
    buffered: u64,
    /// The rotation moved the file away but the fresh one did not open:
    /// lines go on to the moved file until it does.
    reopen: bool,
}

/// What one batch came to.
#[derive(Debug, Default)]
pub struct Written {
    /// Lines that reached the destination whole.
    pub lines: u64,
    /// Lines that did not, and why (`disk_full`, `file_too_large`, `reader_stalled`, `write_error`).
    pub dropped: Option<(u64, &'static str, std::io::Error)>,
    /// A line cut short that could not be truncated away.
    pub torn: Option<std::io::Error>,
}

impl LogFile {
    /// Standard error.
    pub fn stderr() -> LogFile {
        LogFile::with(Target::Stderr, None, false, 0)
    }

    /// Opens (creating) `path` for appending, without waiting on a FIFO
    /// that has no reader (that is an error, `ENXIO`, not a hang).
    pub fn open(path: &Path) -> std::io::Result<LogFile> {
        let (file, rotatable, size) = open_append(path)?;
        Ok(LogFile::with(
            Target::File(file),
            Some(path.to_owned()),
            rotatable,
            size,
        ))
    }

    fn with(target: Target, path: Option<PathBuf>, rotatable: bool, size: u64) -> LogFile {
        LogFile {
            target,
            path,
            rotatable,
            size,
            buf: Vec::with_capacity(BATCH_BYTES + 4096),
            buffered: 0,
            reopen: false,
        }
    }

    /// Adds one whole line (with its newline); true when the batch should
    /// be written now: it is full, or it takes a rotatable file to
    /// `max_bytes` (so files rotate near their size, not a batch past it).
    pub fn push(&mut self, line: &[u8], max_bytes: u64) -> bool {
        self.buf.extend_from_slice(line);
        self.buffered += 1;
        self.buf.len() >= BATCH_BYTES || (self.rotatable && self.size + self.buf.len() as u64 >= max_bytes)
    }

    /// Whether a rotation is due: the file is regular and what reached it
    /// is at least `max_bytes`.
    pub fn rotation_due(&self, max_bytes: u64) -> bool {
        self.rotatable && self.size >= max_bytes
    }

    /// Writes the buffered lines. On a failure the lines that reached the
    /// file whole are kept, a line cut short is truncated away, and the
    /// rest are dropped (counted by the caller).
    pub fn write_batch(&mut self) -> Written {
        let mut out = Written::default();
        if self.buf.is_empty() {
            return out;
        }
        if self.reopen {
            self.try_reopen();
        }
        let mut done = 0;
        let mut failed = None;
        let mut waited = 0;
        while done < self.buf.len() {
            let result = match &mut self.target {
                Target::Stderr => std::io::stderr().write(&self.buf[done..]),
                Target::File(f) => f.write(&self.buf[done..]),
            };
            match result {
                Ok(0) => {
                    failed = Some(std::io::Error::from(ErrorKind::WriteZero));
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // A FIFO or pipe whose reader is slow: wait for it, a
                // little (this is the log's own thread, not a call's).
                Err(e) if e.kind() == ErrorKind::WouldBlock && waited < PIPE_PATIENCE => {
                    waited += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let whole = self.buf[..done].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        out.lines = self.buf[..whole].iter().filter(|&&b| b == b'\n').count() as u64;
        self.size += whole as u64;
        if let Some(e) = failed {
            if done > whole {
                out.torn = self.cut_back((done - whole) as u64).err();
            }
            out.dropped = Some((self.buffered - out.lines, reason(&e), e));
        }
        self.buf.clear();
        self.buffered = 0;
        out
    }

    /// Truncates the `torn` bytes of a line cut short off the file's end.
    fn cut_back(&mut self, torn: u64) -> std::io::Result<()> {
        match &self.target {
            Target::File(f) if self.rotatable => {
                let len = f.metadata()?.len();
                f.set_len(len.saturating_sub(torn))
            }
            _ => Err(std::io::Error::other(
                "not a regular file: a line cut short cannot be taken back",
            )),
        }
    }

    /// `PATH` → `PATH.1` → … → `PATH.keep` (the oldest removed), then a
    /// fresh `PATH`. Only after a batch was written in full: never on a
    /// failing disk.
    pub fn rotate(&mut self, keep: u32) -> std::io::Result<()> {
        let Some(path) = self.path.clone() else {
            return Ok(());
        };
        rotate(&path, keep)?;
        match open_append(&path) {
            Ok((file, rotatable, size)) => {
                self.target = Target::File(file);
                (self.rotatable, self.size) = (rotatable, size);
                Ok(())
            }
            Err(e) => {
                // The moved file takes the lines until a fresh one opens;
                // it is not rotated again meanwhile.
                self.reopen = true;
                self.rotatable = false;
                Err(e)
            }
        }
    }

    fn try_reopen(&mut self) {
        if let Some(path) = &self.path {
            if let Ok((file, rotatable, size)) = open_append(path) {
                self.target = Target::File(file);
                (self.rotatable, self.size, self.reopen) = (rotatable, size, false);
            }
        }
    }
}

/// The `reason` label of lines dropped by a failed write.
fn reason(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => "disk_full",
        Some(libc::EFBIG) => "file_too_large",
        Some(libc::EAGAIN) => "reader_stalled",
        _ => "write_error",
    }
}

/// Opens `path` for appending, non-blocking (a FIFO without a reader is
/// refused at once; a pipe that is full answers `WouldBlock`, waited out in
/// [`LogFile::write_batch`]). Returns the file, whether it is a regular
/// file, and its length.
fn open_append(path: &Path) -> std::io::Result<(File, bool, u64)> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    Ok((file, meta.is_file(), if meta.is_file() { meta.len() } else { 0 }))
}

/// `PATH.{keep-1}` → `PATH.{keep}`, …, `PATH` → `PATH.1` (with `keep` 0 the file is removed).
fn rotate(path: &Path, keep: u32) -> std::io::Result<()> {
    let numbered = |n: u32| {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    };
    // The path itself is checked again: only a regular file is moved.
    if !std::fs::symlink_metadata(path)?.is_file() {
        return Err(std::io::Error::other("not a regular file: not rotated"));
    }
    if keep == 0 {
        return std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(numbered(keep));
    for n in (1..keep).rev() {
        let from = numbered(n);
        if from.exists() {
            std::fs::rename(&from, numbered(n + 1))?;
        }
    }
    std::fs::rename(path, numbered(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("retryd-logfile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn a_full_device_drops_counts_and_never_rotates_what_was_kept() {
        let dir = temp("full");
        let path = dir.join("dlog");
        std::os::unix::fs::symlink("/dev/full", &path).expect("symlink");
        std::fs::write(dir.join("dlog.1"), "PRECIOUS\n").expect("kept");
        let mut log = LogFile::open(&path).expect("open");
        for _ in 0..10 {
            log.push(b"{\"a\":1}\n", u64::MAX);
        }
        let w = log.write_batch();
        assert_eq!(w.lines, 0);
        let (n, why, _) = w.dropped.expect("dropped");
        assert_eq!((n, why), (10, "disk_full"));
        assert!(!log.rotation_due(1), "a device is never rotated");
        assert_eq!(std::fs::read_to_string(dir.join("dlog.1")).expect("kept"), "PRECIOUS\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_regular_file_rotates_on_bytes_that_reached_it() {
        let dir = temp("rotate");
        let path = dir.join("dlog");
        let mut log = LogFile::open(&path).expect("open");
        log.push(b"0123456789\n", u64::MAX);
        assert!(!log.rotation_due(5), "nothing reached the file yet");
        assert_eq!(log.write_batch().lines, 1);
        assert!(log.rotation_due(5));
        log.rotate(2).expect("rotate");
        assert!(!log.rotation_due(5));
        assert_eq!(
            std::fs::read_to_string(dir.join("dlog.1")).expect("moved"),
            "0123456789\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
