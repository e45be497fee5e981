//! Helpers for the unit tests of tasks that publish on a watch channel (`jwks`, `credentials`).

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Waits for a value of `rx` that `ok` accepts, within a deadline long enough for a loaded
/// machine; fails naming `what` and the last value.
pub(crate) async fn until<T: Debug>(
    rx: &mut watch::Receiver<Arc<T>>,
    what: &str,
    ok: impl Fn(&T) -> bool,
) -> Arc<T> {
    let wait = async {
        loop {
            let value = rx.borrow_and_update().clone();
            if ok(&value) {
                return value;
            }
            rx.changed().await.expect("the task publishes");
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("waiting for {what}: {:?}", rx.borrow()))
}
