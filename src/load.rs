//! Loading policies from disk: the embedded catalogs, then operators' TOML
//! files on top. A user catalog with a new name adds a catalog; one with an
//! existing name replaces that catalog as a whole (no per-field merging).

use std::path::{Path, PathBuf};

use crate::core::policy::EMBEDDED;
use crate::core::{Policy, PolicyError};

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
    /// The catalogs are invalid or the default is missing.
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

/// The `.toml` files `paths` name: files as given, directories' `.toml`
/// files sorted by name (not recursive; hidden entries such as Kubernetes'
/// `..data` are skipped).
pub fn catalog_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    for path in paths {
        let io = |source| LoadError::Io {
            path: path.display().to_string(),
            source,
        };
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(io)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    let visible = p
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| !n.starts_with('.'));
                    visible && p.extension().is_some_and(|x| x == "toml") && p.is_file()
                })
                .collect();
            found.sort();
            out.extend(found);
        } else {
            std::fs::metadata(path).map_err(io)?;
            out.push(path.clone());
        }
    }
    Ok(out)
}

/// Reads every file, keeping its display name for error messages.
pub fn read_files(files: &[PathBuf]) -> Result<Vec<(String, String)>, LoadError> {
    files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .map(|text| (display(f), text))
                .map_err(|source| LoadError::Io {
                    path: display(f),
                    source,
                })
        })
        .collect()
}

fn display(p: &Path) -> String {
    p.display().to_string()
}

/// The embedded catalogs plus the catalogs in `paths`, with `default_catalog`.
pub fn load_policy(paths: &[PathBuf], default_catalog: &str) -> Result<Policy, LoadError> {
    let user = read_files(&catalog_files(paths)?)?;
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
}
