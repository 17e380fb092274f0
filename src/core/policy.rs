//! A policy: the set of catalogs in force, the default catalog, and a
//! content hash that every decision reports as `policy_version`.

use sha2::{Digest, Sha256};

use super::catalog::{Catalog, CatalogError, compile_catalog, line_of_key};

/// The catalogs compiled into the binary: `(file name, TOML text)`.
pub const EMBEDDED: &[(&str, &str)] = &[
    ("policies/vibecode.toml", include_str!("../../policies/vibecode.toml")),
    ("policies/asc.toml", include_str!("../../policies/asc.toml")),
    ("policies/frontspin.toml", include_str!("../../policies/frontspin.toml")),
    ("policies/grpc.toml", include_str!("../../policies/grpc.toml")),
    ("policies/http.toml", include_str!("../../policies/http.toml")),
];

/// The catalog used when a failure names none.
pub const DEFAULT_CATALOG: &str = "vibecode";

/// Why a policy could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// One or more catalog files are invalid.
    #[error("invalid catalog:\n{}", .0.iter().map(|e| format!("  {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<CatalogError>),
    /// The default catalog is not among the loaded ones.
    #[error("default catalog {name:?} is not loaded; catalogs: {available}")]
    UnknownDefault {
        /// The requested default.
        name: String,
        /// The catalogs there are, comma-separated.
        available: String,
    },
}

/// The catalogs in force.
#[derive(Debug, Clone)]
pub struct Policy {
    catalogs: Vec<Catalog>,
    default: usize,
    version: Box<str>,
}

impl Policy {
    /// The embedded catalogs with `vibecode` as the default.
    pub fn embedded() -> Result<Policy, PolicyError> {
        Policy::from_sources(EMBEDDED.iter().copied(), DEFAULT_CATALOG)
    }

    /// Builds from `(file, text)` sources. A later catalog with the name of
    /// an earlier one replaces it whole.
    pub fn from_sources<'s>(
        sources: impl IntoIterator<Item = (&'s str, &'s str)>,
        default_catalog: &str,
    ) -> Result<Policy, PolicyError> {
        let mut errors = Vec::new();
        let mut catalogs: Vec<Catalog> = Vec::new();
        let mut hashed: Vec<(String, [u8; 32])> = Vec::new();
        // The file each catalog came from, and whether it is embedded.
        let mut origins: Vec<(&'s str, bool)> = Vec::new();
        for (file, text) in sources {
            match compile_catalog(file, text) {
                Ok(c) => {
                    let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
                    match catalogs.iter().position(|old| old.name == c.name) {
                        Some(i) if !origins[i].1 => {
                            errors.push(duplicate_name(file, text, &c.name, origins[i].0));
                        }
                        Some(i) => {
                            hashed[i] = (c.name.to_string(), digest);
                            catalogs[i] = c;
                            origins[i] = (file, is_embedded(file, text));
                        }
                        None => {
                            hashed.push((c.name.to_string(), digest));
                            catalogs.push(c);
                            origins.push((file, is_embedded(file, text)));
                        }
                    }
                }
                Err(mut e) => errors.append(&mut e),
            }
        }
        if !errors.is_empty() {
            return Err(PolicyError::Invalid(errors));
        }
        let Some(default) = catalogs.iter().position(|c| &*c.name == default_catalog) else {
            return Err(PolicyError::UnknownDefault {
                name: default_catalog.to_owned(),
                available: names(&catalogs),
            });
        };
        // The version covers every catalog's text and the default, in name order.
        hashed.sort();
        let mut h = Sha256::new();
        h.update(default_catalog.as_bytes());
        for (name, digest) in &hashed {
            h.update([0]);
            h.update(name.as_bytes());
            h.update(digest);
        }
        let digest = h.finalize();
        let version = digest[..8].iter().map(|b| format!("{b:02x}")).collect::<String>();
        Ok(Policy {
            catalogs,
            default,
            version: format!("sha256:{version}").into(),
        })
    }

    /// The catalog named `name`.
    pub fn catalog(&self, name: &str) -> Option<&Catalog> {
        // A handful of catalogs: a scan beats hashing the name.
        self.catalogs.iter().find(|c| &*c.name == name)
    }

    /// The default catalog.
    pub fn default_catalog(&self) -> &Catalog {
        &self.catalogs[self.default]
    }

    /// Every catalog, in load order.
    pub fn catalogs(&self) -> &[Catalog] {
        &self.catalogs
    }

    /// Catalog names, comma-separated (for error messages).
    pub fn catalog_names(&self) -> String {
        names(&self.catalogs)
    }

    /// Content hash of the catalogs, e.g. `sha256:1f2e3d4c5b6a7980`.
    pub fn version(&self) -> &str {
        &self.version
    }
}

/// Whether `(file, text)` is an embedded catalog (an operator's file that
/// only shares a path such as `policies/vibecode.toml` with one is not).
fn is_embedded(file: &str, text: &str) -> bool {
    EMBEDDED.iter().any(|(f, t)| *f == file && *t == text)
}

/// The error for a second file declaring catalog `name`, first declared in
/// `first`: an operator's file may replace an embedded catalog, but two of
/// them with one name would leave the choice to the order of file names.
pub fn duplicate_name(file: &str, text: &str, name: &str, first: &str) -> CatalogError {
    CatalogError {
        file: file.to_owned(),
        line: line_of_key(text, "name"),
        key: "name".to_owned(),
        message: format!("catalog {name:?} is already declared in {first}; one file per catalog name"),
    }
}

fn names(catalogs: &[Catalog]) -> String {
    catalogs.iter().map(|c| &*c.name).collect::<Vec<_>>().join(", ")
}
