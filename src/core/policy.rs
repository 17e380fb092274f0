//! A policy: the set of catalogs in force, the default catalog, and a
//! content hash that every decision reports as `policy_version`.

use sha2::{Digest, Sha256};

use super::catalog::{Catalog, CatalogError, amend, compile_catalog, line_of_key};

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
    notes: Vec<String>,
}

/// The catalogs being put together, with their texts (for amendments).
#[derive(Default)]
struct Builder<'s> {
    errors: Vec<CatalogError>,
    catalogs: Vec<Catalog>,
    /// (name, digest of the text compiled), for the version.
    hashed: Vec<(String, [u8; 32])>,
    /// The file each catalog came from, whether it is embedded, and the TOML it was compiled from.
    origins: Vec<(&'s str, bool, String)>,
    notes: Vec<String>,
}

impl<'s> Builder<'s> {
    /// A catalog file without `extends`.
    fn add(&mut self, file: &'s str, text: &'s str) {
        let c = match compile_catalog(file, text) {
            Ok(c) => c,
            Err(mut e) => return self.errors.append(&mut e),
        };
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        match self.catalogs.iter().position(|old| old.name == c.name) {
            Some(i) if !self.origins[i].1 => {
                self.errors.push(duplicate_name(file, text, &c.name, self.origins[i].0));
            }
            Some(i) => {
                // A copy of the embedded catalog itself replaces nothing.
                if !amend::replaces_of(text) && !EMBEDDED.iter().any(|(_, t)| *t == text) {
                    self.notes.push(replaced_note(&c, &self.catalogs[i]));
                }
                self.hashed[i] = (c.name.to_string(), digest);
                self.catalogs[i] = c;
                self.origins[i] = (file, is_embedded(file, text), text.to_owned());
            }
            None => {
                self.hashed.push((c.name.to_string(), digest));
                self.catalogs.push(c);
                self.origins.push((file, is_embedded(file, text), text.to_owned()));
            }
        }
    }

    /// A catalog file that extends `base` (loaded).
    fn amend(&mut self, file: &'s str, text: &'s str, base: &str) {
        let Some(b) = self.catalogs.iter().position(|c| *c.name == *base) else {
            return;
        };
        let merged = match amend::merge(file, text, base, &self.origins[b].2) {
            Ok(m) => m,
            Err(mut e) => return self.errors.append(&mut e),
        };
        let mut c = match compile_catalog(file, &merged.text) {
            Ok(c) => c,
            Err(e) => {
                let located = e
                    .into_iter()
                    .map(|e| amend::locate_error(e, text, base, &merged.origins));
                return self.errors.extend(located);
            }
        };
        let unchanged: Vec<&str> = merged
            .origins
            .iter()
            .filter(|(_, o)| *o == amend::CodeOrigin::Base)
            .map(|(n, _)| n.as_str())
            .collect();
        c.keep_rule_ids(&self.catalogs[b], &unchanged);
        c.set_amended(base, &merged.origins);
        let digest: [u8; 32] = Sha256::digest(merged.text.as_bytes()).into();
        match self.catalogs.iter().position(|old| old.name == c.name) {
            // Amended in place (`name` = `extends`), embedded or not.
            Some(i) if i == b => {
                self.hashed[i] = (c.name.to_string(), digest);
                self.catalogs[i] = c;
                self.origins[i] = (file, false, merged.text);
            }
            Some(i) => {
                self.errors.push(CatalogError {
                    file: file.to_owned(),
                    line: line_of_key(text, "name"),
                    key: "name".to_owned(),
                    message: format!(
                        "catalog {:?} is already loaded (from {}); to amend it, say extends = {:?}",
                        c.name, self.origins[i].0, c.name
                    ),
                });
            }
            None => {
                self.hashed.push((c.name.to_string(), digest));
                self.catalogs.push(c);
                self.origins.push((file, false, merged.text));
            }
        }
    }
}

/// The note for an embedded catalog replaced whole by `new` without `replaces = true`.
pub fn replaced_note(new: &Catalog, embedded: &Catalog) -> String {
    format!(
        "catalog {name} replaces the embedded one: {} code(s) instead of {}; amend it with extends = \"{name}\" (or say replaces = true to replace it whole)",
        new.codes().len(),
        embedded.codes().len(),
        name = new.name
    )
}

/// The `name` a catalog file declares, if its TOML says one.
fn declared_name(text: &str) -> Option<String> {
    text.parse::<toml::Table>()
        .ok()?
        .get("name")
        .and_then(toml::Value::as_str)
        .map(str::to_owned)
}

impl Policy {
    /// The embedded catalogs with `vibecode` as the default.
    pub fn embedded() -> Result<Policy, PolicyError> {
        Policy::from_sources(EMBEDDED.iter().copied(), DEFAULT_CATALOG)
    }

