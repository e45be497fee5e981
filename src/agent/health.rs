//! A VM's health reports, as istio-agent sends them: the WorkloadGroup's probe (ProxyConfig's
//! `readinessProbe`, given to the agent in the `PROXY_CONFIG` environment variable as JSON)
//! runs every `periodSeconds` after `initialDelaySeconds`; `failureThreshold` failures in a row
//! make the workload unhealthy and `successThreshold` passes healthy again (the first result
//! decides at once). Each change is sent to the control plane as a DiscoveryRequest of type
//! `istio.io/health` on an ADS stream of the agent's own, with the proxy's node: without
//! `error_detail` for healthy, with the probe's failure as `error_detail` for unhealthy.
//! istio-agent sends them on the stream it proxies for Envoy; a stream of its own carries the
//! same node, and the control plane counts it as one more connection of the workload.
//!
//! A stream that ends is opened again after a pause (1 s, doubling to 30 s), and the last
//! result is sent again.

use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::certificates::ControlPlane;
use super::probe::{Outcome, Probe};
use crate::xds::pb::core::Node;
use crate::xds::pb::discovery::DiscoveryRequest;
use crate::xds::pb::discovery::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::xds::pb::protobuf::{ListValue, Struct, Value as PbValue, value::Kind};
use crate::xds::pb::rpc::Status;

/// The health requests' type.
pub const HEALTH_TYPE: &str = "istio.io/health";

/// Reads ProxyConfig's `readinessProbe` from `PROXY_CONFIG` (JSON), if there is one.
pub fn readiness_probe(proxy_config: Option<&str>) -> anyhow::Result<Option<Probe>> {
    let Some(text) = proxy_config.filter(|t| !t.trim().is_empty()) else {
        return Ok(None);
    };
    let config: Map<String, Value> = serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("PROXY_CONFIG is not a JSON object (ProxyConfig): {e}"))?;
    let Some(probe) = config.get("readinessProbe") else {
        return Ok(None);
    };
    let probe: Probe = serde_json::from_value(probe.clone())
        .map_err(|e| anyhow::anyhow!("PROXY_CONFIG: readinessProbe: {e}"))?;
    probe
        .check(true)
        .map_err(|why| anyhow::anyhow!("PROXY_CONFIG: readinessProbe: {why}"))?;
    Ok(Some(probe))
}

/// The node the agent's health stream presents: Envoy's.
pub fn node(id: &str, cluster: &str, metadata: &Map<String, Value>) -> Node {
    Node {
        id: id.to_string(),
        cluster: cluster.to_string(),
        metadata: Some(to_struct(metadata)),
        ..Node::default()
    }
}

/// Probes until the process ends, reporting each change to `discovery` (`HOST:PORT`),
/// reached as `control_plane` says.
pub async fn report(probe: Probe, node: Node, discovery: String, control_plane: ControlPlane) {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(send(node, discovery, control_plane, rx));
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(probe.initial_delay_seconds)).await;
    let mut healthy: Option<bool> = None;
    let (mut passes, mut failures) = (0, 0);
    let mut period = tokio::time::interval(Duration::from_secs(probe.period_seconds.max(1)));
    period.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        period.tick().await;
        let outcome = probe.run(&client).await;
        let change = match &outcome {
            Outcome::Pass(_) => {
                (passes, failures) = (passes + 1, 0);
                (healthy != Some(true) && (healthy.is_none() || passes >= probe.success_threshold))
                    .then_some(None)
            }
            Outcome::Fail(why, _) => {
                (passes, failures) = (0, failures + 1);
                (healthy != Some(false)
                    && (healthy.is_none() || failures >= probe.failure_threshold))
                    .then(|| Some(why.clone()))
            }
        };
        if let Some(unhealthy) = change {
            healthy = Some(unhealthy.is_none());
            match &unhealthy {
                None => tracing::info!("the workload's probe passes: reporting healthy"),
                Some(why) => {
                    tracing::warn!(reason = %why, "the workload's probe fails: reporting unhealthy")
                }
            }
            if tx.send(unhealthy).is_err() {
                return;
            }
        }
    }
}

