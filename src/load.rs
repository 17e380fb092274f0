//! Loading policies from disk: the embedded catalogs, then operators' TOML
//! files on top. A user catalog with a new name adds a catalog; one with an
//! existing embedded name replaces that catalog as a whole (no per-field
//! merging); two user files may not declare the same name.
//!
//! Catalog files must be regular files (after following symlinks) of at most
//! [`DEFAULT_MAX_POLICY_BYTES`] (or the configured limit). A file is opened
//! without blocking and checked on the open descriptor, so a FIFO, a device
//! such as `/dev/zero` or a file swapped between the check and the read is
//! an error of that path — never a hang, an endless read, or a catalog that
//! silently disappears.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::core::policy::EMBEDDED;
use crate::core::{Policy, PolicyError};

/// Default of `--max-policy-bytes`: the largest catalog file read (16 MiB;
/// the embedded catalogs are about 20 KiB each).
pub const DEFAULT_MAX_POLICY_BYTES: u64 = 16 * 1024 * 1024;

/// Why a policy could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A path could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Several paths could not be read.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Many(Vec<LoadError>),
    /// The catalogs are invalid or the default is missing.
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

impl LoadError {
    /// Every error as its own line (`file:line: key: message` for catalog
    /// errors, `path: problem` for files that could not be read).
    pub fn lines(&self) -> Vec<String> {
        match self {
            LoadError::Many(errors) => errors.iter().flat_map(LoadError::lines).collect(),
            LoadError::Policy(PolicyError::Invalid(errors)) => errors.iter().map(ToString::to_string).collect(),
            other => vec![other.to_string()],
        }
    }
}

fn io_error(path: &Path, source: std::io::Error) -> LoadError {
    LoadError::Io {
        path: display(path),
        source,
    }
}

/// The `.toml` files `paths` name: files as given, directories' `.toml`
/// entries sorted by name (not recursive; hidden entries such as Kubernetes'
/// `..data` are skipped, and so are policy test tables, `*.test.toml`). Entries are listed whatever they are: one that is
/// not a regular file is an error when it is read, not skipped.
pub fn catalog_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
        if meta.is_dir() {
            let mut found = Vec::new();
            for entry in std::fs::read_dir(path).map_err(|e| io_error(path, e))? {
                let p = entry.map_err(|e| io_error(path, e))?.path();
                let visible = p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| !n.starts_with('.'));
                if visible && p.extension().is_some_and(|x| x == "toml") && !is_test_file(&p) {
                    found.push(p);
                }
            }
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

/// A policy test table (`<name>.test.toml`): it sits beside the catalogs
/// but is not one (`retryd policy test` and `policy check` read it).
pub fn is_test_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".test.toml"))
}

/// The directories among `paths` that hold no `.toml` file.
pub fn empty_dirs(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| p.is_dir() && catalog_files(std::slice::from_ref(*p)).is_ok_and(|f| f.is_empty()))
        .cloned()
        .collect()
}

/// The most bytes read from a token or key file (`--operator-token-file`,
/// `--tenant-hash-key-file`, `--decision-log-key-file`, `retryd holds
/// --token-file`): a secret is tens of bytes; 4 KiB leaves room for a PEM
/// wrapping or comments without reading a mistaken path's gigabytes.
pub const MAX_SECRET_FILE_BYTES: u64 = 4 * 1024;

/// The most bytes read from a TLS file (`--tls-cert`, `--tls-key`,
/// `--tls-client-ca`, `retryd health --tls-*`): a chain or a CA bundle is
/// tens to a few hundred KiB (the Mozilla bundle is about 220 KiB).
pub const MAX_TLS_FILE_BYTES: u64 = 1024 * 1024;

/// Reads one catalog file: a regular file (symlinks followed) of at most
/// `max_bytes`, in UTF-8. Never blocks: the open is non-blocking (a FIFO
/// without a writer opens at once and is then refused) and the read is
/// bounded.
pub fn read_file(path: &Path, max_bytes: u64) -> Result<String, LoadError> {
    let bytes = read_regular(path, max_bytes, "--max-policy-bytes")?;
    String::from_utf8(bytes).map_err(|e| io_error(path, std::io::Error::other(format!("not UTF-8 text ({e})"))))
}

