//! The health rules of the streams the models feed: what is failing, and which items keep the
//! consumer's idea of the source's health (it follows the last item) true.
//!
//! Used by [`crate::feed`], and by the File adapter's loop over watched files.

use std::collections::BTreeMap;

use wayfinder_registry::RegistryError;

/// What is failing, and whether the consumer sees the source as degraded.
#[derive(Debug, Default)]
pub struct Health {
    /// Blobs that failed, and failures no blob is to blame for, by name.
    failing: BTreeMap<String, Vec<RegistryError>>,
    /// Failures of the composed state at the last commit.
    composed: Vec<RegistryError>,
    /// Whether the last item returned was an error.
    degraded: bool,
}

impl Health {
    /// Records the failures of `name`; none means it works.
    pub fn set(&mut self, name: &str, errors: Vec<RegistryError>) {
        if errors.is_empty() {
            self.failing.remove(name);
        } else {
            self.failing.insert(name.to_string(), errors);
        }
    }

    /// Records the failures of the composed state, judged afresh at each commit, and returns
    /// those not reported at the last one.
    pub fn compose(&mut self, composed: Vec<RegistryError>) -> Vec<RegistryError> {
        let new = composed
            .iter()
            .filter(|err| !self.composed.contains(err))
            .cloned()
            .collect();
        self.composed = composed;
        new
    }

    /// The items for `events` and `errors`: the events, then the errors; or, without errors,
    /// `Recovered` when everything works again and nothing else would say so, and the errors
    /// still outstanding when a change would otherwise read as a recovery.
    pub fn settle<E>(
        &mut self,
        events: Vec<E>,
        errors: Vec<RegistryError>,
        recovered: fn() -> E,
    ) -> Vec<Result<E, RegistryError>> {
        let changed = !events.is_empty();
        let mut out: Vec<Result<E, RegistryError>> = events.into_iter().map(Ok).collect();
        if !errors.is_empty() {
            self.degraded = true;
            out.extend(errors.into_iter().map(Err));
        } else if self.degraded {
            let outstanding: Vec<RegistryError> = self
                .failing
                .values()
                .flatten()
                .chain(&self.composed)
                .cloned()
                .collect();
            if outstanding.is_empty() {
                self.degraded = false;
                if !changed {
                    out.push(Ok(recovered()));
                }
            } else if changed {
                out.extend(outstanding.into_iter().map(Err));
            }
        }
        out
    }
}
