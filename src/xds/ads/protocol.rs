//! What the stream loop needs from a protocol variant's state machine, implemented for state
//! of the world ([`StreamState`]) and delta ([`DeltaState`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::wire::{DeltaResponse, Encoded, RequestMessage, SotwRequest, SotwResponse};
use super::{DeltaState, Outcome, RequestError, StreamState, TypeStatus};
use crate::xds::pb::core::Node;
use crate::xds::pb::discovery::DeltaDiscoveryRequest;
use crate::xds::proxy::Proxy;
use crate::xds::{TypeUrl, XdsSnapshot};

/// A response in the few words logs and metrics need.
pub(super) struct Summary<'a> {
    pub(super) type_url: TypeUrl,
    pub(super) version: &'a str,
    pub(super) nonce: &'a str,
    pub(super) resources: usize,
    pub(super) removed: usize,
    pub(super) bytes: usize,
}

/// What a stream needs from a protocol variant's state machine (state of the world or delta).
pub(super) trait Protocol: Send + Sized + 'static {
    type Request: RequestMessage + Send + 'static;
    type Response: Send + 'static;
    /// For logs: `sotw` or `delta`.
    const VARIANT: &'static str;
    fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self;
    /// Limits the names a stream may be subscribed to per type, where requests add to the
    /// subscription (delta); state-of-the-world requests replace it, within the per-request
    /// limit.
    fn with_max_names(self, _max: usize) -> Self {
        self
    }
    fn node(req: &Self::Request) -> Option<&Node>;
    fn request_type_and_nonce(req: &Self::Request) -> (&str, &str);
    fn summary(response: &Self::Response) -> Summary<'_>;
    fn encode(response: Self::Response) -> Encoded;
    fn proxy(&self) -> &Arc<Proxy>;
    /// Refreshes the debug copy of the per-type state.
    fn status_into(&self, out: &mut BTreeMap<TypeUrl, TypeStatus>);
    fn on_request(
        &mut self,
        req: &Self::Request,
        snap: &XdsSnapshot,
    ) -> Result<Outcome<Self::Response>, RequestError>;
    fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<Self::Response>;
}

impl Protocol for StreamState {
    type Request = SotwRequest;
    type Response = SotwResponse;
    const VARIANT: &'static str = "sotw";
    fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self {
        StreamState::new(proxy, identifier)
    }
    fn node(req: &SotwRequest) -> Option<&Node> {
        req.request.node.as_ref()
    }
    fn request_type_and_nonce(req: &SotwRequest) -> (&str, &str) {
        (&req.request.type_url, &req.request.response_nonce)
    }
    fn summary(r: &SotwResponse) -> Summary<'_> {
        Summary {
            type_url: r.type_url,
            version: &r.version_info,
            nonce: &r.nonce,
            resources: r.resources.len(),
            removed: 0,
            bytes: r.bytes(),
        }
    }
    fn encode(r: SotwResponse) -> Encoded {
        r.encode()
    }
    fn proxy(&self) -> &Arc<Proxy> {
        StreamState::proxy(self)
    }
    fn status_into(&self, out: &mut BTreeMap<TypeUrl, TypeStatus>) {
        StreamState::status_into(self, out);
    }
    fn on_request(
        &mut self,
        req: &SotwRequest,
        snap: &XdsSnapshot,
    ) -> Result<Outcome, RequestError> {
        StreamState::on_request(self, req, snap)
    }
    fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<SotwResponse> {
        StreamState::on_snapshot(self, snap)
    }
}

impl Protocol for DeltaState {
    type Request = DeltaDiscoveryRequest;
    type Response = DeltaResponse;
    const VARIANT: &'static str = "delta";
    fn new(proxy: Arc<Proxy>, identifier: Arc<str>) -> Self {
        DeltaState::new(proxy, identifier)
    }
    fn with_max_names(self, max: usize) -> Self {
        DeltaState::with_max_names(self, max)
    }
    fn node(req: &DeltaDiscoveryRequest) -> Option<&Node> {
        req.node.as_ref()
    }
    fn request_type_and_nonce(req: &DeltaDiscoveryRequest) -> (&str, &str) {
        (&req.type_url, &req.response_nonce)
    }
    fn summary(r: &DeltaResponse) -> Summary<'_> {
        Summary {
            type_url: r.type_url,
            version: &r.system_version_info,
            nonce: &r.nonce,
            resources: r.resources.len(),
            removed: r.removed.len(),
            bytes: r.bytes(),
        }
    }
    fn encode(r: DeltaResponse) -> Encoded {
        r.encode()
    }
    fn proxy(&self) -> &Arc<Proxy> {
        DeltaState::proxy(self)
    }
    fn status_into(&self, out: &mut BTreeMap<TypeUrl, TypeStatus>) {
        DeltaState::status_into(self, out);
    }
    fn on_request(
        &mut self,
        req: &DeltaDiscoveryRequest,
        snap: &XdsSnapshot,
    ) -> Result<Outcome<DeltaResponse>, RequestError> {
        DeltaState::on_request(self, req, snap)
    }
    fn on_snapshot(&mut self, snap: &XdsSnapshot) -> Vec<DeltaResponse> {
        DeltaState::on_snapshot(self, snap)
    }
}