    /// Builds from `(file, text)` sources. A later catalog with the name of
    /// an embedded one replaces it whole (noted in [`Policy::notes`] unless
    /// it says `replaces = true`); a catalog that says `extends = "base"` is
    /// merged onto the base (see [`super::catalog::amend`]), after every
    /// catalog it could extend is loaded.
    pub fn from_sources<'s>(
        sources: impl IntoIterator<Item = (&'s str, &'s str)>,
        default_catalog: &str,
    ) -> Result<Policy, PolicyError> {
        let mut b = Builder::default();
        let mut amending: Vec<(&'s str, &'s str, String)> = Vec::new();
        for (file, text) in sources {
            match amend::extends_of(text) {
                Some(base) => amending.push((file, text, base)),
                None => b.add(file, text),
            }
        }
        // Amendments in dependency order: each once its base is loaded.
        while !amending.is_empty() {
            let before = amending.len();
            let mut waiting = Vec::new();
            for (file, text, base) in amending {
                if b.catalogs.iter().any(|c| *c.name == *base) {
                    b.amend(file, text, &base);
                } else {
                    waiting.push((file, text, base));
                }
            }
            amending = waiting;
            if amending.len() == before {
                for (file, text, base) in &amending {
                    let declared = |f: &(&str, &str, String)| declared_name(f.1);
                    let message = if amending.iter().any(|f| declared(f).as_deref() == Some(base.as_str())) {
                        let chain: Vec<String> = amending
                            .iter()
                            .map(|f| format!("{} extends {}", declared(f).unwrap_or_default(), f.2))
                            .collect();
                        format!("extends cycle: {}", chain.join(", "))
                    } else {
                        format!("unknown catalog {base:?}; catalogs: {}", names(&b.catalogs))
                    };
                    b.errors.push(CatalogError {
                        file: (*file).to_owned(),
                        line: line_of_key(text, "extends"),
                        key: "extends".to_owned(),
                        message,
                    });
                }
                break;
            }
        }
        let Builder {
            errors,
            catalogs,
            mut hashed,
            notes,
            ..
        } = b;
        if !errors.is_empty() {
            return Err(PolicyError::Invalid(errors));
        }
        let Some(default) = catalogs.iter().position(|c| &*c.name == default_catalog) else {
            return Err(PolicyError::UnknownDefault {
                name: default_catalog.to_owned(),
                available: names(&catalogs),
            });
        };
        Ok(Policy {
            catalogs,
            default,
            version: version_of(default_catalog, &mut hashed),
            notes,
        })
    }

    /// The policy of one catalog file already compiled (`catalog`, from
    /// `text`), that catalog the default: what `from_sources([(file, text)],
    /// &catalog.name)` builds for a file without `extends`, version
    /// included, without compiling the text a second time (the fuzz
    /// harness decides with every input it compiles). An `extends` in the
    /// text is not followed: the catalog stands alone, as it compiled.
    pub fn of_catalog(text: &str, catalog: Catalog) -> Policy {
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        let version = version_of(&catalog.name, &mut [(catalog.name.to_string(), digest)]);
        Policy {
            catalogs: vec![catalog],
            default: 0,
            version,
            notes: Vec::new(),
        }
    }

    /// What the operator should know about how the catalogs were put
    /// together (an embedded catalog replaced whole without `replaces = true`);
    /// the server logs them as warnings, `policy check` refuses them.
    pub fn notes(&self) -> &[String] {
        &self.notes
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

/// The version: a hash of every catalog's text (an amended one's merged
/// text, as `(name, digest)`) and the default, in name order.
fn version_of(default_catalog: &str, hashed: &mut [(String, [u8; 32])]) -> Box<str> {
    hashed.sort();
    let mut h = Sha256::new();
    h.update(default_catalog.as_bytes());
    for (name, digest) in hashed.iter() {
        h.update([0]);
        h.update(name.as_bytes());
        h.update(digest);
    }
    let digest = h.finalize();
    let version = digest[..8].iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("sha256:{version}").into()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_compiled_catalog_is_the_policy_from_sources_builds() {
        for (file, text) in EMBEDDED {
            let catalog = compile_catalog(file, text).expect("embedded catalog");
            let name = catalog.name.to_string();
            let ours = Policy::of_catalog(text, catalog);
            let theirs = Policy::from_sources([(*file, *text)], &name).expect("policy");
            assert_eq!(ours.version(), theirs.version(), "{file}");
            assert_eq!(ours.catalog_names(), theirs.catalog_names());
            assert_eq!(ours.default_catalog().name, theirs.default_catalog().name);
            assert_eq!(
                ours.default_catalog().codes().len(),
                theirs.default_catalog().codes().len()
            );
        }
    }
}