/// Reads any file retryd is given at start or on reload as a catalog file
/// is read: symlinks followed (Kubernetes mounts Secrets and ConfigMaps
/// through them) to a regular file of at most `max_bytes`, opened
/// non-blocking and checked on the open descriptor, so a FIFO, a device, a
/// socket or a directory is an error naming the path — never a hang or an
/// endless read — and a dangling link is the open's "No such file". `limit`
/// names where the bound comes from, for the error.
pub fn read_regular(path: &Path, max_bytes: u64, limit: &str) -> Result<Vec<u8>, LoadError> {
    let fail = |message: String| io_error(path, std::io::Error::other(message));
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(|e| io_error(path, e))?;
    // Checked on the descriptor opened, not the path: nothing can be
    // swapped in between.
    let meta = file.metadata().map_err(|e| io_error(path, e))?;
    if !meta.is_file() {
        return Err(fail(format!(
            "not a regular file ({}); it must be a regular file",
            kind(&meta)
        )));
    }
    if meta.len() > max_bytes {
        return Err(fail(format!(
            "{} bytes, over the limit of {max_bytes} ({limit})",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(path, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(fail(format!("over the limit of {max_bytes} bytes ({limit})")));
    }
    Ok(bytes)
}

/// Reads a token or key file ([`read_regular`], at most
/// [`MAX_SECRET_FILE_BYTES`]): its surrounding whitespace, such as the
/// newline `echo` or an editor leaves, is not part of the secret.
pub fn read_secret(path: &Path) -> Result<Vec<u8>, LoadError> {
    let bytes = read_regular(path, MAX_SECRET_FILE_BYTES, "a token or key file is at most 4 KiB")?;
    Ok(bytes.trim_ascii().to_vec())
}

fn kind(meta: &std::fs::Metadata) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() || t.is_block_device() {
            return "a device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if meta.is_dir() { "a directory" } else { "not a file" }
}

/// Reads every file, keeping its display name for error messages; every
/// file that cannot be read is reported, not only the first.
pub fn read_files(files: &[PathBuf], max_bytes: u64) -> Result<Vec<(String, String)>, LoadError> {
    let mut texts = Vec::with_capacity(files.len());
    let mut errors = Vec::new();
    for f in files {
        match read_file(f, max_bytes) {
            Ok(text) => texts.push((display(f), text)),
            Err(e) => errors.push(e),
        }
    }
    match errors.len() {
        0 => Ok(texts),
        1 => Err(errors.remove(0)),
        _ => Err(LoadError::Many(errors)),
    }
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

/// The embedded catalogs plus the catalogs in `paths`, with `default_catalog`.
pub fn load_policy(paths: &[PathBuf], default_catalog: &str) -> Result<Policy, LoadError> {
    load_policy_limited(paths, default_catalog, DEFAULT_MAX_POLICY_BYTES)
}

/// [`load_policy`] with a limit on the size of each file.
pub fn load_policy_limited(paths: &[PathBuf], default_catalog: &str, max_bytes: u64) -> Result<Policy, LoadError> {
    let user = read_files(&catalog_files(paths)?, max_bytes)?;
    let sources = EMBEDDED
        .iter()
        .copied()
        .chain(user.iter().map(|(f, t)| (f.as_str(), t.as_str())));
    Ok(Policy::from_sources(sources, default_catalog)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("retryd-load-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_user_catalog_replaces_one_of_the_same_name_whole_and_adds_new_ones() {
        let dir = temp_dir("replace");
        let vibecode = EMBEDDED[0].1.replace("max_attempts = 5", "max_attempts = 2");
        std::fs::write(dir.join("vibecode.toml"), &vibecode).unwrap();
        std::fs::write(
            dir.join("mine.toml"),
            vibecode.replace("name = \"vibecode\"", "name = \"mine\""),
        )
        .unwrap();
        std::fs::write(dir.join(".hidden.toml"), "not toml at all").unwrap();
        let p = load_policy(std::slice::from_ref(&dir), "vibecode").unwrap();
        assert_eq!(p.catalog("vibecode").unwrap().max_attempts, 2);
        assert_eq!(p.catalog("mine").unwrap().max_attempts, 2);
        assert_eq!(p.catalogs().len(), EMBEDDED.len() + 1);
        assert_ne!(p.version(), Policy::embedded().unwrap().version());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_path() {
        let err = load_policy(&[PathBuf::from("/nonexistent/policy.toml")], "vibecode").unwrap_err();
        assert!(err.to_string().starts_with("/nonexistent/policy.toml: "), "{err}");
        let dir = temp_dir("broken");
        std::fs::write(dir.join("broken.toml"), "name = 1\n").unwrap();
        let err = load_policy(std::slice::from_ref(&dir), "vibecode").unwrap_err();
        assert!(err.to_string().contains("broken.toml:1"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Runs `f` on a thread and fails the test if it takes over 10 s (a
    /// loader that blocks on a FIFO must fail the test, not hang the suite).
    fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the policy loader blocked")
    }

    fn mkfifo(path: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkfifo {}", path.display());
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_entry_that_is_not_a_regular_file_is_an_error_of_its_path_not_a_missing_catalog() {
        let dir = temp_dir("special");
        std::fs::write(
            dir.join("mine.toml"),
            EMBEDDED[0].1.replace("name = \"vibecode\"", "name = \"mine\""),
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero.toml")).unwrap();
        let d = dir.clone();
        let err = within_10s(move || load_policy(&[d], "vibecode")).unwrap_err();
        let lines = err.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("zero.toml: not a regular file (a device)"),
            "{lines:?}"
        );

        std::fs::remove_file(dir.join("zero.toml")).unwrap();
        mkfifo(&dir.join("fifo.toml"));
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling.toml")).unwrap();
        let d = dir.clone();
        let err = within_10s(move || load_policy(&[d], "vibecode")).unwrap_err();
        let lines = err.lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("dangling.toml: "), "{lines:?}");
        assert!(lines[1].contains("fifo.toml: not a regular file (a FIFO)"), "{lines:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_policy_file_that_is_a_fifo_or_a_device_is_refused_at_once() {
        let dir = temp_dir("fifo-file");
        mkfifo(&dir.join("fifo"));
        std::os::unix::fs::symlink(dir.join("fifo"), dir.join("policy.toml")).unwrap();
        let file = dir.join("policy.toml");
        let err = within_10s(move || load_policy(&[file], "vibecode")).unwrap_err();
        assert!(
            err.to_string().contains("policy.toml: not a regular file (a FIFO)"),
            "{err}"
        );
        let err = within_10s(|| load_policy(&[PathBuf::from("/dev/zero")], "vibecode")).unwrap_err();
        assert!(err.to_string().contains("/dev/zero: not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_policy_file_over_the_size_limit_is_refused() {
        let dir = temp_dir("big");
        let text = EMBEDDED[0].1.replace("name = \"vibecode\"", "name = \"mine\"");
        std::fs::write(dir.join("mine.toml"), &text).unwrap();
        let paths = std::slice::from_ref(&dir);
        assert!(load_policy_limited(paths, "vibecode", text.len() as u64).is_ok());
        let err = load_policy_limited(paths, "vibecode", text.len() as u64 - 1).unwrap_err();
        assert!(err.to_string().contains("over the limit"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_user_files_may_not_declare_one_catalog_name() {
        let dir = temp_dir("dup");
        let mine = EMBEDDED[0].1.replace("name = \"vibecode\"", "name = \"mine\"");
        std::fs::write(dir.join("a.toml"), &mine).unwrap();
        std::fs::write(dir.join("b.toml"), &mine).unwrap();
        let err = load_policy(std::slice::from_ref(&dir), "vibecode").unwrap_err();
        let lines = err.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("b.toml:"), "{lines:?}");
        assert!(
            lines[0].contains("name: catalog \"mine\" is already declared in"),
            "{lines:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
