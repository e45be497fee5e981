//! The proxy's settings from the control plane: before it starts Envoy, the agent asks for
//! Istio's PCDS type (`istio.mesh.v1alpha1.ProxyConfig`) on an ADS stream of its own, with the
//! node Envoy will have, and starts Envoy with what it is given (see
//! `wayfinder_config::proxy_config` for how the server layers MeshConfig's `defaultConfig` and
//! the ProxyConfig objects). Istio's injector puts the same settings into the pod when it is
//! created; here they reach a proxy however it is started.
//!
//! What is applied, each only where the agent's own configuration says nothing:
//! - `concurrency` becomes Envoy's `--concurrency` unless the agent has `--concurrency`
//!   (`0` leaves Envoy's default, one worker per core);
//! - each of `proxyMetadata` (ProxyConfig's `environmentVariables`) is an environment
//!   variable of the agent unless the process has it, so `ISTIO_META_*` ones become node
//!   metadata;
//! - `image` is logged: nothing here picks an image.
//!
//! The settings are read once, at start, as Istio applies them when the pod starts: a change
//! reaches a proxy when its agent starts again. When the control plane does not answer within
//! `--proxy-config-wait`, or the stream fails, the agent logs why and starts Envoy with its
//! own settings.

use std::collections::BTreeMap;
use std::time::Duration;

use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::certificates::ControlPlane;
use crate::xds::pb::core::Node;
use crate::xds::pb::discovery::DiscoveryRequest;
use crate::xds::pb::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::xds::pb::mesh::{PROXY_CONFIG_TYPE, ProxyConfig};

/// Asks `discovery` for the node's settings, waiting at most `wait`. `None` when it does not
/// answer in time (or `wait` is zero); an error when the stream fails or the answer is not a
/// ProxyConfig.
pub async fn fetch(
    node: Node,
    discovery: &str,
    control_plane: &ControlPlane,
    wait: Duration,
) -> anyhow::Result<Option<ProxyConfig>> {
    if wait.is_zero() {
        return Ok(None);
    }
    match tokio::time::timeout(wait, ask(node, discovery, control_plane)).await {
        Ok(answer) => answer.map(Some),
        Err(_) => Ok(None),
    }
}

async fn ask(
    node: Node,
    discovery: &str,
    control_plane: &ControlPlane,
) -> anyhow::Result<ProxyConfig> {
    let mut client = AggregatedDiscoveryServiceClient::new(control_plane.connect(discovery).await?);
    let (tx, rx) = mpsc::channel(1);
    tx.send(DiscoveryRequest {
        node: Some(node),
        type_url: PROXY_CONFIG_TYPE.to_string(),
        ..DiscoveryRequest::default()
    })
    .await?;
    let mut responses = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await?
        .into_inner();
    let response = responses
        .message()
        .await?
        .ok_or_else(|| anyhow::anyhow!("the control plane closed the stream"))?;
    let any = response
        .resources
        .first()
        .ok_or_else(|| anyhow::anyhow!("the control plane sent no ProxyConfig"))?;
    if any.type_url != PROXY_CONFIG_TYPE {
        anyhow::bail!(
            "the control plane sent a {} for a ProxyConfig",
            any.type_url
        );
    }
    Ok(ProxyConfig::decode(any.value.as_slice())?)
}

/// What the agent starts Envoy with: `served` under the agent's own `env` and `concurrency`.
/// Returns the environment and Envoy's concurrency.
pub fn apply(
    served: &ProxyConfig,
    mut env: BTreeMap<String, String>,
    concurrency: Option<u32>,
) -> (BTreeMap<String, String>, Option<u32>) {
    for (name, value) in &served.proxy_metadata {
        env.entry(name.clone()).or_insert_with(|| value.clone());
    }
    let served_concurrency = served
        .concurrency
        .as_ref()
        .and_then(|c| u32::try_from(c.value).ok())
        .filter(|n| *n > 0);
    if let Some(image) = &served.image {
        tracing::info!(image_type = %image.image_type, "ProxyConfig's image is not acted on: the agent runs the Envoy it is given (--binary-path)");
    }
    (env, concurrency.or(served_concurrency))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xds::pb::protobuf::Int32Value;

    #[test]
    fn the_agent_s_own_settings_win_and_zero_concurrency_is_envoy_s_default() {
        let served = ProxyConfig {
            concurrency: Some(Int32Value { value: 3 }),
            proxy_metadata: [
                ("ISTIO_META_TEAM".to_string(), "blue".to_string()),
                ("ISTIO_META_NETWORK".to_string(), "net9".to_string()),
            ]
            .into(),
            image: None,
        };
        let env: BTreeMap<String, String> =
            [("ISTIO_META_NETWORK".to_string(), "net1".to_string())].into();
        let (env, concurrency) = apply(&served, env, None);
        assert_eq!(concurrency, Some(3));
        assert_eq!(env["ISTIO_META_TEAM"], "blue");
        assert_eq!(env["ISTIO_META_NETWORK"], "net1", "the process's own wins");
        assert_eq!(apply(&served, BTreeMap::new(), Some(1)).1, Some(1));
        let zero = ProxyConfig {
            concurrency: Some(Int32Value { value: 0 }),
            ..served
        };
        assert_eq!(apply(&zero, BTreeMap::new(), None).1, None);
    }
}
