//! Query parameters of list and watch requests, checked the way the real server's
//! `ValidateListOptions` checks them, and the continue token.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::Query as AxumQuery;
use axum::http::Uri;

use super::kinds::Kind;
use super::selector::{FieldSelector, Filter, LabelSelector};
use super::status::ApiError;
use super::store::Key;

/// The decoded query string.
#[derive(Debug, Default)]
pub(super) struct Query(BTreeMap<String, String>);

impl Query {
    /// Decodes the query of `uri`.
    pub(super) fn parse(uri: &Uri) -> Result<Query, ApiError> {
        AxumQuery::<BTreeMap<String, String>>::try_from_uri(uri)
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))
    }

    /// A parameter, if given.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A boolean parameter (`true`/`1` or `false`/`0`), if given.
    pub(super) fn flag(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some("true" | "1") => Ok(Some(true)),
            Some("false" | "0") => Ok(Some(false)),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid value for {name}: {other:?}"
            ))),
        }
    }
}

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RvMatch {
    /// Not given: the legacy rules, which depend on `resourceVersion` and `limit`.
    Unset,
    /// `NotOlderThan`.
    NotOlderThan,
    /// `Exact`.
    Exact,
}

/// A GET on a collection: a list or a watch.
#[derive(Debug)]
pub(super) struct ReadParams {
    /// `watch=true`.
    pub(super) watch: bool,
    /// Namespace of the path, `labelSelector`, `fieldSelector`.
    pub(super) filter: Filter,
    /// `limit` (0 and absent mean none).
    pub(super) limit: Option<usize>,
    /// `continue`: the list's resourceVersion and the last key sent.
    pub(super) continue_from: Option<(u64, Key)>,
    /// `resourceVersion`: `None` when absent or empty, `Some(0)` for `"0"`.
    pub(super) rv: Option<u64>,
    /// `resourceVersionMatch`.
    pub(super) rv_match: RvMatch,
    /// `timeoutSeconds`.
    pub(super) timeout: Option<Duration>,
    /// `allowWatchBookmarks=true`.
    pub(super) bookmarks: bool,
    /// `sendInitialEvents`.
    pub(super) send_initial: Option<bool>,
}

impl ReadParams {
    /// Reads and checks the parameters of a GET on a collection of `kind`.
    pub(super) fn parse(
        q: &Query,
        kind: &Kind,
        namespace: Option<&str>,
    ) -> Result<ReadParams, ApiError> {
        let number = |name: &str| -> Result<Option<u64>, ApiError> {
            match q.get(name).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v
                    .parse()
                    .map(Some)
                    .map_err(|_| ApiError::bad_request(format!("invalid value for {name}: {v:?}"))),
            }
        };
        let rv = match q.get("resourceVersion").filter(|v| !v.is_empty()) {
            None => None,
            Some(v) => Some(
                v.parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {v}")))?,
            ),
        };
        let rv_match = match q.get("resourceVersionMatch").unwrap_or("") {
            "" => RvMatch::Unset,
            "NotOlderThan" => RvMatch::NotOlderThan,
            "Exact" => RvMatch::Exact,
            other => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: \"{other}\": supported values: \
                     \"Exact\", \"NotOlderThan\""
                )));
            }
        };
        let filter = Filter {
            namespace: namespace.map(str::to_owned),
            labels: LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
                .map_err(ApiError::bad_request)?,
            fields: FieldSelector::parse(q.get("fieldSelector").unwrap_or(""), kind)
                .map_err(ApiError::bad_request)?,
        };
        let continue_from = match q.get("continue").filter(|c| !c.is_empty()) {
            Some(token) => Some(parse_continue(token)?),
            None => None,
        };
        let params = ReadParams {
            watch: q.flag("watch")?.unwrap_or(false),
            filter,
            limit: number("limit")?.filter(|l| *l > 0).map(|l| l as usize),
            continue_from,
            rv,
            rv_match,
            timeout: number("timeoutSeconds")?
                .filter(|t| *t > 0)
                .map(Duration::from_secs),
            bookmarks: q.flag("allowWatchBookmarks")?.unwrap_or(false),
            send_initial: q.flag("sendInitialEvents")?,
        };
        params.validate()?;
        Ok(params)
    }

    fn validate(&self) -> Result<(), ApiError> {
        let forbid = |why: &str| Err(ApiError::bad_request(why.to_owned()));
        if self.watch {
            if self.rv_match != RvMatch::Unset && self.send_initial.is_none() {
                return forbid(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch \
                     unless sendInitialEvents is provided",
                );
            }
            if self.send_initial.is_some() && self.rv_match != RvMatch::NotOlderThan {
                return forbid(
                    "resourceVersionMatch: Forbidden: sendInitialEvents requires setting \
                     resourceVersionMatch to NotOlderThan",
                );
            }
            return Ok(());
        }
        if self.rv_match != RvMatch::Unset {
            if self.rv.is_none() {
                return forbid(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless \
                     resourceVersion is provided",
                );
            }
            if self.continue_from.is_some() {
                return forbid(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when \
                     continue is provided",
                );
            }
            if self.rv_match == RvMatch::Exact && self.rv == Some(0) {
                return forbid(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden \
                     for resourceVersion \"0\"",
                );
            }
        }
        if self.continue_from.is_some() && self.rv.is_some_and(|rv| rv != 0) {
            return forbid("specifying resource version is not allowed when using continue");
        }
        Ok(())
    }
}

/// An opaque continue token for the list at `rv` whose last item was `key`.
pub(super) fn continue_token(rv: u64, key: &Key) -> String {
    let plain = format!("{rv}/{}/{}", key.0, key.1);
    plain.bytes().map(|b| format!("{b:02x}")).collect()
}

fn parse_continue(token: &str) -> Result<(u64, Key), ApiError> {
    let invalid = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    if !token.len().is_multiple_of(2) {
        return Err(invalid());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(invalid)?;
    let plain = String::from_utf8(bytes).map_err(|_| invalid())?;
    let mut parts = plain.splitn(3, '/');
    let (Some(rv), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid());
    };
    let rv = rv.parse().map_err(|_| invalid())?;
    Ok((rv, (ns.to_owned(), name.to_owned())))
}