/// Keeps a stream to the control plane and sends every report on it, the last one again
/// on every new stream.
async fn send(
    node: Node,
    discovery: String,
    control_plane: ControlPlane,
    mut reports: mpsc::UnboundedReceiver<Option<String>>,
) {
    let Some(mut last) = reports.recv().await else {
        return;
    };
    let mut pause = Duration::from_secs(1);
    loop {
        match stream(&node, &discovery, &control_plane, &mut last, &mut reports).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(discovery = %discovery, error = %e, retry = ?pause, "health stream to the control plane failed");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// One stream: sends `last`, then every report as it comes. `Ok` when the reports end.
async fn stream(
    node: &Node,
    discovery: &str,
    control_plane: &ControlPlane,
    last: &mut Option<String>,
    reports: &mut mpsc::UnboundedReceiver<Option<String>>,
) -> anyhow::Result<()> {
    let mut client = AggregatedDiscoveryServiceClient::new(control_plane.connect(discovery).await?);
    let (tx, rx) = mpsc::channel(4);
    let request = |unhealthy: &Option<String>| DiscoveryRequest {
        node: Some(node.clone()),
        type_url: HEALTH_TYPE.to_string(),
        error_detail: unhealthy.as_ref().map(|why| Status {
            code: 13,
            message: why.clone(),
            details: Vec::new(),
        }),
        ..DiscoveryRequest::default()
    };
    tx.send(request(last)).await?;
    let mut responses = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await?
        .into_inner();
    loop {
        tokio::select! {
            report = reports.recv() => {
                let Some(report) = report else { return Ok(()) };
                *last = report;
                tx.send(request(last)).await?;
            }
            message = responses.message() => {
                if message?.is_none() {
                    anyhow::bail!("the control plane closed the stream");
                }
            }
        }
    }
}

/// JSON as a protobuf `Struct`.
fn to_struct(map: &Map<String, Value>) -> Struct {
    Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
    }
}

fn to_value(v: &Value) -> PbValue {
    let kind = match v {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(a) => Kind::ListValue(ListValue {
            values: a.iter().map(to_value).collect(),
        }),
        Value::Object(o) => Kind::StructValue(to_struct(o)),
    };
    PbValue { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_config_gives_the_readiness_probe_and_refuses_what_cannot_run() {
        let probe = readiness_probe(Some(
            r#"{"readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 2, "failureThreshold": 1}}"#,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            (
                probe.period_seconds,
                probe.failure_threshold,
                probe.success_threshold
            ),
            (2, 1, 1)
        );
        assert!(
            readiness_probe(Some(r#"{"concurrency": 2}"#))
                .unwrap()
                .is_none()
        );
        assert!(readiness_probe(None).unwrap().is_none());
        let err = readiness_probe(Some("readinessProbe: {}"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("PROXY_CONFIG is not a JSON object"),
            "{err}"
        );
        let err = readiness_probe(Some(r#"{"readinessProbe": {}}"#))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("exactly one of httpGet, tcpSocket and exec"),
            "{err}"
        );
    }

    #[test]
    fn metadata_becomes_a_protobuf_struct() {
        let meta: Map<String, Value> =
            serde_json::from_str(r#"{"A": "x", "LABELS": {"app": "vm"}, "N": 1, "L": [true]}"#)
                .unwrap();
        let s = to_struct(&meta);
        assert_eq!(s.fields["A"].kind, Some(Kind::StringValue("x".into())));
        let Some(Kind::StructValue(labels)) = &s.fields["LABELS"].kind else {
            panic!()
        };
        assert_eq!(
            labels.fields["app"].kind,
            Some(Kind::StringValue("vm".into()))
        );
        assert_eq!(s.fields["N"].kind, Some(Kind::NumberValue(1.0)));
    }
}
