//! The adapter without the network, for the fuzzer (`fuzz/` at the repository root; built
//! with the `fuzzing` feature only): Eureka's answers go through the code that reads every
//! real answer (`client`: status, body, the lenient JSON types of `api`), the mirror's
//! deltas and reconcile hashcode, the mapping of `convert` and the poll loop's diff, in the
//! order given. What the stream would carry comes back: events and error items.
//!
//! As in the poll loop, nothing but `GET /apps` is asked until one succeeded, and a delta that
//! does not reconcile changes nothing (the loop asks for `/apps` next). The HTTP client, the
//! timers and the backoff are left out.

use std::collections::BTreeMap;

use reqwest::StatusCode;
use wayfinder_registry::{Event, Registration, RegistryError, ServiceKey};

use crate::client::{Answer, read_delta, read_full};
use crate::convert::convert;
use crate::mirror::{Mirror, Reconciled};
use crate::watch::diff;

/// The base URL errors name.
const BASE: &str = "http://eureka/eureka";

/// One answer of the Eureka server to `GET {base}{path}`.
#[derive(Clone, Copy, Debug)]
pub struct Reply<'a> {
    /// `/apps` or `/apps/delta`; other paths are ignored.
    pub path: &'a str,
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: &'a [u8],
}

/// Feeds `replies` to a fresh registry with the default suffix (none) and returns what its
/// stream would carry: a `Reset` after the first good full fetch, then the changes of each
/// reply, and an error item for each failure and each instance or service refused.
pub fn replay(replies: &[Reply<'_>]) -> Vec<Result<Event, RegistryError>> {
    let mut mirror: Option<Mirror> = None;
    let mut sent = BTreeMap::<ServiceKey, Registration>::new();
    let mut out = Vec::new();
    for reply in replies {
        let origin = format!("GET {BASE}{}", reply.path);
        let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::OK);
        let answer = Answer::new(status, reply.body);
        let fresh = match (reply.path, &mirror) {
            ("/apps", _) => read_full(answer, origin).map(|apps| Some(Mirror::full(apps))),
            ("/apps/delta", Some(current)) => {
                read_delta(answer, origin).map(|delta| match delta.map(|d| current.reconcile(d)) {
                    Some(Reconciled::Yes(changed)) => changed,
                    Some(Reconciled::No { .. }) | None => None,
                })
            }
            _ => continue,
        };
        let fresh = match fresh {
            Ok(fresh) => fresh,
            Err(err) => {
                out.push(Err(err));
                continue;
            }
        };
        let Some(next) = fresh else { continue };
        let converted = convert(&next, BASE, "");
        if mirror.is_none() {
            sent = converted.registrations;
            out.push(Ok(Event::Reset(sent.values().cloned().collect())));
        } else {
            out.extend(diff(&mut sent, converted.registrations, &converted.refused));
        }
        out.extend(converted.problems.into_iter().map(Err));
        mirror = Some(next);
    }
    out
}
