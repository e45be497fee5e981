//! `--bootstrap-tokens FILE`: the tokens that let a VM get its first certificate.
//!
//! One `TOKEN NAMESPACE SERVICEACCOUNT` per line; blank lines and lines starting with `#`
//! are skipped. A token is at least [`MIN_TOKEN_CHARS`] characters. The file is looked at on
//! every request that presents a token and read again when its size, modification time or
//! inode changed (so an editor's rename-over counts). A file that cannot be read or has a bad
//! line is refused with its path and line, logged once per change, and the tokens read last
//! stay in force: a typo does not lock every VM out.
//!
//! Tokens are kept only as HMAC-SHA256 tags under a key made at start, and a presented token
//! is looked up by its tag: what the lookup's timing could reveal is about the tags, which
//! say nothing about the tokens without the key.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ring::hmac;
use ring::rand::SystemRandom;

/// The shortest token a line may hold.
pub(super) const MIN_TOKEN_CHARS: usize = 16;

/// The largest tokens file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// The tokens of one file, re-read when it changes.
pub struct BootstrapTokens {
    path: PathBuf,
    key: hmac::Key,
    state: Mutex<State>,
}

impl std::fmt::Debug for BootstrapTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapTokens")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// (size, mtime in ns, inode) of the file as last looked at.
    seen: Option<(u64, i128, u64)>,
    /// Tag → (namespace, service account).
    tokens: HashMap<Vec<u8>, (String, String)>,
}

impl BootstrapTokens {
    /// Reads `path` now; an unusable file at start is an error (the server does not start).
    pub fn open(path: &Path) -> Result<Self, String> {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())
            .map_err(|_| "cannot make a key for the bootstrap tokens".to_string())?;
        let tokens = Self {
            path: path.to_path_buf(),
            key,
            state: Mutex::new(State::default()),
        };
        tokens.refresh(true)?;
        Ok(tokens)
    }

    /// The namespace and service account of `token`, if the file (as it is now) holds it.
    pub fn lookup(&self, token: &str) -> Option<(String, String)> {
        if let Err(err) = self.refresh(false) {
            tracing::warn!(error = %err, "keeping the bootstrap tokens read before");
        }
        let tag = hmac::sign(&self.key, token.as_bytes());
        self.state().tokens.get(tag.as_ref()).cloned()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the file again if it changed. Errors only once per change of the file.
    fn refresh(&self, first: bool) -> Result<(), String> {
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| format!("--bootstrap-tokens {}: {e}", self.path.display()))?;
        let seen = (
            meta.len(),
            i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            meta.ino(),
        );
        if !first && self.state().seen == Some(seen) {
            return Ok(());
        }
        // Whatever the outcome, this version of the file is dealt with.
        self.state().seen = Some(seen);
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!(
                "--bootstrap-tokens {}: larger than {MAX_FILE_BYTES} bytes",
                self.path.display()
            ));
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("--bootstrap-tokens {}: {e}", self.path.display()))?;
        let tokens = parse(&text).map_err(|(line, message)| {
            format!(
                "--bootstrap-tokens {}:{line}: {message}",
                self.path.display()
            )
        })?;
        let count = tokens.len();
        self.state().tokens = tokens
            .into_iter()
            .map(|(token, identity)| {
                (
                    hmac::sign(&self.key, token.as_bytes()).as_ref().to_vec(),
                    identity,
                )
            })
            .collect();
        tracing::info!(path = %self.path.display(), tokens = count, "bootstrap tokens read");
        Ok(())
    }
}

/// A token and the namespace and service account it stands for.
type Line = (String, (String, String));

/// The lines of a tokens file; an error names the line (from 1).
fn parse(text: &str) -> Result<Vec<Line>, (usize, String)> {
    let mut tokens = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [token, namespace, account] = fields[..] else {
            return Err((
                n + 1,
                format!(
                    "expected TOKEN NAMESPACE SERVICEACCOUNT, found {} fields",
                    fields.len()
                ),
            ));
        };
        if token.chars().count() < MIN_TOKEN_CHARS {
            return Err((
                n + 1,
                format!("a token is at least {MIN_TOKEN_CHARS} characters"),
            ));
        }
        for (what, name) in [("namespace", namespace), ("service account", account)] {
            if !is_dns_subdomain(name) {
                return Err((
                    n + 1,
                    format!(
                        "the {what} {name:?} is not a Kubernetes name (lower-case letters, digits, '-' and '.')"
                    ),
                ));
            }
        }
        tokens.push((
            token.to_string(),
            (namespace.to_string(), account.to_string()),
        ));
    }
    Ok(tokens)
}

/// A DNS-1123 subdomain: what Kubernetes accepts as a namespace or service account name.
fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name.starts_with(alnum)
        && name.ends_with(alnum)
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_s_tokens_and_its_bad_lines() {
        let ok = parse("# VMs\n\nabcdefghijklmnop vm web\n  0123456789abcdef0  db   db-sa  \n")
            .expect("a good file");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].1, ("db".to_string(), "db-sa".to_string()));
        let err = |text: &str| parse(text).expect_err("a bad file");
        assert_eq!(err("abcdefghijklmnop vm\n").0, 1);
        assert_eq!(err("# c\nshort vm web\n").0, 2);
        assert!(err("abcdefghijklmnop VM web\n").1.contains("\"VM\""));
        assert!(
            err("abcdefghijklmnop vm web extra\n")
                .1
                .contains("4 fields")
        );
    }

    #[test]
    fn a_bad_change_keeps_the_tokens_read_before() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("tokens");
        std::fs::write(&path, "abcdefghijklmnop vm web\n").expect("write");
        let tokens = BootstrapTokens::open(&path).expect("a good file");
        let web = Some(("vm".to_string(), "web".to_string()));
        assert_eq!(tokens.lookup("abcdefghijklmnop"), web);
        assert_eq!(tokens.lookup("abcdefghijklmnoq"), None);
        std::fs::write(&path, "abcdefghijklmnop vm web\nbroken\n").expect("write");
        assert_eq!(
            tokens.lookup("abcdefghijklmnop"),
            web,
            "the last good tokens stay"
        );
        std::fs::write(&path, "qrstuvwxyz012345 vm db\n").expect("write");
        assert_eq!(
            tokens.lookup("abcdefghijklmnop"),
            None,
            "a removed token is gone"
        );
        assert_eq!(
            tokens.lookup("qrstuvwxyz012345"),
            Some(("vm".to_string(), "db".to_string()))
        );
    }
}
