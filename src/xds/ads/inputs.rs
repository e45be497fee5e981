//! What the ADS server follows besides the model: the server's own tasks' inputs (JWT keys,
//! credentials), each new one making the next xDS snapshot, as a new model does.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Inner;
use crate::credentials::Credentials;
use crate::jwks::JwksTable;
use crate::snapshot::SnapshotReader;
use crate::xds::{Inputs, MeshSettings, XdsSnapshot};

/// Where the server's own tasks publish what generation reads besides the model (see
/// [`Inputs`]): each new value makes the next xDS snapshot, as a new model does.
#[derive(Clone, Debug)]
pub struct InputChannels {
    /// The JWT keys (`crate::jwks::spawn`).
    pub jwks: watch::Receiver<Arc<JwksTable>>,
    /// The gateways' credentials (`crate::credentials::spawn`).
    pub credentials: watch::Receiver<Arc<Credentials>>,
    /// The server's settings, its flags overlaid with MeshConfig (`crate::mesh_config`).
    pub mesh: watch::Receiver<Arc<MeshSettings>>,
}

impl InputChannels {
    /// The current inputs, marked seen.
    pub(super) fn current(&mut self) -> Inputs {
        Inputs {
            jwks: self.jwks.borrow_and_update().clone(),
            credentials: self.credentials.borrow_and_update().clone(),
            mesh: self.mesh.borrow_and_update().clone(),
        }
    }
}

/// Follows the model's snapshots and the server's inputs (JWT keys, credentials, mesh
/// settings), each new
/// one making the next xDS snapshot, which wakes every stream.
pub(super) async fn follow(
    reader: SnapshotReader,
    mut versions: watch::Receiver<u64>,
    mut inputs: InputChannels,
    inner: std::sync::Weak<Inner>,
    tx: watch::Sender<u64>,
    shutdown: CancellationToken,
) {
    // A task that stopped leaves its input as it was.
    let (mut keys_open, mut credentials_open, mut mesh_open) = (true, true, true);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = versions.changed() => if changed.is_err() { return },
            changed = inputs.jwks.changed(), if keys_open => if changed.is_err() {
                keys_open = false;
                continue;
            },
            changed = inputs.credentials.changed(), if credentials_open => if changed.is_err() {
                credentials_open = false;
                continue;
            },
            changed = inputs.mesh.changed(), if mesh_open => if changed.is_err() {
                mesh_open = false;
                continue;
            },
        }
        let Some(inner) = inner.upgrade() else { return };
        let model = reader.snapshot();
        let version = model.version;
        let current = inputs.current();
        let next = XdsSnapshot::next_with(model, &inner.domain, &inner.current.load(), current);
        inner.current.store(Arc::new(next));
        tx.send_replace(version);
    }
}
