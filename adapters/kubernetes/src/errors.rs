//! Watch failures in words, shared by the registry and the config source.

use kube::runtime::watcher;

/// The HTTP status of a failure the API server answered.
pub(crate) fn status(err: &watcher::Error) -> Option<u16> {
    match err {
        watcher::Error::InitialListFailed(err)
        | watcher::Error::WatchStartFailed(err)
        | watcher::Error::WatchFailed(err) => match err {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        },
        watcher::Error::WatchError(status) => Some(status.code),
        watcher::Error::NoResourceVersion => None,
    }
}

/// A failure in a few words: what failed, and the server's status or the client's error
/// (kube's own message repeats the whole status as `Debug`).
pub(crate) fn describe(err: &watcher::Error) -> String {
    let (what, err) = match err {
        watcher::Error::InitialListFailed(err) => ("list failed", err),
        watcher::Error::WatchStartFailed(err) => ("watch failed to start", err),
        watcher::Error::WatchFailed(err) => ("watch failed", err),
        watcher::Error::WatchError(status) => {
            return format!("watch failed: HTTP {}: {}", status.code, status.message);
        }
        watcher::Error::NoResourceVersion => return err.to_string(),
    };
    match err {
        kube::Error::Api(status) if status.message.is_empty() => {
            format!("{what}: HTTP {} {}", status.code, status.reason)
        }
        kube::Error::Api(status) => format!("{what}: HTTP {}: {}", status.code, status.message),
        other => format!("{what}: {other}"),
    }
}
